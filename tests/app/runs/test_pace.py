"""bert_demo/app/runs/pace.py and estimates.py: a run's time is measured here before it starts, a measurement is shared
for a while, and a busy machine is said to be busy; once a run trains, its own pace answers everything said of it
(the line under Start, its status line, the estimate of another run like it), so the page agrees with itself."""
from __future__ import annotations

import json
import math
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

from bert_demo.app.runs import estimates
from bert_demo.app.runs import pace as pace_module
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.pace import Pace, Shape, pace
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import finetune, train
from bert_demo.config import PRESETS
from bert_demo.data.labelled import load_file
from bert_demo.tokenizer import load_tokenizer
from bert_demo.training.settings import FinetuneConfig

TINY = Shape(PRESETS["tiny"].with_vocab(512), 2, 16, "fp32")


def test_a_few_real_steps_are_timed_in_a_runs_kind_of_process_with_the_share_of_the_cores_they_got(monkeypatch):
    monkeypatch.setattr(pace_module, "_measure_here", lambda shape: pytest.fail("timed in the app's process"))
    measured = pace_module._measure(TINY)
    assert 0 < measured.step_s < 30 and 0 < measured.example_s < measured.step_s and 0 < measured.share <= 1
    tuned = pace_module._measure(replace(TINY, classifier=True))
    assert 0 < tuned.step_s < 30


def test_a_burst_of_other_work_that_slows_one_timed_step_does_not_set_the_pace(monkeypatch):
    """On a machine that others share in bursts, one slow step of a few made the mean four times the run's pace."""
    timings = iter([0.1, 0.1, 5.0, 0.1, 0.1, 0.04, 1.0, 0.04])  # five steps, then three forward passes
    monkeypatch.setattr(pace_module, "_timed", lambda torch, device, work: next(timings))
    monkeypatch.setattr(pace_module, "BUSY_SHARE", 0.0)  # a quiet machine: no steps timed on one thread too
    measured = pace_module._measure_here(TINY)
    assert measured.step_s == 0.1 and measured.example_s == pytest.approx(0.04 / TINY.batch_size)


def test_the_checks_pace_is_timed_in_fp32_as_a_run_scores_its_checks(monkeypatch):
    """A run trains in bf16 where the CPU computes it, but scores held-out examples in fp32 (evaluate.validate,
    finetune._scores): timing them in bf16 made the Fine-tune tab's estimate short (its checks are 40% of it)."""
    from bert_demo.training import runtime

    entered = []

    @contextmanager
    def autocast(device, precision):
        entered.append(precision)
        yield

    monkeypatch.setattr(runtime, "autocast", autocast)
    monkeypatch.setattr(runtime, "resolve_precision", lambda precision, device: "bf16")
    monkeypatch.setattr(pace_module, "MEASURED_STEPS", 1)
    monkeypatch.setattr(pace_module, "BUSY_SHARE", 0.0)
    pace_module._measure_here(replace(TINY, classifier=True))
    assert entered == ["bf16", "bf16"]  # the warm-up step and the timed one; none for the forward passes


def test_on_a_busy_machine_the_steps_are_timed_on_one_thread_too_and_the_faster_kept(monkeypatch):
    """Another program keeping a core busy makes two OpenMP threads wait on each other: a run then trains on one
    (run_process.Threads), and its estimate must be timed so."""
    threads = []
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: threads[-1] if threads else 2)
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(pace_module, "BUSY_SHARE", 2.0)  # whatever share the steps got, the machine is busy
    monkeypatch.setattr(pace_module, "_timed", lambda torch, device, work: 0.9 if (threads or [2])[-1] == 2 else 0.05)
    measured = pace_module._measure_here(TINY)
    assert (measured.step_s, measured.threads) == (0.05, 1) and threads[-1] == 2  # the app's threads restored
    monkeypatch.setattr(pace_module, "_timed", lambda torch, device, work: 0.02 if (threads or [2])[-1] == 2 else 0.05)
    assert pace_module._measure_here(TINY).threads == 2


def test_a_measurement_answers_for_its_shape_for_keep_s_then_the_machine_is_timed_again(monkeypatch):
    taken = []
    monkeypatch.setattr(pace_module, "_kept", {})
    monkeypatch.setattr(pace_module, "_measure", lambda shape: taken.append(shape) or Pace(0.1, 0.01, 1.0, 2,
                                                                                           time.monotonic()))
    shape = Shape(PRESETS["tiny"].with_vocab(512), 32, 128, "auto")
    pace(shape)
    pace(shape)  # a second visitor, a moment later
    pace(replace(shape, batch_size=16))  # another batch size is another shape
    assert len(taken) == 2
    monkeypatch.setattr(pace_module, "KEEP_S", 0.0)
    pace(shape)
    assert len(taken) == 3


def test_estimates_of_many_shapes_asked_at_once_are_measured_one_at_a_time(monkeypatch):
    """Estimates of many shapes asked at once (each past the kept measurements) time one shape's steps at a time,
    never several beside each other."""
    running, most = [0], [0]

    def measure(shape: Shape) -> Pace:
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.05)
        running[0] -= 1
        return Pace(0.1, 0.01, 1.0, 2, time.monotonic())

    monkeypatch.setattr(pace_module, "_kept", {})
    monkeypatch.setattr(pace_module, "_measure", measure)
    asks = [threading.Thread(target=pace, args=(replace(TINY, batch_size=size),)) for size in range(1, 9)]
    for ask in asks:
        ask.start()
    for ask in asks:
        ask.join()
    assert len(pace_module._kept) == 8 and most[0] == 1


def test_checks_are_counted_as_the_loop_makes_them():
    assert estimates.checks(1000, 167) == 6 and estimates.checks(94, 11) == 9 and estimates.checks(100, 20) == 5


def test_the_train_tab_says_how_long_the_forms_run_takes_here_now_and_that_the_machine_is_busy(registry, monkeypatch):
    measured = Pace(step_s=0.5, example_s=0.001, share=0.4, threads=2, measured=time.monotonic())
    monkeypatch.setattr(estimates, "pace", lambda shape: measured)
    said = train.estimate(registry, "tiny", 1000, 32, 3e-3, 128, 8192)["estimate"]
    # 1,000 steps of 0.5 s and 6 checks of 8 x 32 held-out sequences at 1 ms each: 502 s
    assert "**This run: about 8 min on this machine now**: 1,000 steps at 0.50 s each and 6 checks" in said
    assert "The machine is busy (other programs are running: the timing got 40% of the time of the 2 cores it ran " \
        "on)" in said
    monkeypatch.setattr(estimates, "pace", lambda shape: replace(measured, threads=1))  # issue 63: "of its 1 core'"
    said = train.estimate(registry, "tiny", 1000, 32, 3e-3, 128, 8192)["estimate"]
    assert "the timing got 40% of the time of the one core it ran on)" in said
    quiet = Pace(step_s=0.1, example_s=0.001, share=0.95, threads=2, measured=time.monotonic())
    monkeypatch.setattr(estimates, "pace", lambda shape: quiet)
    said = train.estimate(registry, "tiny", 100, 32, 3e-3, 128, 8192)["estimate"]
    assert "about 12 s on this machine now" in said and "busy" not in said
    assert train.estimate(registry, "base", 100, 32, 3e-3, 128, 8192)["estimate"] == ""  # not allowed: Start says why


def test_two_visitors_asking_at_once_at_any_width_are_told_the_same_from_one_measurement(registry, monkeypatch):
    """At 390 px a visitor read "about 24 min: 1.5 s a step", at 1400 px "about 4 min: 0.24 s": each page had
    timed the machine itself."""
    monkeypatch.setattr(pace_module, "_kept", {})
    taken = []
    monkeypatch.setattr(pace_module, "_measure", lambda shape: taken.append(shape) or Pace(
        0.24 + 0.5 * len(taken), 0.001, 1.0, 2, time.monotonic()))
    said = {owner: train.estimate(registry, "tiny", 1000, 32, 3e-3, 128, 8192, owner=owner)["estimate"]
            for owner in ("phone", "desktop")}
    assert said["phone"] == said["desktop"] and len(taken) == 1


class _Trainer:
    """A run the test feeds records by hand: its config, its step, and a stop."""

    def __init__(self, config):
        self.config, self.step, self.visible_to = config, 0, None

    def stop(self) -> None:
        """Nothing to stop: the test ends it."""


@pytest.fixture
def training(registry):
    """`start(config, owner)`: a run of `config` training in the registry's slot (until the test ends) that has
    timed itself at 0.9 s a step and 3 s a check of 256 held-out sequences."""
    ended, jobs = threading.Event(), []

    def start(config, owner: str = "someone") -> TrainingJob:
        job = TrainingJob(_Trainer(config), "run", owner=owner)
        job.thread = threading.Thread(target=ended.wait, daemon=True)  # running until the test ends
        job.thread.start()
        for record in ({"kind": "train", "step": 10, "elapsed": 9.0, "tokens_per_s": 3000.0},
                       {"kind": "check", "step": 167, "elapsed": 150.3},
                       {"kind": "val", "step": 167, "elapsed": 153.3},
                       {"kind": "train", "step": 200, "elapsed": 183.3, "tokens_per_s": 3000.0}):
            job._append(record)
        job.trainer.step = 200
        registry.slot.job = job
        jobs.append(job)
        return job

    yield start
    ended.set()
    for job in jobs:
        job.thread.join(timeout=5)


def test_while_a_run_trains_an_estimate_of_a_run_like_it_is_its_own_pace_and_nothing_is_timed_beside_it(
        registry, monkeypatch, training):
    """74 s into a run, the line under Start said "about 8 min" (timed beside the run), the status line "about
    15:18 left" (its own pace): a run that trains after it keeps its pace."""
    monkeypatch.setattr(pace_module, "_measure", lambda shape: pytest.fail(f"timed {shape} beside the run"))
    training(registry.forms.train_config(preset="tiny", steps=1000, batch_size=32, seq_len=128, vocab_size=8192))
    said = train.estimate(registry, "tiny", 1000, 32, 3e-3, 128, 8192, owner="another visitor")["estimate"]
    # 1,000 steps at 0.9 s and 6 checks at 3 s each: 918 s
    assert "**This run: about 15 min on this machine now**: 1,000 steps at 0.90 s each and 6 checks" in said
    assert "at the pace the run training now keeps" in said and "busy" not in said


def test_the_line_under_start_and_the_status_line_of_a_training_run_agree(registry, training):
    job = training(registry.forms.train_config(preset="tiny", steps=1000, batch_size=32, seq_len=128,
                                               vocab_size=8192), owner="me")
    line = train.estimate(registry, "tiny", 1000, 32, 3e-3, 128, 8192, owner="me")["estimate"]
    status = estimates.job_status(job)
    left = re.search(r"about (\d+:\d\d) left", status).group(1)
    assert f"{left} left" in line  # the same time left, from the same pace
    total = re.search(r"about (\d+) min in all", line).group(1)
    assert int(total) == round((job.seconds_left + time.perf_counter() - job.started) / 60)
    assert "1,000 steps at 0.90 s each" in line
    assert train.training_outputs(registry, job, "me")["estimate"] == line  # and while the page follows the run


def test_the_fine_tune_tab_times_each_start_and_names_the_start_of_each_run_it_lists(registry, monkeypatch, tmp_path):
    rows = [{"text": f"the film was {'good' if i % 2 else 'bad'} and long.", "label": i % 2} for i in range(400)]
    upload = tmp_path / "mine.jsonl"
    upload.write_text("\n".join(json.dumps(row) for row in rows))
    measured = Pace(step_s=2.0, example_s=0.01, share=1.0, threads=2, measured=time.monotonic())
    shapes = []
    monkeypatch.setattr(estimates, "pace", lambda shape: shapes.append(shape) or measured)
    said = finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews", str(upload), "300",
                             ["random"])["ft_estimate"]
    # two runs of 94 steps (10 passes over 300 sentences in batches of 32), 9 checks of 40 held-out sentences and
    # the file's 40 test sentences (an upload has no other domain)
    assert "**The experiment: about 6 min on this machine now**: 2 runs of 94 steps at 2.0 s each, 9 checks " \
           "on 40 held-out sentences and 40 test sentences at the end" in said
    tokenizer = load_tokenizer(registry.catalog.resolve("checkpoints/tiny-test").folder)
    trained_on = load_file(upload)["train"]["text"][:300]
    pieces = [len(tokenizer(text)["input_ids"]) for text in trained_on]  # the model's own word pieces, not words
    assert shapes[0].seq_len == math.ceil(sum(pieces) / len(pieces) / 8) * 8
    monkeypatch.setattr(finetune, "latest_took", lambda *args: "The latest experiment here took 19:34 of "
                                                               "training: 7:38 (pre-trained), 11:56 (random weights).")
    assert "11:56 (random weights)" in finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews",
                                                         str(upload), "300", [])["ft_estimate"]


def test_the_fine_tune_estimate_counts_the_test_sentences_of_both_domains_that_a_run_scores_at_its_end(
        registry, monkeypatch):
    measured = Pace(step_s=2.0, example_s=0.01, share=1.0, threads=2, measured=time.monotonic())
    monkeypatch.setattr(estimates, "pace", lambda shape: measured)
    said = finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews", None, "300", [])["ft_estimate"]
    # movie reviews: 1,057 validation and 1,057 test sentences; amazon-reviews, the other domain: 361 test sentences
    assert "9 checks on 1,057 held-out sentences and 1,418 test sentences at the end" in said
    assert measured.seconds(94, 9, 1_057, 1_418) == pytest.approx(94 * 2.0 + (9 * 1_057 + 1_418) * 0.01)


def test_a_model_too_big_to_fine_tune_here_is_said_before_start_with_the_start_that_can(roots, monkeypatch,
                                                                                           tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    upload = tmp_path / "mine.jsonl"
    upload.write_text("\n".join(json.dumps({"text": f"the film was {'good' if i % 2 else 'bad'}.", "label": i % 2})
                                for i in range(400)))
    monkeypatch.setattr(FinetuneConfig, "model", "checkpoints/another")  # the start that trains here, as mini-english
    allowed = registry.forms.finetune_config

    def finetune_config(model, *args, **kwargs):
        if model == "checkpoints/tiny-test":  # as small-english on a CPU
            raise ValueError("tiny-test is bigger than the models this machine trains (tiny, mini)")
        return allowed(model, *args, **kwargs)

    monkeypatch.setattr(registry.forms, "finetune_config", finetune_config)
    said = finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews", str(upload), "300", [])["ft_estimate"]
    assert said == ("<small>tiny-test is bigger than the models this machine trains (tiny, mini): choose "
                    "**another** as the model to fine-tune here.</small>")
    said = finetune.estimate(registry, "checkpoints/another", "movie-reviews", str(upload), "300", [])["ft_estimate"]
    assert "The experiment: about" in said and "choose" not in said
    said = finetune.estimate(registry, "checkpoints/another", "movie-reviews", str(tmp_path / "gone.csv"), "300",
                             [])["ft_estimate"]
    assert said.startswith("<small>") and "choose" not in said  # not the model: the reason alone


@pytest.mark.parametrize("share, busy", [(0.4, True), (0.9, False)])
def test_a_measurement_that_got_less_than_three_quarters_of_its_cores_time_is_a_busy_machine(share, busy):
    measured = Pace(0.1, 0.001, share, 2, time.monotonic())
    said = estimates.estimate_text("This run", 100.0, "100 steps", measured, slot_busy=True)
    assert measured.busy is busy and ("busy (a run of ours is training" in said) is busy
