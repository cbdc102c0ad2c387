"""bert_demo/app/pace.py: a run's time is measured here before it starts, a measurement is shared for a while, and a
busy machine is said to be busy; the Train and Fine-tune tabs say what the measurement means for the form's run."""
from __future__ import annotations

import json
import time

import pytest

from bert_demo.app import pace as pace_module
from bert_demo.app import text
from bert_demo.app.pace import Pace, checks, pace
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import finetune, train
from bert_demo.config import PRESETS
from bert_demo.train_config import FinetuneConfig


def test_a_few_real_steps_are_timed_with_the_share_of_the_cores_they_got():
    measured = pace_module._measure(PRESETS["tiny"].with_vocab(512), 2, 16, "fp32", "cpu", classifier=False)
    assert 0 < measured.step_s < 30 and 0 < measured.example_s < measured.step_s and 0 < measured.share <= 1
    tuned = pace_module._measure(PRESETS["tiny"].with_vocab(512), 2, 16, "fp32", "cpu", classifier=True)
    assert 0 < tuned.step_s < 30


def test_a_measurement_answers_for_its_shape_for_keep_s_then_the_machine_is_timed_again(monkeypatch):
    taken = []
    monkeypatch.setattr(pace_module, "_kept", {})
    monkeypatch.setattr(pace_module, "_measure", lambda *shape: taken.append(shape) or Pace(0.1, 0.01, 1.0, 2,
                                                                                            time.monotonic()))
    shape = PRESETS["tiny"].with_vocab(512)
    pace(shape, 32, 128, "auto")
    pace(shape, 32, 128, "auto")  # a second visitor, a moment later
    pace(shape, 16, 128, "auto")  # another batch size is another shape
    assert len(taken) == 2
    monkeypatch.setattr(pace_module, "KEEP_S", 0.0)
    pace(shape, 32, 128, "auto")
    assert len(taken) == 3


def test_checks_are_counted_as_the_loop_makes_them():
    assert checks(1000, 167) == 6 and checks(94, 11) == 9 and checks(100, 20) == 5


def test_the_train_tab_says_how_long_the_forms_run_takes_here_now_and_that_the_machine_is_busy(registry, monkeypatch):
    measured = Pace(step_s=0.5, example_s=0.001, share=0.4, threads=2, measured=time.monotonic())
    monkeypatch.setattr(train, "pace", lambda *args, **kwargs: measured)
    said = train.estimate(registry, "tiny", 1000, 32, 128, 8192)["estimate"]
    # 1,000 steps of 0.5 s and 6 checks of 8 x 32 held-out sequences at 1 ms each: 502 s
    assert "**This run: about 8 min on this machine now**: 1,000 steps at 0.50 s each and 6 checks" in said
    assert "The machine is busy (other programs are running: the timing got 40% of its 2 cores' time)" in said
    quiet = Pace(step_s=0.1, example_s=0.001, share=0.95, threads=2, measured=time.monotonic())
    monkeypatch.setattr(train, "pace", lambda *args, **kwargs: quiet)
    said = train.estimate(registry, "tiny", 100, 32, 128, 8192)["estimate"]
    assert "about 12 s on this machine now" in said and "busy" not in said
    assert train.estimate(registry, "base", 100, 32, 128, 8192)["estimate"] == ""  # not allowed: Start says why


def test_the_fine_tune_tab_times_each_start_and_names_the_start_of_each_run_it_lists(registry, monkeypatch, tmp_path):
    rows = [{"text": f"the film was {'good' if i % 2 else 'bad'} and long.", "label": i % 2} for i in range(400)]
    upload = tmp_path / "mine.jsonl"
    upload.write_text("\n".join(json.dumps(row) for row in rows))
    measured = Pace(step_s=2.0, example_s=0.01, share=1.0, threads=2, measured=time.monotonic())
    shapes = []
    monkeypatch.setattr(finetune, "pace", lambda *args, **kwargs: shapes.append(args) or measured)
    said = finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews", str(upload), "300",
                             ["random"])["ft_estimate"]
    # two runs of 94 steps (10 passes over 300 sentences in batches of 32), 9 checks of 40 held-out sentences and
    # the file's 40 test sentences (an upload has no other domain)
    assert "**The experiment: about 6 min on this machine now**: 2 runs of 94 steps at 2.0 s each, 9 checks " \
           "on 40 held-out sentences and 40 test sentences at the end" in said
    assert shapes[0][2] == 16  # the sentences' length, as word pieces, padded to a multiple of 8
    monkeypatch.setattr(finetune, "_latest_runs", lambda *args: "The latest fine-tuning runs here took 7:38 "
                                                                "(pre-trained), 11:56 (random weights).")
    assert "11:56 (random weights)" in finetune.estimate(registry, "checkpoints/tiny-test", "movie-reviews",
                                                         str(upload), "300", [])["ft_estimate"]


def test_the_fine_tune_estimate_counts_the_test_sentences_of_both_domains_that_a_run_scores_at_its_end(
        registry, monkeypatch):
    measured = Pace(step_s=2.0, example_s=0.01, share=1.0, threads=2, measured=time.monotonic())
    monkeypatch.setattr(finetune, "pace", lambda *args, **kwargs: measured)
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
                    "**another** in the Model box above to fine-tune it here.</small>")
    said = finetune.estimate(registry, "checkpoints/another", "movie-reviews", str(upload), "300", [])["ft_estimate"]
    assert "The experiment: about" in said and "choose" not in said
    said = finetune.estimate(registry, "checkpoints/another", "movie-reviews", str(tmp_path / "gone.csv"), "300",
                             [])["ft_estimate"]
    assert said.startswith("<small>") and "choose" not in said  # not the model: the reason alone


@pytest.mark.parametrize("share, busy", [(0.4, True), (0.9, False)])
def test_a_measurement_that_got_less_than_three_quarters_of_its_cores_time_is_a_busy_machine(share, busy):
    measured = Pace(0.1, 0.001, share, 2, time.monotonic())
    said = text.estimate_text("This run", 100.0, "100 steps", measured, slot_busy=True)
    assert measured.busy is busy and ("busy (a run of ours is training" in said) is busy
