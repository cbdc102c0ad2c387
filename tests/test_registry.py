"""The app's backend state, called directly: model names and paths, the model cache, caps, the training job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bert_demo.checkpoint import read_metadata
from bert_demo.app import models
from bert_demo.app.models import LIVE, MAX_CARD_CHARS
from bert_demo.app.registry import Registry
from bert_demo.app.visitors import Visitor
from bert_demo.config import PRESETS
from bert_demo.app.runs import (
    ADDRESS_SHARE,
    CLAIM_PREFIX,
    UPLOAD_PREFIX,
    VISITOR_SHARE,
    Caps,
    TrainingJob,
    claim_folder,
    folder_bytes,
    run_bytes,
)
from bert_demo.app.text import job_status
from bert_demo.train_config import APP_RUN, TrainConfig, default

@pytest.fixture(scope="module")
def roots(make_checkpoint, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    make_checkpoint(base / "checkpoints" / "tiny-test")
    make_checkpoint(base / "checkpoints" / "another", card=None)
    (base / "checkpoints" / "not-a-model").mkdir()
    (base / "runs").mkdir()
    return {"checkpoints": base / "checkpoints", "runs": base / "runs", "base": base}


@pytest.fixture
def registry(roots) -> Registry:
    return Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu", allow_hub=False)


def test_lists_shipped_checkpoints_and_runs_newest_first(make_checkpoint, roots, tmp_path):
    runs = tmp_path / "runs"
    make_checkpoint(runs / "older")
    make_checkpoint(runs / "newer")
    os.utime(runs / "older", (time.time() - 100, time.time() - 100))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    names = [e.name for e in registry.list_models()]
    assert names == ["checkpoints/another", "checkpoints/tiny-test", "runs/newer", "runs/older"]
    assert registry.default_model() == "checkpoints/another"
    labels = dict((name, label) for label, name in registry.choices())
    assert labels["runs/newer"] == "newer (trained here)" and labels["checkpoints/another"] == "another (shipped)"


def test_falls_back_to_the_newest_run_then_to_a_message(make_checkpoint, tmp_path):
    make_checkpoint(tmp_path / "runs" / "only-run")
    registry = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "runs", device="cpu")
    assert registry.default_model() == "runs/only-run"
    empty = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "none2", device="cpu")
    assert empty.list_models() == [] and empty.default_model() is None
    with pytest.raises(ValueError, match="Train tab"):
        empty.load(None)


def test_names_and_paths_inside_the_roots_resolve(registry, roots):
    assert registry.resolve("checkpoints/tiny-test").folder == roots["checkpoints"] / "tiny-test"
    assert registry.resolve(str(roots["checkpoints"] / "tiny-test")).name == "checkpoints/tiny-test"
    assert registry.resolve(str(roots["checkpoints"] / "x" / ".." / "tiny-test")).name == "checkpoints/tiny-test"
    assert registry.resolve("tiny-test").name == "checkpoints/tiny-test"  # a bare local name


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
        registry.resolve(name)


def test_a_symlink_out_of_the_root_is_refused(make_checkpoint, registry, roots, tmp_path):
    outside = make_checkpoint(tmp_path / "outside")
    link = roots["checkpoints"] / "link"
    link.symlink_to(outside, target_is_directory=True)
    try:
        assert "checkpoints/link" not in [e.name for e in registry.list_models()]
        with pytest.raises(ValueError, match="no model called"):
            registry.resolve("checkpoints/link")
    finally:
        link.unlink()


def test_hub_ids_are_passed_on_only_when_allowed(roots):
    offline = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=False)
    with pytest.raises(ValueError, match="turned off"):
        offline.resolve("google/bert_uncased_L-2_H-128_A-2")
    online = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=True)
    entry = online.resolve("google/bert_uncased_L-2_H-128_A-2")
    assert entry.folder is None and entry.name == "google/bert_uncased_L-2_H-128_A-2"


def test_an_extra_models_folder_from_the_environment(make_checkpoint, roots, tmp_path, monkeypatch):
    make_checkpoint(tmp_path / "extra" / "mine")
    monkeypatch.setenv("BERT_DEMO_MODELS_DIR", str(tmp_path / "extra"))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"])
    assert "models/mine" in [e.name for e in registry.list_models()]
    assert registry.resolve(str(tmp_path / "extra" / "mine")).name == "models/mine"


def test_models_are_loaded_once_and_evicted_least_recently_used(roots):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], cache_size=1, device="cpu")
    first = registry.load("checkpoints/tiny-test")
    assert registry.load("checkpoints/tiny-test") is first
    assert not first.model.training and first.folder == roots["checkpoints"] / "tiny-test"
    registry.load("checkpoints/another")
    assert registry.load("checkpoints/tiny-test") is not first


def test_model_info_has_config_size_metrics_and_card(registry):
    info = registry.model_info("checkpoints/tiny-test")
    assert info["config"]["num_hidden_layers"] == 2 and info["parameters"] > 100_000
    assert info["device"] == "cpu" and info["model_card"].startswith("# Test model")
    assert info["train_config"]["preset"] == "tiny" and info["step"] == 10
    assert info["last_train"]["mlm_loss"] == 6.1 and info["last_val"]["nsp_acc"] == 0.55
    assert registry.model_info("checkpoints/another")["model_card"] is None
    entry, config = registry.config_of("checkpoints/tiny-test")  # from config.json, read once with the name
    assert entry.config is config and (config.num_hidden_layers, config.num_attention_heads) == (2, 2)
    assert "2 layers" in registry.model_summary("checkpoints/tiny-test")


def test_model_card_is_shown_without_its_yaml_metadata_and_cut_when_too_long(make_checkpoint, tmp_path):
    registry = Registry(checkpoints_dir=tmp_path, runs_dir=tmp_path / "runs", device="cpu", allow_hub=False)
    make_checkpoint(tmp_path / "carded", card="---\nlanguage: en\ntags: [bert]\n---\n\n# Carded\nText.\n")
    assert registry.model_info("checkpoints/carded")["model_card"] == "\n# Carded\nText.\n"
    long_card = "---\nlicense: mit\n---\n# Long\n" + "word " * MAX_CARD_CHARS
    make_checkpoint(tmp_path / "long-card", card=long_card)
    shown = registry.model_info("checkpoints/long-card")["model_card"]
    assert shown.startswith("# Long\nword ") and "license" not in shown
    assert len(shown) < MAX_CARD_CHARS + 100 and shown.endswith(f"longer than {MAX_CARD_CHARS:,} characters.)*")


def test_zip_download_is_a_transformers_folder(registry, tmp_path):
    from transformers import BertForPreTraining as HFBert

    (registry.roots["checkpoints"] / "tiny-test" / "optimizer.safetensors").write_bytes(b"resume only")
    archive = registry.zip_checkpoint("checkpoints/tiny-test")
    assert archive.name == "tiny-test.zip"
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        z.extractall(tmp_path)
    assert "tiny-test/config.json" in names and "tiny-test/model.safetensors" in names
    assert not any(n.endswith("optimizer.safetensors") for n in names)
    model = HFBert.from_pretrained(tmp_path / "tiny-test")
    assert model.config.num_hidden_layers == 2


def test_two_downloads_of_the_same_model_at_once_both_get_a_whole_zip(registry, monkeypatch):
    registry.zip_checkpoint("checkpoints/tiny-test").unlink()  # as if nobody had downloaded it yet
    in_step = threading.Barrier(2, timeout=30)
    write = zipfile.ZipFile.write

    def write_in_step(self, *args, **kwargs):  # both downloads are half-way through their zip at the same time
        write(self, *args, **kwargs)
        in_step.wait()

    monkeypatch.setattr(zipfile.ZipFile, "write", write_in_step)
    results = []

    def download():
        try:
            results.append(registry.zip_checkpoint("checkpoints/tiny-test"))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            results.append(exc)

    threads = [threading.Thread(target=download) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(isinstance(r, Path) for r in results) and len(results) == 2, results
    with zipfile.ZipFile(results[0]) as archive:
        assert archive.testzip() is None and "tiny-test/model.safetensors" in archive.namelist()
    assert not [p for p in results[0].parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("settings, message", [
    ({"preset": "base"}, "not available on this machine"),
    ({"steps": Caps("cpu").bounds("steps")[1] + 1}, "steps must be between"),
    ({"batch_size": 1000}, "batch size must be between"),
    ({"seq_len": 512}, "sequence length must be between"),
    ({"vocab_size": 100}, "vocabulary size must be between"),
    ({"steps": 10.5}, "whole number"),
    ({"steps": "many"}, "whole number"),
    ({"lr": 5.0}, "learning rate must be between"),
    ({"lr": "fast"}, "learning rate must be a number"),
    ({"corpus": ["wiki", "/etc/passwd"]}, "unknown corpus"),
    ({"corpus": ["wiki", "wikitext-103"]}, r"wikitext-103 is too large to train on in the app: use the command line"),
    ({"corpus": []}, "choose a corpus"),
])
def test_training_settings_beyond_the_caps_are_refused(registry, settings, message):
    with pytest.raises(ValueError, match=message):
        registry.train_config(**settings)


def test_the_apps_default_run_is_within_the_cpu_caps_and_uses_the_default_recipe(registry):
    config = registry.train_config()  # what one click on Start training asks for
    assert {key: getattr(config, key) for key in APP_RUN} == APP_RUN
    assert registry.caps.machine == "cpu"  # validated against the CPU caps by train_config
    assert (config.local_heads, config.mask_prob, config.dropout) == (default("local_heads"), default("mask_prob"),
                                                                      default("dropout"))
    assert Path(config.out).parent == registry.roots["runs"]
    assert config.log_every == APP_RUN["steps"] // 50
    validated = [step for step in range(1, config.steps + 1) if step % config.eval_every == 0 or step == config.steps]
    assert len(validated) == 6 and validated[-1] - validated[-2] > config.eval_every / 2  # never two in a row


def test_a_run_on_two_corpora_gets_a_valid_folder_name(registry):
    config = registry.train_config(corpus=["news", "wiki"])
    assert config.corpus == "news,wiki" and Path(config.out).name.startswith("tiny-news-wiki-")


def test_continuing_a_saved_model_names_its_folder_and_refuses_what_cannot_be_continued(registry, roots,
                                                                                         monkeypatch):
    config = registry.train_config(corpus=["wiki"], init_from="checkpoints/tiny-test")
    assert config.init_from == str(roots["checkpoints"] / "tiny-test")
    assert Path(config.out).name.startswith("tiny-test-continued-wiki-")
    with pytest.raises(ValueError, match="no model called"):
        registry.train_config(corpus=["wiki"], init_from="checkpoints/missing")
    tiny_only = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu",
                         allow_hub=False, caps=Caps("cpu", {"preset": ("tiny",)}))
    monkeypatch.setitem(PRESETS, "tiny", replace(PRESETS["tiny"], hidden_size=64))  # the checkpoint is wider
    with pytest.raises(ValueError, match="bigger than the models this machine trains \\(tiny\\)"):
        tiny_only.train_config(corpus=["wiki"], init_from="checkpoints/tiny-test")


def test_uploads_are_checked_and_copied_to_a_safe_name(write_corpus, roots, tmp_path, monkeypatch):
    private_temp = tmp_path / "temp"  # other processes' uploads must not show up in the before/after comparison
    private_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_temp))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"],
                        caps=Caps("cpu", {"steps": 10, "batch_size": 8, "seq_len": 64, "vocab_size": 1024,
                                          "preset": ("tiny",)}, max_upload_bytes=2000))
    odd = write_corpus(tmp_path / "my, odd name.txt", documents=4)
    config = registry.train_config(corpus=[], upload=str(odd), steps=10, batch_size=4, seq_len=32, vocab_size=512)
    copied = Path(config.corpus)
    assert copied.name == "upload.txt" and copied.read_text() == odd.read_text() and "," not in config.corpus
    assert "upload" in Path(config.out).name
    with pytest.raises(ValueError, match="at most 0 MB|MB are allowed"):
        registry.train_config(upload=str(write_corpus(tmp_path / "big.txt", documents=60)), steps=10, batch_size=4,
                              seq_len=32, vocab_size=512)
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"\.txt"):
        registry.train_config(upload=str(tmp_path / "data.csv"), steps=10, batch_size=4, seq_len=32, vocab_size=512)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        registry.train_config(upload=str(tmp_path / "empty.txt"), steps=10, batch_size=4, seq_len=32,
                              vocab_size=512)
    for name, content, message in [("binary.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
                                   ("latin.txt", "Café au lait. Crème brûlée.".encode("latin-1"), "not UTF-8"),
                                   ("line.txt", b"One sentence here. And a second one.", "document")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"cannot be trained on: .*{message}"):
            registry.train_config(corpus=[], upload=str(tmp_path / name), steps=10, batch_size=4, seq_len=32,
                                  vocab_size=512)
    beside_wiki = registry.train_config(corpus=["wiki"], upload=str(tmp_path / "line.txt"), steps=10, batch_size=4,
                                        seq_len=32, vocab_size=512)  # one document is fine next to a corpus
    assert beside_wiki.corpus.startswith("wiki,")
    uploads = set(private_temp.glob("bert-demo-upload-*"))
    assert copied.parent in uploads
    with pytest.raises(ValueError, match="steps"):
        registry.train_config(upload=str(odd), steps=0)
    assert set(private_temp.glob("bert-demo-upload-*")) == uploads  # a refusal leaves no copy


def test_a_training_job_streams_records_serves_live_snapshots_and_saves_a_run(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    corpus = write_corpus(tmp_path / "corpus.txt")
    job = registry.start_training(corpus=[], upload=str(corpus), steps=300, batch_size=4, seq_len=32,
                                  vocab_size=512, owner="me")
    seen, records = 0, []
    while not any(r["kind"] == "train" for r in records) and job.done is None:
        records += job.wait(seen, timeout=1.0)
        seen = len(records)
    assert any(r["kind"] == "train" for r in records), records
    assert registry.list_models("me")[0].name == LIVE
    live = registry.load(LIVE, "me")
    assert live.model is not job.trainer.model and not live.model.training
    assert registry.model_info(LIVE, "me")["train_config"]["steps"] == 300
    assert registry.list_models("someone else")[0].name != LIVE  # trained on an upload: private to its owner
    with pytest.raises(ValueError, match="no run is pre-training"):
        registry.load(LIVE, "someone else")
    assert "Step" in job_status(job) and "tokens/s" in job_status(job)
    registry.finish_wait_s = 0.1
    with pytest.raises(ValueError, match="another run"):  # one run at a time
        registry.start_training(corpus=["wiki"], steps=10)
    assert not registry.stop_training(owner="someone else")
    assert registry.stop_training(owner="me")
    job.thread.join(timeout=60)
    assert not job.running and job.done["reason"] == "stopped"
    assert job_status(job).startswith("Stopped at step") and f"runs/{job.name}" in job_status(job)
    assert registry.list_models("me")[0].name != LIVE
    assert f"runs/{job.name}" in [e.name for e in registry.list_models("me")]
    assert f"runs/{job.name}" not in [e.name for e in registry.list_models("someone else")]
    with pytest.raises(ValueError, match="there is no model called"):
        registry.load(f"runs/{job.name}", "someone else")
    saved = json.loads((tmp_path / "runs" / job.name / "bert_demo.json").read_text())
    assert saved["step"] == job.done["step"]
    assert not Path(job.trainer.config.corpus).exists()  # the copied upload is cleaned up


def test_a_failing_run_ends_with_an_error_record(write_corpus, roots, tmp_path, monkeypatch):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    corpus = write_corpus(tmp_path / "corpus.txt")

    def vanished(source):
        raise ValueError(f"{source} vanished")

    monkeypatch.setattr("bert_demo.trainer.load_corpus", vanished)  # accepted at the start, gone when the run reads it
    registry.train_in_process = False  # the patch is in this process (test_run_process.py covers the child's errors)
    job = registry.start_training(corpus=[], upload=str(corpus), steps=10, batch_size=4, seq_len=32, vocab_size=512)
    job.thread.join(timeout=60)
    assert job.done["reason"] == "error" and "vanished" in job.done["message"]
    assert job_status(job).startswith("Training failed")


def test_old_app_runs_are_pruned_when_a_new_run_starts_and_other_folders_never(make_checkpoint, write_corpus, roots,
                                                                               tmp_path):
    runs = tmp_path / "runs"
    for age, name in enumerate(["newest", "middle", "oldest"]):
        make_checkpoint(runs / name, origin="app")
        os.utime(runs / name, (time.time() - 100 * age, time.time() - 100 * age))
    make_checkpoint(runs / "not-ours")
    (runs / "not-ours" / "bert_demo.json").unlink()  # a folder someone put there by hand is never deleted
    make_checkpoint(runs / "from-the-cli", origin="cli")  # nor is an older run trained with the CLI
    os.utime(runs / "from-the-cli", (time.time() - 1000, time.time() - 1000))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    registry.max_runs, registry.min_run_age_s = 3, 150  # "oldest" is 200 s old, "middle" 100 s
    downloads = registry.zip_checkpoint("runs/oldest").parent
    job = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), steps=2, batch_size=2,
                                  seq_len=32, vocab_size=512)
    job.thread.join(timeout=60)
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) == sorted(
        ["newest", "middle", "not-ours", "from-the-cli", job.name])
    assert read_metadata(runs / job.name)["origin"] == "app"
    assert not downloads.exists()  # the deleted run's zip went with it


def test_the_model_a_new_run_starts_from_is_never_pruned_to_make_room_for_it(make_checkpoint, roots, tmp_path):
    runs = tmp_path / "runs"
    for name in ("the-start", "another"):
        make_checkpoint(runs / name, origin="app")
        os.utime(runs / name, (time.time() - 7200, time.time() - 7200))  # old enough, and past the newest kept
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    registry._prune_runs(keep=0, protect=runs / "the-start")  # what `_start` does for a run from that model
    assert (runs / "the-start").is_dir() and not (runs / "another").exists()


def test_a_run_trained_moments_ago_is_never_pruned_by_someone_elses_runs(make_checkpoint, write_corpus, roots,
                                                                         tmp_path):
    runs = tmp_path / "runs"
    make_checkpoint(runs / "someone-elses", origin="app")
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    registry.max_runs = 1  # keep 0 old runs: only the minimum age protects it
    for _ in range(2):
        job = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), steps=2,
                                      batch_size=2, seq_len=32, vocab_size=512, name=f"run-{time.time_ns()}")
        job.thread.join(timeout=60)
    assert (runs / "someone-elses").is_dir()


def test_starting_a_run_clears_what_a_killed_app_left_in_runs_and_keeps_live_writers_folders(
        make_checkpoint, write_corpus, roots, tmp_path):
    runs = tmp_path / "runs"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    half_written = runs / f".mini-news-20260101-120000.{dead.pid}.k2x9_q1a.tmp"  # killed while saving
    half_written.mkdir(parents=True)
    set_aside = make_checkpoint(runs / f".kept.{dead.pid}.old")  # killed between the two renames
    live = runs / f".elsewhere.{os.getpid()}.abcd1234.tmp"  # a save still going on (this process)
    live.mkdir()
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    job = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), steps=2, batch_size=2,
                                  seq_len=32, vocab_size=512)
    job.thread.join(timeout=60)
    assert not half_written.exists() and not set_aside.exists() and live.is_dir()
    assert {"runs/kept", f"runs/{job.name}"} <= {entry.name for entry in registry.list_models()}


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
        registry.load("tests")
    assert asked == ["tests"]


def test_a_run_on_an_upload_is_shared_only_when_its_owner_says_so(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    names = {}
    for share in (False, True):
        job = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), steps=2,
                                      batch_size=2, seq_len=32, vocab_size=512, owner="me", share=share,
                                      name=f"shared-{share}")
        job.thread.join(timeout=60)
        names[share] = f"runs/{job.name}"
    seen_by_others = [e.name for e in registry.list_models("someone else")]
    assert names[True] in seen_by_others and names[False] not in seen_by_others
    assert {names[True], names[False]} <= {e.name for e in registry.list_models("me")}
    wiki_run = registry.start_training(corpus=["wiki"], steps=1, batch_size=2, seq_len=32, vocab_size=512,
                                       owner="me", name="on-wiki")
    wiki_run.thread.join(timeout=120)
    assert "runs/on-wiki" in [e.name for e in registry.list_models("someone else")]  # no upload: nothing to hide


def test_a_cards_svg_pictures_are_inlined_and_nothing_outside_its_folder_is_read(tmp_path, monkeypatch):
    (tmp_path / "learning-curve.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (tmp_path / "big.svg").write_text("<svg>" + " " * 300 + "</svg>")
    (tmp_path / "README.md").write_text("![curve](learning-curve.svg) ![up](../secret.svg) ![abs](/etc/x.svg) "
                                        "![gone](missing.svg) ![big](big.svg)")
    monkeypatch.setattr(models, "MAX_PICTURE_BYTES", 200)
    text = models.card_text(tmp_path / "README.md")
    assert "![curve](data:image/svg+xml;base64," in text
    assert "![up](../secret.svg)" in text and "![abs](/etc/x.svg)" in text  # paths are never followed
    assert "![gone](missing.svg)" in text and "![big](big.svg)" in text  # missing or too big: left as written


def test_continuing_a_private_run_keeps_it_private_to_its_owner_even_on_a_public_corpus(write_corpus, roots,
                                                                                      tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"steps": 1, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    private = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), owner="me",
                                      name="private", **small)
    private.thread.join(timeout=60)
    for share in (False, True):  # sharing applies to a new upload; it cannot publish the private model continued
        job = registry.start_training(corpus=["wiki"], init_from="runs/private", owner="me", share=share,
                                      name=f"continued-{share}", **small)
        job.thread.join(timeout=120)
        assert job.done["checkpoint"], job.records
        assert f"runs/{job.name}" in [e.name for e in registry.list_models("me")]
        assert f"runs/{job.name}" not in [e.name for e in registry.list_models("someone else")]
        with pytest.raises(ValueError, match="there is no model called"):
            registry.load(f"runs/{job.name}", "someone else")


def test_runs_started_with_the_same_name_each_get_a_folder_of_their_own(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"steps": 1, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    jobs = []
    for owner, share in (("me", False), ("you", True)):  # a private run and a public one, in the same second
        jobs.append(registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / f"{owner}.txt")),
                                            owner=owner, share=share, name="same-second", **small))
        jobs[-1].thread.join(timeout=60)
    assert [job.name for job in jobs] == ["same-second", "same-second-2"]
    assert [read_metadata(tmp_path / "runs" / job.name).get("visible_to") for job in jobs] == ["me", None]
    assert all(f"runs/{job.name}" in job_status(job) for job in jobs)


def test_folders_claimed_at_once_by_many_threads_are_all_different(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: claim_folder(str(tmp_path / "run")), range(8)))
    assert len(set(claimed)) == 8 and all(Path(folder).is_dir() for folder in claimed)


def test_a_folder_a_killed_app_claimed_is_swept_at_the_next_start_and_a_live_apps_is_kept(make_checkpoint, roots,
                                                                                          tmp_path):
    runs = tmp_path / "runs"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed, live = Path(claim_folder(str(runs / "killed"))), Path(claim_folder(str(runs / "live")))
    (killed / f"{CLAIM_PREFIX}{os.getpid()}").rename(killed / f"{CLAIM_PREFIX}{gone.stdout.strip()}")
    saved = make_checkpoint(runs / "saved")
    (saved / f"{CLAIM_PREFIX}{gone.stdout.strip()}").touch()  # a marker beside saved files: never a sweep's
    Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    assert not killed.exists() and live.is_dir() and (saved / "config.json").is_file()


def test_a_run_stopped_before_its_first_step_leaves_no_empty_folder(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    job = registry.start_training(corpus=["wiki"], steps=5, batch_size=2, seq_len=32, vocab_size=512, owner="me",
                                  name="never-trained")
    job.stop()
    job.thread.join(timeout=60)
    assert job.done["checkpoint"] is None
    assert not (tmp_path / "runs" / "never-trained").exists()


def test_the_app_asks_torch_whether_it_has_a_gpu_before_the_form_takes_its_caps(roots, monkeypatch):
    import torch

    monkeypatch.delenv("BERT_DEMO_DEVICE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    make = lambda: Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=False)  # noqa: E731
    monkeypatch.setattr(models, "GPU_DRIVER_SIGNS", (str(roots["checkpoints"]),))  # a driver file that exists
    for available, device, machine in ((True, "cuda", "gpu"), (False, "cpu", "cpu")):  # e.g. a CPU-only torch
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        registry = make()
        assert (registry.device, registry.caps.machine) == (device, machine)
    monkeypatch.setattr(models, "GPU_DRIVER_SIGNS", (str(roots["checkpoints"] / "absent"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("torch asked on a host with no GPU driver"))
    assert make().device == "cpu"


class _EndedTrainer:
    """A run that ends at once, holding a model as a finished Trainer does."""

    def __init__(self, device: str, out: Path):
        self.config = TrainConfig(corpus="wiki", out=str(out), device=device)
        self.model, self.tokenizer, self.step, self.visible_to = torch.nn.Linear(1, 1), None, 1, None

    def run(self):
        yield {"kind": "done", "reason": "finished", "step": 1, "checkpoint": None, "message": None}

    def stop(self) -> None:
        """Nothing to stop: the run ends by itself."""


def test_an_ended_run_is_no_longer_live_and_on_a_gpu_gives_its_model_back(roots, tmp_path, monkeypatch):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    for device in ("cpu", "cuda"):
        job = TrainingJob(_EndedTrainer(device, tmp_path / device), device)
        job._live = (1, "a live copy")
        registry.job = job
        job.start()
        job.thread.join(timeout=10)
        assert job._live is None
        with pytest.raises(ValueError, match="no run is pre-training right now"):
            registry.resolve(LIVE)
        assert LIVE not in [e.name for e in registry.list_models()]
    assert registry.job.trainer.model is None and emptied == [True]


def test_a_run_is_refused_with_a_message_when_runs_would_pass_their_disk_budget_or_a_visitor_their_share(
        write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"corpus": [], "steps": 2, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    upload = lambda: str(write_corpus(tmp_path / "c.txt"))  # noqa: E731  (each run takes its own copy)
    need = run_bytes(registry.train_config(**small, upload=upload()))
    registry.runs_budget = int(2 * need)  # room for two runs, but one visitor's share is less than one
    with pytest.raises(ValueError, match="your runs here fill 0 MB of the .* one visitor may use"):
        registry.start_training(owner="me", upload=upload(), **small)
    registry.runs_budget = int(need / VISITOR_SHARE) + 1  # a visitor's share holds one run's estimate
    for owner in ("me", "you"):
        job = registry.start_training(owner=owner, upload=upload(), **small)
        job.thread.join(timeout=60)
        assert job.done["checkpoint"], job.records
        assert 0 < folder_bytes(Path(job.done["checkpoint"])) <= need  # the estimate is an upper bound
    with pytest.raises(ValueError, match="your runs here fill .* one visitor may use"):
        registry.start_training(owner="me", upload=upload(), **small)
    used = folder_bytes(tmp_path / "runs")
    registry.runs_budget = used + need - 1
    with pytest.raises(ValueError, match="the runs trained here fill .* this app keeps for them"):
        registry.start_training(owner="someone new", upload=upload(), **small)
    assert len(list((tmp_path / "runs").iterdir())) == 2  # nobody's run was deleted to make room


def test_new_sessions_from_one_address_share_one_networks_part_of_the_disk(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"corpus": [], "steps": 2, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    upload = lambda: str(write_corpus(tmp_path / "c.txt"))  # noqa: E731  (each run takes its own copy)
    need = run_bytes(registry.train_config(**small, upload=upload()))
    registry.runs_budget = int(need / VISITOR_SHARE) + 1  # a visitor's part holds one run, a network's two
    assert int(registry.runs_budget * ADDRESS_SHARE) < 3 * need
    for session in ("session-1", "session-2"):
        job = registry.start_training(owner=Visitor(session, "93.184.216.34"), upload=upload(), **small)
        job.thread.join(timeout=60)
    with pytest.raises(ValueError, match="the runs from your network fill .* one network may use"):
        registry.start_training(owner=Visitor("session-3", "93.184.216.34"), upload=upload(), **small)
    other = registry.start_training(owner=Visitor("session-4", "151.101.1.69"), upload=upload(), **small)
    other.thread.join(timeout=60)
    assert other.done["checkpoint"], other.records


def test_private_copies_a_killed_app_left_are_swept_at_start_and_a_live_apps_kept(roots, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{UPLOAD_PREFIX}{int(gone.stdout)}-abc"  # a process that has ended
    live = tmp_path / f"{UPLOAD_PREFIX}{os.getpid()}-def"
    for folder in (left, live):
        folder.mkdir()
        (folder / "upload.txt").write_text("a visitor's private text")
    Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu")
    assert not left.exists() and (live / "upload.txt").is_file()


def test_an_upload_with_words_thousands_of_letters_long_is_refused_before_it_reaches_the_slot(registry, tmp_path):
    upload = tmp_path / "long-words.txt"
    upload.write_text("\n\n".join(f"{'a' * 16_000} {'b' * 16_000}. {'c' * 16_000} ends." for _ in range(40)))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="cannot be trained on: it has a word of 16,00[01] characters; at most 100"):
        registry.train_config(corpus=[], upload=str(upload))
    assert time.perf_counter() - started < 5


def test_the_fork_server_for_cpu_runs_is_started_only_where_there_is_no_gpu(monkeypatch):
    from bert_demo.app import backend as backend_module, run_process

    started = []
    monkeypatch.setattr(run_process, "warm_up", lambda: started.append(True))
    for available in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        monkeypatch.setattr(backend_module, "_LOADED", None)
        backend_module.backend()
    assert started == [True]  # on the GPU host, runs train in a thread: no fork server


def test_the_waiting_line_states_the_time_left_the_run_in_progress_measured(roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    release = threading.Event()

    class Slow(_EndedTrainer):
        def run(self):
            yield {"kind": "train", "step": 10, "elapsed": 20.0}
            yield {"kind": "train", "step": 20, "elapsed": 80.0}  # 6 s a step, 180 steps to go: 18 minutes
            release.wait(timeout=30)
            yield from super().run()

    trainer = Slow("cpu", tmp_path / "slow")
    trainer.config.steps = 200
    job = registry.job = TrainingJob(trainer, "slow")
    assert registry._time_left_now() == ""  # not started: nothing measured yet
    job.start()
    while len(job.records) < 2:
        time.sleep(0.01)
    assert registry._time_left_now() == " The run training now has about 18 min left."
    release.set()
    job.thread.join(timeout=10)


def test_the_app_hands_freed_heap_memory_back_to_the_system_while_it_runs(monkeypatch):
    from bert_demo import runtime
    from bert_demo.app import backend as backend_module

    trims = []
    monkeypatch.setattr(backend_module, "TRIM_EVERY_S", 0.05)
    monkeypatch.setattr(runtime, "release_free_memory", lambda: trims.append(time.monotonic()))
    monkeypatch.setattr(backend_module, "_LOADED", None)
    backend_module.backend()
    deadline = time.monotonic() + 5
    while len(trims) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(trims) >= 2
