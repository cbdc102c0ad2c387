"""The loop every run shares, pre-training or fine-tuning (nanoGPT's train.py and minGPT's trainer are the models: one
flat loop, handed what it trains).

A run is a `Run`: its settings (checked once, never changed), its `Control`, its records and its length
(`total_steps`: the settings' steps, or what a time budget or a fine-tuning run's epochs make of them). `Run.run()`
calls its `prepare` function (`pretraining.prepare` for pre-training, `finetuning.prepare` for fine-tuning), which
builds the run's `Training`: the model and tokenizer, the batches, the optimizer and schedule, and three small
functions (the loss of a micro-batch with its metrics, the validation records, and the guesses a run stopped between
validations shows). `train` is the loop itself: the batch, the step (`step.backward`: the forward and backward
passes; `step.update`: clipping, the optimizer and the schedule; the Step by step tab takes its step with the same
two), then what comes after a step (`AfterStep`: re-planning by time, timeline snapshots, handing freed
memory back), records, validations and saves (`saving.Saving`). Both the app and the CLI consume its plain-dict
records.

Under `torchrun --nproc_per_node N` the same code trains with DistributedDataParallel: every rank draws its own share
of the examples, gradients are averaged, and rank 0 alone logs, validates and writes checkpoints.
"""
from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import BertTokenizerFast

from bert_demo.checkpoint import check_writable
from bert_demo.config import read_metadata
from bert_demo.training import timeline
from bert_demo.training.divergence import Divergence
from bert_demo.training.records import DoneRecord, Record
from bert_demo.training.runtime import (
    Batch,
    Distributed,
    pick_device,
    release_free_memory,
    resolve_precision,
    set_cpu_threads,
    start_process_group,
    wrap_for_training,
)
from bert_demo.training.saving import Saving
from bert_demo.training.settings import RunConfig, bounds
from bert_demo.training.step import Loss, Metrics, backward, update
from bert_demo.training.time_budget import PACE_STEPS, Budget

TRIM_EVERY = 50  # steps between handing freed heap memory back to the operating system (see release_free_memory)


@dataclass
class Control:
    """How a run is steered and read from outside its thread, declared: whoever runs the run hands it in (the app's
    run process gives a lock that tells a copier whether the weights changed under it, and a call that yields cores
    to visitors after each step)."""

    lock: AbstractContextManager = field(default_factory=threading.Lock)  # held while the weights and step change
    after_step: Callable[[], None] = lambda: None  # called in the training thread after each optimizer step
    step: int = 0  # optimizer steps taken, in the whole run (a resumed run starts at its saved step)
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @contextmanager
    def stepping(self) -> Iterator[None]:
        """Held while the optimizer changes the weights, the step counted with them before the lock is let go: a
        reader of both never sees one without the other."""
        with self.lock:
            yield
            self.step += 1


@dataclass(kw_only=True)
class Training:
    """What one kind of run trains, as its `prepare` function built it."""

    model: torch.nn.Module
    batches: Iterator[Batch]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss: Loss  # the loss of a micro-batch's output (backward is the loop's) and the metrics to average
    evaluate: Callable[[], Iterator[Record]]  # validation records; "val" is stamped here
    guesses: Callable[[], Iterator[Record]] = lambda: iter(())  # what a run stopped between validations shows
    # what the model is told about a micro-batch beyond its tensors, read from its CPU copy (pre-training: how many
    # masked-LM targets it has, so that the GPU finds them without a synchronisation)
    forward_extras: Callable[[Batch], dict[str, Any]] = lambda part: {}


class Window:
    """Running sums of a run's training metrics between two records, kept as tensors on the device and read (one
    synchronisation) when a record is written, not at every micro-step. The same names mean the same sums for
    pre-training's metrics and fine-tuning's."""

    def __init__(self):
        self.sums: defaultdict[str, list] = defaultdict(lambda: [0.0, 0.0])
        self.tokens = 0
        self.started = time.perf_counter()

    def add(self, metrics: Metrics, tokens: int) -> None:
        """One micro-batch's metrics and its real (not padding) tokens."""
        for name, (total, count) in metrics.items():
            self.sums[name][0] += total
            self.sums[name][1] += count
        self.tokens += tokens

    def flush(self, world_size: int = 1) -> dict[str, float]:
        """Each metric's average since the last flush, and tokens/s over every process (they all run at the same
        pace); then start a new window."""
        seconds = time.perf_counter() - self.started
        metrics = {name: float(total) / max(float(count), 1e-12) for name, (total, count) in self.sums.items()}
        metrics["tokens_per_s"] = self.tokens * world_size / max(seconds, 1e-9)
        self.__init__()
        return metrics


class Run:
    """One training run: its settings, its control, its records and how it saves. Create it, iterate `run()`, and
    call `stop()` from anywhere to end it early."""

    def __init__(self, config: RunConfig, prepare: Callable[["Run"], Generator[Record, None, Training | None]],
                 resume: str | Path | None = None, origin: str = "cli", visible_to: str | None = None,
                 control: Control | None = None):
        """`origin` is stored with the checkpoint: the app deletes its own old runs ("app"), never others.
        `visible_to`, also stored, makes an app run private to one browser session (one trained on an upload). The
        config was checked when it was made (`RunConfig`)."""
        self.config, self.prepare, self.origin, self.visible_to = config, prepare, origin, visible_to
        self.resume = Path(resume) if resume else None
        if self.resume and not (self.resume / "config.json").is_file():
            raise ValueError(f"cannot resume from {self.resume}: it is not a checkpoint folder")
        self.dist = Distributed.from_env()
        if self.dist.is_main:
            check_writable(config.out)
        self.device = pick_device(config.device, self.dist)
        self.precision = resolve_precision(config.precision, self.device)
        self.control = control or Control()
        self.model: torch.nn.Module | None = None
        self.tokenizer: BertTokenizerFast | None = None
        self.training_words: int | None = None  # the words of a pre-training run's own training documents (`prepare`)
        self.metadata = read_metadata(self.resume) if self.resume else {}
        self.history: list[Record] = list(self.metadata.get("history", []))
        self.control.step = int(self.metadata.get("step", 0))
        # the run's length: its settings' steps until a fine-tuning run's epochs or a time budget set it
        self.total_steps: int | None = config.steps
        self.saving = Saving(config.out, self.resume)
        self._made_group = False  # whether run() started the torchrun process group (close() ends it)

    @property
    def step(self) -> int:
        return self.control.step

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self.control.stop()

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called."""
        return self.control.stopping

    def snapshot(self) -> torch.nn.Module | None:
        """An eval-mode copy of the current weights, safe to use while training continues."""
        if self.model is None:
            return None
        with self.control.lock:
            return copy.deepcopy(self.model).eval()

    def run(self) -> Iterator[Record]:
        """Prepare data and model, train, and yield records; the last one has kind "done"."""
        started = time.perf_counter()
        set_cpu_threads()
        torch.manual_seed(self.config.seed)
        self._made_group = start_process_group(self.dist, self.device)
        task = yield from self.prepare(self)
        if task is None:
            yield self.saving.nothing_written(self)
            return
        yield from train(self, task, started)

    def close(self) -> None:
        """End the torchrun process group this run made, once its caller is done with it (the CLI, at exit)."""
        if self._made_group:
            self.dist.end_group()
            self._made_group = False

    def stopping_now(self) -> bool:
        """Whether to stop before the next step or phase: under torchrun, whether any rank was asked (a rank that
        stopped alone would leave the others waiting for ever in the next gradient all-reduce)."""
        return self.dist.any(self.control.stopping, self.device)

    def log(self, metrics: dict[str, float], tokens: int, started: float, kind: str = "train",
            lr: float | None = None) -> Record:
        """A training or validation record, kept in the run's history."""
        record = {"kind": kind, "step": self.step, "tokens": tokens, **metrics,
                  "elapsed": round(time.perf_counter() - started, 3)}
        if lr is not None:
            record["lr"] = lr
        self.history.append(record)
        return record

    def finish(self, reason: str, started: float, optimizer, message: str | None = None) -> DoneRecord:
        """Save the checkpoint and say how the run ended."""
        return self.saving.finish(self, reason, started, optimizer, message)


class AfterStep:
    """What comes after each step besides its records: the time budget's re-planning (`--minutes`), the timeline's
    snapshots and handing freed heap memory back. Each yields the records it has to say."""

    def __init__(self, run: Run, started: float):
        cfg = run.config
        self.run, self.taken = run, run.saving.taken()
        self.budget = Budget(started + 60 * cfg.minutes, run.step) if cfg.minutes else None
        if self.budget is not None:
            run.total_steps = bounds("steps", config=type(cfg))[1]  # until the pace is known; the time decides

    def first(self) -> Iterator[Record]:
        """Before the first step: the starting weights' snapshot where one is due."""
        yield from self._snapshot(self.run.step)

    def __call__(self, step: int) -> Iterator[Record]:
        yield from self._replan(step)
        yield from self._snapshot(step)
        if step % TRIM_EVERY == 0:
            release_free_memory()

    def _replan(self, step: int) -> Iterator[Record]:
        """On a time budget: the run's length set again from its pace, and the run stopped when the time is up."""
        run, budget, minutes = self.run, self.budget, self.run.config.minutes
        if budget is None:
            return
        planned = budget.after(step)
        if planned is not None:
            before, run.total_steps = run.total_steps, run.dist.agree(planned, min, run.device)
            if budget.worth_telling(before, run.total_steps):
                yield {"kind": "status", "step": step, "steps": run.total_steps, "message": f"{budget.pace * 1000:.1f}"
                       f" ms a step: {run.total_steps:,} steps fit the {minutes:g} minutes"}
        if budget.spent() and not run.stopping:
            run.stop()
            yield {"kind": "status", "step": step, "message": f"the {minutes:g} minutes are up: the run stops and "
                   "saves" + ("" if budget.pace else f", before it could time {PACE_STEPS[1]} steps of its own (its "
                              "preparation took most of the time)")}

    def _snapshot(self, step: int) -> Iterator[Record]:
        """The timeline's snapshot of this step, where one is due and not yet taken (rank 0)."""
        run = self.run
        if run.dist.is_main and step in timeline.snapshot_steps(run.total_steps) and step not in self.taken:
            said = run.saving.snapshot(run.model, step)
            if said is not None:
                yield said


def train(run: Run, task: Training, started: float) -> Iterator[Record]:
    """The training loop: steps until the run's last or a stop, then the final checkpoint; after each step, what
    `AfterStep` does, the records, validations and periodic saves."""
    cfg, control, main = run.config, run.control, run.dist.is_main
    optimizer, schedule = task.optimizer, task.schedule
    forward = wrap_for_training(task.model, run.device, run.dist.world_size, cfg.compile)
    window, first_step, after = Window(), control.step, AfterStep(run, started)
    tokens_seen = int(run.history[-1]["tokens"]) if run.history else 0
    divergence = Divergence(run.device, 1 if run.device.type == "cpu" else cfg.log_every)
    yield from after.first()
    while control.step < run.total_steps and not run.stopping_now():
        batch = next(task.batches)
        optimizer.zero_grad(set_to_none=True)
        try:
            out, _ = backward(forward, batch, task.loss, device=run.device, micro_batches=cfg.grad_accum,
                              precision=run.precision, extras=task.forward_extras, keep=window.add)
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)  # free this step's gradients before saving
            torch.cuda.empty_cache()
            yield run.finish("out of memory", started, optimizer, f"step {control.step + 1} ran out of memory on "
                             f"{run.device}: the run stopped and the weights from before that step were saved. "
                             "Try a smaller batch, sequence length or model.")
            return
        update(task.model, optimizer, cfg.grad_clip, schedule=schedule, lock=control.stepping(),
               guard=lambda norm, loss=out.loss: divergence.guard(optimizer, norm, loss, control.step + 1))
        control.after_step()
        step = control.step
        bad = divergence.found(step)
        if bad is not None:
            with control.lock:
                control.step = bad[0] - 1  # the weights are those of the step before: AdamW skipped the rest
            yield run.finish("diverged", started, optimizer, f"the loss became {bad[1]:.4g} at step {bad[0]}: "
                             "the run stopped and the weights from before that step were saved. Try a lower "
                             "learning rate.")
            return
        yield from after(step)
        tokens_seen += int(batch["attention_mask"].sum()) * run.dist.world_size
        last = step == run.total_steps
        if main and (step % cfg.log_every == 0 or last):
            yield run.log(window.flush(run.dist.world_size), tokens_seen, started, lr=schedule.get_last_lr()[0])
        if main and (step % cfg.eval_every == 0 or last):
            yield from _validation(run, task, tokens_seen, started)
        if step % cfg.save_every == 0 and not last:
            yield from _periodic_save(run, optimizer, started)
    if control.step == first_step < run.total_steps:
        yield run.saving.nothing_written(run)
        return
    if main and control.step < run.total_steps and control.step % cfg.eval_every:  # stopped between validations
        yield from task.guesses()
    yield run.finish("finished" if control.step >= run.total_steps else "stopped", started, optimizer)


def _periodic_save(run: Run, optimizer: torch.optim.Optimizer, started: float) -> Iterator[Record]:
    """A checkpoint on the way; a disk that is full (say) is reported and training goes on: the final save tries
    again."""
    try:
        run.saving.save(run, optimizer, started)
    except OSError as exc:
        yield {"kind": "status", "step": run.step, "message": f"could not save the checkpoint at step {run.step} to "
                                                              f"{run.config.out}: {exc.strerror or exc}; training "
                                                              "goes on"}


def _validation(run: Run, task: Training, tokens: int, started: float) -> Iterator[Record]:
    """A "check" record (a validation begins: it may take as long as many steps), then the task's validation
    records; its "val" record is stamped with the step, tokens and time, and kept."""
    yield {"kind": "check", "step": run.step, "elapsed": round(time.perf_counter() - started, 3)}
    for record in task.evaluate():
        if record["kind"] == "val":
            record = run.log({k: v for k, v in record.items() if k != "kind"}, tokens, started, kind="val")
        yield record

