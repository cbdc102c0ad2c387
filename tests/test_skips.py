"""A missing tool, package or download skips a test on a person's machine and fails it under CI, where a skip would
hide a broken install."""
from __future__ import annotations

import pytest

from tests.conftest import import_or_skip, skip_or_fail


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_a_missing_tool_or_package_fails_the_test(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="chromium not found.*CI is set"):
        skip_or_fail("chromium not found")
    with pytest.raises(pytest.fail.Exception, match="no_such_package_here is not installed"):
        import_or_skip("no_such_package_here")


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_a_missing_tool_or_package_skips_the_test(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="chromium not found"):
        skip_or_fail("chromium not found")
    with pytest.raises(pytest.skip.Exception, match="playwright is not installed"):
        import_or_skip("no_such_package_here", "playwright is not installed")


def test_an_installed_package_is_imported_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert import_or_skip("json").dumps([1]) == "[1]"
