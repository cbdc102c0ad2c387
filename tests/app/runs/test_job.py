"""bert_demo/app/runs/job.py: a run the app follows streams its records and live weights, ends with a record whatever
happens, gives its model back once over, and names a visitor's text by its name (test_slot.py: the line that starts
them)."""
from __future__ import annotations

import json
import os
import queue
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bert_demo.app.runs.estimates import job_status
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.state.catalog import LIVE
from bert_demo.app.registry import Registry
from bert_demo.training.settings import TrainConfig


class _EndedTrainer:
    """A run that ends at once, holding a model as a finished run does."""

    def __init__(self, device: str, out: Path):
        self.config = TrainConfig(corpus="wiki", out=str(out), device=device)
        self.model, self.tokenizer, self.step, self.visible_to = torch.nn.Linear(1, 1), None, 1, None

    def run(self):
        yield {"kind": "done", "reason": "finished", "step": 1, "checkpoint": None, "message": None}

    def stop(self) -> None:
        """Nothing to stop: the run ends by itself."""


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
    assert registry.catalog.list_models("me")[0].name == LIVE
    live = registry.catalog.load(LIVE, "me")
    assert live.model is not job.trainer.model and not live.model.training
    assert registry.catalog.model_info(LIVE, "me")["train_config"]["steps"] == 300
    assert registry.catalog.list_models("someone else")[0].name != LIVE  # trained on an upload: private to its owner
    with pytest.raises(ValueError, match="no run is pre-training"):
        registry.catalog.load(LIVE, "someone else")
    assert "Step" in job_status(job) and "tokens/s" in job_status(job)
    registry.slot.finish_wait_s = 0.1
    with pytest.raises(ValueError, match="another run"):  # one run at a time
        registry.start_training(corpus=["wiki"], steps=10)
    assert not registry.slot.stop(owner="someone else")
    assert registry.slot.stop(owner="me")
    job.thread.join(timeout=60)
    assert not job.running and job.done["reason"] == "stopped"
    assert job_status(job).startswith("Stopped at step") and f"runs/{job.name}" in job_status(job)
    assert registry.catalog.list_models("me")[0].name != LIVE
    assert f"runs/{job.name}" in [e.name for e in registry.catalog.list_models("me")]
    assert f"runs/{job.name}" not in [e.name for e in registry.catalog.list_models("someone else")]
    with pytest.raises(ValueError, match="there is no model called"):
        registry.catalog.load(f"runs/{job.name}", "someone else")
    saved = json.loads((tmp_path / "runs" / job.name / "bert_demo.json").read_text())
    assert saved["step"] == job.done["step"]
    assert not Path(job.trainer.config.corpus).exists()  # the copied upload is cleaned up


def test_a_failing_run_ends_with_an_error_record(write_corpus, roots, tmp_path, monkeypatch):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    corpus = write_corpus(tmp_path / "corpus.txt")

    def vanished(source):
        raise ValueError(f"{source} vanished")

    # accepted at the start, gone when the run reads it
    monkeypatch.setattr("bert_demo.training.pretraining.load_corpus", vanished)
    registry.slot.in_process = False  # the patch is in this process (test_run_process.py covers the child's errors)
    job = registry.start_training(corpus=[], upload=str(corpus), steps=10, batch_size=4, seq_len=32, vocab_size=512)
    job.thread.join(timeout=60)
    assert job.done["reason"] == "error" and "vanished" in job.done["message"]
    assert job_status(job).startswith("Training failed")


def test_an_ended_run_is_no_longer_live_and_on_a_gpu_gives_its_model_back(roots, tmp_path, monkeypatch):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    for device in ("cpu", "cuda"):
        job = TrainingJob(_EndedTrainer(device, tmp_path / device), device)
        job._live = (1, "a live copy", "its tokenizer")
        registry.slot.job = job
        job.start()
        job.thread.join(timeout=10)
        assert job._live is None
        with pytest.raises(ValueError, match="no run is pre-training right now"):
            registry.catalog.resolve(LIVE)
        assert LIVE not in [e.name for e in registry.catalog.list_models()]
    assert registry.slot.job.trainer.model is None and emptied == [True]


class _Scripted(_EndedTrainer):
    """A run whose records the test hands it one at a time."""

    def __init__(self, out: Path, steps: int, eval_every: int):
        super().__init__("cpu", out)
        self.config = replace(self.config, steps=steps, eval_every=eval_every)
        self.script: queue.Queue = queue.Queue()

    def run(self):
        while (record := self.script.get(timeout=30)) is not None:
            yield record
        yield from super().run()


def test_the_clock_keeps_counting_down_while_the_run_checks_itself_and_counts_the_checks_to_come_apart(tmp_path):
    trainer = _Scripted(tmp_path / "run", steps=100, eval_every=20)
    job = TrainingJob(trainer, "scripted")
    job.start()

    def arrive(*records):
        for record in records:
            trainer.script.put(record)
        while len(job.records) < arrive.sent + len(records):
            time.sleep(0.01)
        arrive.sent += len(records)

    arrive.sent = 0
    train = {"kind": "train", "tokens_per_s": 100.0}
    arrive({**train, "step": 10, "elapsed": 10.0}, {**train, "step": 20, "elapsed": 20.0},  # 1 s a step
           {"kind": "check", "step": 20, "elapsed": 20.0})
    before, status = job.seconds_left, job_status(job)
    assert status.endswith("· checking on held-out sentences…") and "5 checks on held-out sentences, not timed yet" \
        in status  # the one under way, and those at steps 40, 60, 80 and 100
    time.sleep(0.3)
    assert job.seconds_left < before  # it sat still for 40-60 s at each check (issue 50)
    arrive({"kind": "val", "step": 20, "elapsed": 50.0}, {**train, "step": 30, "elapsed": 60.0})  # a 30 s check
    assert job.pace() == (1.0, 30.0, 4)  # the check's 30 s are not in the steps' pace
    assert 70 * 1.0 + 4 * 30.0 - 1 < job.seconds_left <= 70 * 1.0 + 4 * 30.0
    assert "not timed yet" not in job_status(job) and "checking" not in job_status(job)
    trainer.script.put(None)
    job.thread.join(timeout=10)


class _PreparingTrainer(_EndedTrainer):
    """A run on a visitor's private copy that says what it reads, then fails to read it."""

    def __init__(self, copy: Path, out: Path):
        super().__init__("cpu", out)
        self.copy = copy

    def run(self):
        yield {"kind": "status", "message": f"loading corpus {'wiki,' + str(self.copy)!r}"}
        yield {"kind": "done", "reason": "error", "step": 0, "checkpoint": None,
               "message": f"could not read {self.copy}: it is not UTF-8"}


def test_a_run_on_an_upload_tells_its_owner_the_files_name_not_the_servers_path_to_it(tmp_path):
    """A run on an upload names the file as its owner gave it, never the server's path to the private copy."""
    from bert_demo.app.uploads import discard, private_text

    copy = private_text("some text", "upload.txt")
    try:
        job = TrainingJob(_PreparingTrainer(copy, tmp_path / "run"), "run")
        job.start()
        job.thread.join(timeout=30)
    finally:
        discard(copy)
    said = " ".join(record.get("message") or "" for record in job.records) + job_status(job)
    assert "loading corpus 'wiki,upload.txt'" in said and "could not read upload.txt: it is not UTF-8" in said
    assert str(copy.parent) not in said and str(os.getpid()) not in said
