"""bert_demo/training/loop.py: the flat loop drives any `Training` (a model, batches, an optimizer, a loss, validation
records) under a declared `Control`, on schedule, and saves once at the end; the `Window` averages each metric over its
own count; a run on a time budget (bert_demo/training/time_budget.py) sets its length from its pace and ends with its
time (the clock is `time.perf_counter`, which the loop and the budget share, patched)."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
import torch

from bert_demo.config import PRESETS
from bert_demo.model import BertForPreTraining
from bert_demo.training.loop import Control, Run, Training, Window
from bert_demo.training.recipe import optimizer_and_schedule
from bert_demo.training.settings import TrainConfig


def batches(vocab: int, size: int = 4, length: int = 12):
    """Random batches for ever: a masked-LM target at position 3 of each sequence, and random next-sentence labels."""
    generator = torch.Generator().manual_seed(0)
    while True:
        ids = torch.randint(5, vocab, (size, length), generator=generator)
        labels = torch.full_like(ids, -100)
        labels[:, 3] = ids[:, 3]
        yield {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
               "mlm_labels": labels, "nsp_labels": torch.randint(0, 2, (size,), generator=generator)}


def training_run(tokenizer, tmp_path, seen: dict, control: Control | None = None, recipe: bool = False,
                 **changes) -> Run:
    """A run whose prepare builds a Training by hand: what the loop is handed, and nothing else of pre-training
    (with `recipe`, the recipe's AdamW and learning-rate schedule instead of a constant rate)."""
    config = TrainConfig(**{"steps": 6, "batch_size": 4, "log_every": 2, "eval_every": 3, "save_every": 100,
                            "warmup_steps": 0, "out": str(tmp_path / "run"), **changes})

    def loss(out, part, batch):
        seen.setdefault("parts", []).append((len(part["input_ids"]), len(batch["input_ids"])))
        return out.loss, {"loss": (out.loss.detach(), 1), "right": (3.0, 4.0)}

    def prepare(run: Run):
        def evaluate():
            seen.setdefault("validations", []).append(run.step >= run.total_steps)
            yield {"kind": "val", "score": 0.5}

        yield {"kind": "status", "message": "prepared by hand"}
        torch.manual_seed(0)
        run.model = BertForPreTraining(PRESETS["tiny"].with_vocab(len(tokenizer)))
        run.tokenizer = tokenizer
        optimizer = torch.optim.SGD(run.model.parameters(), lr=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        if recipe:
            optimizer, schedule = optimizer_and_schedule(run.model, run.config, lambda: run.total_steps)
        return Training(model=run.model, batches=batches(len(tokenizer)), optimizer=optimizer, schedule=schedule,
                        loss=loss, evaluate=evaluate)

    return Run(config, prepare, control=control)


def test_the_loop_takes_its_steps_logs_and_validates_on_schedule_and_saves_once_at_the_end(tokenizer, tmp_path):
    seen: dict = {}
    records = list(training_run(tokenizer, tmp_path, seen).run())
    assert [(r["kind"], r.get("step")) for r in records if r["kind"] in ("train", "val")] == [
        ("train", 2), ("val", 3), ("train", 4), ("train", 6), ("val", 6)]
    val = next(r for r in records if r["kind"] == "val")
    assert val["score"] == 0.5 and val["tokens"] == 3 * 4 * 12 and "elapsed" in val  # stamped by the loop
    assert seen["validations"] == [False, True]  # the last one knows it is the last
    assert records[-1]["reason"] == "finished" and (tmp_path / "run" / "config.json").is_file()
    train = next(r for r in records if r["kind"] == "train")
    assert train["right"] == 0.75 and train["tokens_per_s"] > 0


def test_micro_batches_cut_the_batch_and_each_loss_sees_the_whole(tokenizer, tmp_path):
    seen: dict = {}
    list(training_run(tokenizer, tmp_path, seen, steps=2, grad_accum=2, eval_every=10).run())
    assert seen["parts"] == [(2, 4)] * 4  # two micro-batches of two a step, each with its batch of four


def test_the_control_lock_is_held_while_the_weights_change_and_after_step_runs_once_a_step(tokenizer, tmp_path):
    held, calls = threading.Event(), []

    @contextmanager
    def lock():
        held.set()
        yield
        held.clear()

    class Held:  # a context manager object, as the app's seqlock is
        def __enter__(self):
            self.inner = lock()
            return self.inner.__enter__()

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    control = Control(lock=Held(), after_step=lambda: calls.append(held.is_set()))
    run = training_run(tokenizer, tmp_path, {}, control=control)
    stepped = []
    original = torch.optim.SGD.step

    def step(self, *args, **kwargs):
        stepped.append(held.is_set())
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim.SGD, "step", step)
        list(run.run())
    assert stepped == [True] * 6 and calls == [False] * 6 and control.step == 6


def test_a_stop_asked_before_a_step_ends_the_run_there_and_saves_what_it_has(tokenizer, tmp_path):
    control = Control()
    run = training_run(tokenizer, tmp_path, {}, control=control)
    for record in run.run():
        if record["kind"] == "train" and record["step"] == 2:
            control.stop()
    assert record["reason"] == "stopped" and record["step"] == 2 and record["checkpoint"]


def test_the_window_averages_each_metric_over_its_own_count_and_starts_again():
    window = Window()
    window.add({"loss": (2.0, 1), "acc": (torch.tensor(3), 4)}, tokens=10)
    window.add({"loss": (4.0, 1), "acc": (torch.tensor(1), 4)}, tokens=30)
    metrics = window.flush()
    assert metrics["loss"] == 3.0 and metrics["acc"] == 0.5 and metrics["tokens_per_s"] > 0
    assert window.flush() == {"tokens_per_s": 0.0}  # a flushed window is empty


class Clock:
    """A clock that moves only when told: each optimizer step takes `per_step` seconds (see `tick`)."""

    def __init__(self, per_step: float):
        self.now, self.per_step = 0.0, per_step

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.per_step


def test_a_run_on_a_time_budget_sets_its_steps_from_its_pace_so_that_it_ends_with_the_time(tokenizer, tmp_path,
                                                                                           monkeypatch):
    import bert_demo.training.loop as loop

    clock = Clock(per_step=0.0625)
    monkeypatch.setattr(loop.time, "perf_counter", clock)
    control = Control(after_step=clock.tick)
    records = list(training_run(tokenizer, tmp_path, {}, control, minutes=0.1, eval_every=1000).run())
    # 6 s in all; at step 60, 3.75 s are gone and a step takes 0.0625 s: 90% of the 2.25 s left hold 32 more steps
    planned = next(r for r in records if r["kind"] == "status" and "fit the" in r["message"])
    assert planned["step"] == 60 and "92 steps fit the 0.1 minutes" in planned["message"]
    # asked again as it goes, a tenth of what is left is kept each time: the end comes closer to the time
    assert records[-1]["reason"] == "finished" and 92 <= records[-1]["step"] <= 95 and 5.75 <= clock.now < 6


def test_a_run_on_a_time_budget_with_the_default_warm_up_reaches_its_peak_rate_long_before_its_pace_is_measured(
        tokenizer, tmp_path, monkeypatch):
    """Its steps are unknown until it has timed some (a tenth of the largest run allowed would be a warm-up of a
    million steps): a first length from its steps 1 to 10 sets the warm-up, a tenth of it, at step 10."""
    import bert_demo.training.loop as loop

    clock = Clock(per_step=0.0625)
    monkeypatch.setattr(loop.time, "perf_counter", clock)
    records = list(training_run(tokenizer, tmp_path, {}, Control(after_step=clock.tick), recipe=True, minutes=0.1,
                                eval_every=1000, warmup_steps=None, log_every=1, lr=1e-3).run())
    rates = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert rates[5] < 1e-6  # before any length is known
    assert max(rates[step] for step in range(11, 60)) > 0.9e-3  # warmed up within the first 8-step tenth
    assert records[-1]["reason"] == "finished" and 92 <= records[-1]["step"] <= 95


def test_a_run_on_a_time_budget_that_falls_behind_stops_at_the_time_and_saves(tokenizer, tmp_path, monkeypatch):
    import bert_demo.training.loop as loop

    clock = Clock(per_step=0.0625)
    monkeypatch.setattr(loop.time, "perf_counter", clock)

    def slower_after_its_pace_is_taken() -> None:
        clock.tick()
        if clock.now >= 3.75:
            clock.per_step = 0.1875  # three times slower than measured: the plan of 92 steps cannot be kept
    records = list(training_run(tokenizer, tmp_path, {}, Control(after_step=slower_after_its_pace_is_taken),
                                minutes=0.1, eval_every=1000).run())
    done = records[-1]
    assert done["reason"] == "stopped" and done["step"] == 72 and done["checkpoint"]
    assert clock.now == 6.0  # the step that reached the time was the last
    assert any("the 0.1 minutes are up: the run stops and saves" == r.get("message") for r in records)


def test_a_run_on_a_time_budget_moves_its_end_when_its_pace_changes(tokenizer, tmp_path, monkeypatch):
    import bert_demo.training.loop as loop

    clock = Clock(per_step=0.0625)
    monkeypatch.setattr(loop.time, "perf_counter", clock)

    def faster_after_its_pace_is_taken() -> None:
        clock.tick()
        if clock.now >= 3.75:
            clock.per_step = 0.03125  # twice as fast as first measured: more steps fit
    records = list(training_run(tokenizer, tmp_path, {}, Control(after_step=faster_after_its_pace_is_taken),
                                minutes=0.1, eval_every=1000).run())
    plans = [r["steps"] for r in records if r["kind"] == "status" and "fit the" in r["message"]]
    assert plans[0] == 92 and plans[-1] > 100 and records[-1]["reason"] == "finished"
    assert records[-1]["step"] >= plans[-1] and 5.75 <= clock.now < 6
