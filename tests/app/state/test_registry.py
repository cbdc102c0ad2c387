"""bert_demo/app/registry.py: the app's state, and its warm start."""
from __future__ import annotations

from bert_demo.app.registry import Registry


def test_warming_up_loads_the_default_model_in_the_background_so_the_first_question_finds_it(make_checkpoint,
                                                                                            tmp_path):
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    assert not registry.catalog._cache
    thread = registry.warm_up()
    thread.join(timeout=60)
    assert [key[0] for key in registry.catalog._cache] == ["checkpoints/tiny-test"]
    assert registry.catalog.load("checkpoints/tiny-test") is next(iter(registry.catalog._cache.values()))


def test_warming_up_an_app_with_no_model_yet_ends_quietly(tmp_path, caplog):
    registry = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "runs", device="cpu", allow_hub=False)
    registry.warm_up().join(timeout=60)
    assert not registry.catalog._cache and not [r for r in caplog.records if r.exc_info]
