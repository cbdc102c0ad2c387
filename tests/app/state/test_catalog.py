"""bert_demo/app/state/catalog.py: models by name (shipped, trained here, an extra folder, hub ids, the run in
progress), checked before any path is touched, loaded once and kept in a small cache."""
from __future__ import annotations

import os
import time

import pytest

from bert_demo.app.registry import Registry


def test_lists_shipped_checkpoints_and_runs_newest_first(make_checkpoint, roots, tmp_path):
    runs = tmp_path / "runs"
    make_checkpoint(runs / "older")
    make_checkpoint(runs / "newer")
    os.utime(runs / "older", (time.time() - 100, time.time() - 100))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    names = [e.name for e in registry.catalog.list_models()]
    assert names == ["checkpoints/another", "checkpoints/tiny-test", "runs/newer", "runs/older"]
    assert registry.catalog.default_model() == "checkpoints/another"
    labels = dict((name, label) for label, name in registry.catalog.choices())
    assert labels["runs/newer"] == "newer (trained here)" and labels["checkpoints/another"] == "another (shipped)"


def test_the_app_opens_on_its_chosen_shipped_model_listed_first_whatever_its_name(make_checkpoint, roots, tmp_path):
    from bert_demo.app.state.catalog import OPENS_ON

    make_checkpoint(roots["checkpoints"] / OPENS_ON)
    make_checkpoint(roots["checkpoints"] / "aaa-first-by-name")
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    names = [e.name for e in registry.catalog.list_models()]
    assert names == [f"checkpoints/{OPENS_ON}", "checkpoints/aaa-first-by-name", "checkpoints/another",
                     "checkpoints/tiny-test"]
    assert registry.catalog.default_model() == f"checkpoints/{OPENS_ON}"


def test_falls_back_to_the_newest_run_then_to_a_message(make_checkpoint, tmp_path):
    make_checkpoint(tmp_path / "runs" / "only-run")
    registry = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "runs", device="cpu")
    assert registry.catalog.default_model() == "runs/only-run"
    empty = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "none2", device="cpu")
    assert empty.catalog.list_models() == [] and empty.catalog.default_model() is None
    with pytest.raises(ValueError, match="Train tab"):
        empty.catalog.load(None)


def test_names_inside_the_roots_resolve(registry, roots):
    assert registry.catalog.resolve("checkpoints/tiny-test").folder == roots["checkpoints"] / "tiny-test"
    assert registry.catalog.resolve("tiny-test").name == "checkpoints/tiny-test"  # a bare local name


def test_a_path_is_refused_even_to_a_model_that_is_there_so_no_answer_says_where_the_app_is(registry, roots):
    """A model is asked for by its name, never a path: a path is refused even where a model is there, so no answer
    confirms where the app is installed."""
    there = roots["checkpoints"] / "tiny-test"
    for path in [str(there), str(there.parent / "x" / ".." / "tiny-test"), f"../{there.parent.name}/tiny-test",
                 "./checkpoints/tiny-test"]:
        with pytest.raises(ValueError) as refused:
            registry.catalog.resolve(path)
        assert str(refused.value) == ("only model folders directly inside checkpoints/, runs/ can be loaded, by "
                                      "their name in the list (such as checkpoints/<folder>), not by a path")


OUTSIDE, NO_MODEL, NOT_A_NAME = "only model folders directly inside", "there is no model called", "is not a model name"


@pytest.mark.parametrize("name, message", [
    ("../tiny-test", OUTSIDE), ("checkpoints/../checkpoints/tiny-test", OUTSIDE),
    ("checkpoints/not-a-model", NO_MODEL), ("checkpoints/missing", NO_MODEL),
    ("checkpoints/.hidden", "'.hidden' is not a valid model folder name"), ("/etc", OUTSIDE),
    ("/etc/passwd", OUTSIDE), ("~/x", OUTSIDE), ("runs/a/b", OUTSIDE), ("a/b/c", OUTSIDE), ("..", OUTSIDE),
    ("checkpoints/", NOT_A_NAME), ("x y", NOT_A_NAME), ("C:\\models\\x", OUTSIDE), ("name\x00", NOT_A_NAME),
    ("ü/x", NOT_A_NAME),
])
def test_names_that_are_not_allowed_are_refused(registry, name, message):
    with pytest.raises(ValueError, match=message):
        registry.catalog.resolve(name)


def test_a_symlink_out_of_the_root_is_refused(make_checkpoint, registry, roots, tmp_path):
    outside = make_checkpoint(tmp_path / "outside")
    link = roots["checkpoints"] / "link"
    link.symlink_to(outside, target_is_directory=True)
    try:
        assert "checkpoints/link" not in [e.name for e in registry.catalog.list_models()]
        with pytest.raises(ValueError, match="no model called"):
            registry.catalog.resolve("checkpoints/link")
    finally:
        link.unlink()


def test_hub_ids_are_passed_on_only_when_allowed(roots):
    offline = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=False)
    with pytest.raises(ValueError, match="turned off"):
        offline.catalog.resolve("google/bert_uncased_L-2_H-128_A-2")
    online = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=True)
    entry = online.catalog.resolve("google/bert_uncased_L-2_H-128_A-2")
    assert entry.folder is None and entry.name == "google/bert_uncased_L-2_H-128_A-2"


def test_an_extra_models_folder_from_the_environment(make_checkpoint, roots, tmp_path, monkeypatch):
    make_checkpoint(tmp_path / "extra" / "mine")
    monkeypatch.setenv("BERT_DEMO_MODELS_DIR", str(tmp_path / "extra"))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"])
    assert "models/mine" in [e.name for e in registry.catalog.list_models()]
    assert registry.catalog.resolve("models/mine").folder == tmp_path / "extra" / "mine"


def test_models_are_loaded_once_and_evicted_least_recently_used(roots):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], cache_size=1, device="cpu")
    first = registry.catalog.load("checkpoints/tiny-test")
    assert registry.catalog.load("checkpoints/tiny-test") is first
    assert not first.model.training and first.folder == roots["checkpoints"] / "tiny-test"
    registry.catalog.load("checkpoints/another")
    assert registry.catalog.load("checkpoints/tiny-test") is not first


def test_model_info_has_config_size_metrics_and_card(registry):
    info = registry.catalog.model_info("checkpoints/tiny-test")
    model = registry.catalog.load("checkpoints/tiny-test").model
    assert info["config"]["num_hidden_layers"] == 3 and info["parameters"] == model.num_parameters()
    assert info["device"] == "cpu" and info["model_card"].startswith("# Test model")
    assert info["train_config"]["preset"] == "tiny" and info["step"] == 10
    assert info["last_train"]["mlm_loss"] == 6.1 and info["last_val"]["nsp_acc"] == 0.55
    assert registry.catalog.model_info("checkpoints/another")["model_card"] is None
    entry, config = registry.catalog.config_of("checkpoints/tiny-test")  # from config.json, read once with the name
    assert entry.config is config and (config.num_hidden_layers, config.num_attention_heads) == (3, 4)


def test_a_hub_shaped_name_is_never_looked_up_as_a_local_path(make_checkpoint, roots, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_checkpoint(tmp_path / "tests")  # a folder in the working directory, outside checkpoints/ and runs/
    asked = []

    def offline(name, **kwargs):
        asked.append(name)
        raise ValueError(f"could not download {name!r} from the Hugging Face Hub")

    monkeypatch.setattr("bert_demo.checkpoint.download", offline)
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu", allow_hub=True)
    with pytest.raises(ValueError, match="Hugging Face Hub"):
        registry.catalog.load("tests")
    assert asked == ["tests"]
