"""The app's caches: bounded by count and bytes, and a visitor's answers kept for that visitor alone, by
construction; every cache of the app's tabs is one of those, or holds no visitor's values and says so."""
from __future__ import annotations

import importlib
import pkgutil

import pytest

import bert_demo.app.tabs
from bert_demo.app.visitors import Visitor
from bert_demo.app.state.kept import ByVisitor, Kept

# the caches of the tabs that hold no visitor's values, and why (everything else must be a ByVisitor)
SHARED = {"bert_demo.app.tabs.steps._shares": "the shares of a recipe's 1,000 draws over a named corpus, the same for "
                                              "every visitor (a visitor's typed text is counted afresh, never kept)"}


def test_the_oldest_answer_goes_first_within_the_count_and_the_bytes():
    kept = Kept(2, max_bytes=10, size=len)
    for key in ("a", "b", "c"):
        kept.kept(key, lambda key=key: key * 4)
    assert list(kept) == ["b", "c"] and kept.bytes == 8
    assert kept.kept("d", lambda: "x" * 11) == "x" * 11 and "d" not in kept  # bigger than the bound: not kept


def test_a_visitors_answer_is_never_handed_to_another_who_asks_the_same():
    kept, made = ByVisitor(8), []

    def make(visitor: str) -> str:
        made.append(visitor)
        return f"{visitor}'s pass"

    alice, bob = Visitor("alice", "10.0.0.1"), Visitor("bob", "10.0.0.1")  # one network: still two visitors
    assert kept.kept(alice, ("same text",), lambda: make("alice")) == "alice's pass"
    assert kept.kept(bob, ("same text",), lambda: make("bob")) == "bob's pass"
    assert kept.kept(alice, ("same text",), lambda: make("alice")) == "alice's pass"
    assert made == ["alice", "bob"]  # alice's was kept for alice alone
    assert {visitor for (visitor, _), _ in kept.items()} == {"alice", "bob"}


def test_a_key_without_the_visitor_cannot_be_written():
    kept = ByVisitor(8)
    with pytest.raises(TypeError):
        kept.kept(("model", "text"), ("asked",), lambda: "answer")  # the question where the visitor goes
    with pytest.raises(TypeError):
        kept.kept(("model", "text"), lambda: "answer")  # the visitor left out altogether


def tab_caches() -> dict[str, object]:
    """Every cache at the top level of a tab's module, by its dotted name."""
    found = {}
    for module in pkgutil.iter_modules(bert_demo.app.tabs.__path__):
        loaded = importlib.import_module(f"bert_demo.app.tabs.{module.name}")
        for name, value in vars(loaded).items():
            if isinstance(value, (Kept, ByVisitor)):
                found[f"{loaded.__name__}.{name}"] = value
    return found


def test_every_cache_of_the_tabs_is_kept_by_visitor_unless_it_holds_no_visitors_values():
    caches = tab_caches()
    assert {"bert_demo.app.tabs.steps._passes", "bert_demo.app.tabs.learning._gradients"} <= set(caches)
    for name, cache in caches.items():
        assert isinstance(cache, ByVisitor) or name in SHARED, f"{name} is shared by every visitor"
    assert set(SHARED) <= set(caches)  # no stale excuse
