"""bert_demo/app/runs/disk.py: each run claims a folder of its own, runs share a budget (by visitor and by address),
and old runs are pruned, never a fresh one nor one from the command line."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bert_demo.app.visitors import Visitor
from bert_demo.app.runs.estimates import job_status
from bert_demo.app.runs.disk import ADDRESS_SHARE, CLAIM_PREFIX, VISITOR_SHARE, claim_folder, folder_bytes, run_bytes
from bert_demo.app.registry import Registry
from bert_demo.checkpoint import read_metadata


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
    registry.disk.max_runs, registry.disk.min_run_age_s = 3, 150  # "oldest" is 200 s old, "middle" 100 s
    downloads = registry.catalog.zip_checkpoint("runs/oldest").parent
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
    registry.disk.prune(keep=0, protect=runs / "the-start")  # what `_start` does for a run from that model
    assert (runs / "the-start").is_dir() and not (runs / "another").exists()


def test_a_run_trained_moments_ago_is_never_pruned_by_someone_elses_runs(make_checkpoint, write_corpus, roots,
                                                                         tmp_path):
    runs = tmp_path / "runs"
    make_checkpoint(runs / "someone-elses", origin="app")
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=runs, device="cpu")
    registry.disk.max_runs = 1  # keep 0 old runs: only the minimum age protects it
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
    assert {"runs/kept", f"runs/{job.name}"} <= {entry.name for entry in registry.catalog.list_models()}


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


def test_a_run_is_refused_with_a_message_when_runs_would_pass_their_disk_budget_or_a_visitor_their_share(
        write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"corpus": [], "steps": 2, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    upload = lambda: str(write_corpus(tmp_path / "c.txt"))  # noqa: E731  (each run takes its own copy)
    need = run_bytes(registry.forms.train_config(**small, upload=upload()))
    registry.disk.budget = int(2 * need)  # room for two runs, but one visitor's share is less than one
    with pytest.raises(ValueError, match="your runs here fill 0 MB of the .* one visitor may use"):
        registry.start_training(owner="me", upload=upload(), **small)
    registry.disk.budget = int(need / VISITOR_SHARE) + 1  # a visitor's share holds one run's estimate
    for owner in ("me", "you"):
        job = registry.start_training(owner=owner, upload=upload(), **small)
        job.thread.join(timeout=60)
        assert job.done["checkpoint"], job.records
        assert 0 < folder_bytes(Path(job.done["checkpoint"])) <= need  # the estimate is an upper bound
    with pytest.raises(ValueError, match="your runs here fill .* one visitor may use"):
        registry.start_training(owner="me", upload=upload(), **small)
    used = folder_bytes(tmp_path / "runs")
    registry.disk.budget = used + need - 1
    with pytest.raises(ValueError, match="the runs trained here fill .* this app keeps for them"):
        registry.start_training(owner="someone new", upload=upload(), **small)
    assert len(list((tmp_path / "runs").iterdir())) == 2  # nobody's run was deleted to make room


def test_new_sessions_from_one_address_share_one_networks_part_of_the_disk(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"corpus": [], "steps": 2, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    upload = lambda: str(write_corpus(tmp_path / "c.txt"))  # noqa: E731  (each run takes its own copy)
    need = run_bytes(registry.forms.train_config(**small, upload=upload()))
    registry.disk.budget = int(need / VISITOR_SHARE) + 1  # a visitor's part holds one run, a network's two
    assert int(registry.disk.budget * ADDRESS_SHARE) < 3 * need
    for session in ("session-1", "session-2"):
        job = registry.start_training(owner=Visitor(session, "93.184.216.34"), upload=upload(), **small)
        job.thread.join(timeout=60)
    with pytest.raises(ValueError, match="the runs from your network fill .* one network may use"):
        registry.start_training(owner=Visitor("session-3", "93.184.216.34"), upload=upload(), **small)
    other = registry.start_training(owner=Visitor("session-4", "151.101.1.69"), upload=upload(), **small)
    other.thread.join(timeout=60)
    assert other.done["checkpoint"], other.records
