"""The loop every run shares, pre-training or fine-tuning (nanoGPT's train.py and minGPT's trainer are the models:
one flat loop, handed what it trains).

A run is a `Run`: its settings, its `Control` and its records. `Run.run()` calls its `prepare` function
(`trainer.prepare` for pre-training, `finetune.prepare` for fine-tuning), which builds the run's `Training`: the model
and tokenizer, the batches, the optimizer and schedule, and three small functions (the loss of a micro-batch with
its metrics, the validation records, and what a run stopped between validations shows). `train` then drives the
task: the device and precision, optimizer steps with clipping and the schedule, a stop from any thread, divergence
(`divergence.Divergence`) and running out of memory, a time budget (`time_budget.Budget`), periodic and final
checkpoints (atomic, Hugging Face format, with the run's settings and records beside them), and the timeline's
snapshots. Both the app and the CLI consume its plain-dict records.

Under `torchrun --nproc_per_node N` the same code trains with DistributedDataParallel: every rank draws its own
share of the examples, gradients are averaged, and rank 0 alone logs, validates and writes checkpoints.
"""
from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo import timeline
from bert_demo.checkpoint import TIED_KEYS, check_writable, optimizer_tensors, save_pretrained
from bert_demo.config import OPTIMIZER_NAME, read_metadata, trained_on
from bert_demo.divergence import Divergence
from bert_demo.records import DoneRecord, Record
from bert_demo.runtime import (
    Batch,
    Distributed,
    autocast,
    describe_hardware,
    pick_device,
    release_free_memory,
    resolve_precision,
    set_cpu_threads,
    to_device,
    wrap_for_training,
)
from bert_demo.time_budget import PACE_STEPS, Budget
from bert_demo.train_config import RunConfig, bounds

TRIM_EVERY = 50  # steps between handing freed heap memory back to the operating system (see release_free_memory)

Metrics = dict[str, tuple[Tensor | float, Tensor | float]]  # name: (sum, count), averaged as sum / count per record
Loss = Callable[[Any, Batch, Batch], tuple[Tensor, Metrics]]  # (output, CPU micro-batch, CPU batch): loss, metrics


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


@dataclass
class Training:
    """What one kind of run trains, as its `prepare` function built it."""

    model: torch.nn.Module
    batches: Iterator[Batch]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    loss: Loss  # the loss of a micro-batch's output (backward is the loop's) and the metrics to average
    evaluate: Callable[[bool], Iterator[Record]]  # validation records (final: the last one); "val" is stamped here
    look: Callable[[], Iterator[Record]] = lambda: iter(())  # what a run stopped between validations shows
    # what the model is told about a micro-batch beyond its tensors, read from its CPU copy (pre-training: how many
    # masked-LM targets it has, so that the GPU finds them without a synchronisation)
    known: Callable[[Batch], dict[str, Any]] = lambda part: {}


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
        self.metadata = read_metadata(self.resume) if self.resume else {}
        self.history: list[Record] = list(self.metadata.get("history", []))
        self.control.step = int(self.metadata.get("step", 0))
        self.snapshots: dict[int, timeline.State] = {}  # taken since the last save, written with the next one
        self._made_group = False  # whether run() started the torchrun process group (close() ends it)
        # the output folder's timeline is this run's own when it resumes there, or once this run has saved there;
        # a new run writing over an old folder must not inherit that folder's snapshots
        self._owns_timeline = self.resume is not None and self.resume.resolve() == Path(config.out).resolve()

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
        if self.dist.world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self._made_group = True
        task = yield from self.prepare(self)
        if task is None:
            yield self.nothing_written()
            return
        yield from train(self, task, started)

    def close(self) -> None:
        """End the torchrun process group this run made, once its caller is done with it (the CLI, at exit)."""
        if self._made_group and dist.is_initialized():
            dist.destroy_process_group()
            self._made_group = False

    def stopping_now(self) -> bool:
        """Whether to stop before the next step or phase. Under torchrun the ranks agree (any rank asked, all stop):
        a rank that stopped alone would leave the others waiting for ever in the next gradient all-reduce."""
        if self.dist.world_size == 1:
            return self.control.stopping
        flag = torch.tensor([float(self.control.stopping)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def agree(self, value: int, choose: Callable[[int, int], int]) -> int:
        """One value for every rank of a torchrun job (`choose`: min or max of theirs); alone, `value`."""
        if self.dist.world_size == 1:
            return value
        tensor = torch.tensor([value], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN if choose is min else dist.ReduceOp.MAX)
        return int(tensor.item())

    def nothing_written(self) -> DoneRecord:
        """The last record of a run stopped before its first step: the output folder keeps what it held."""
        return {"kind": "done", "reason": "stopped", "step": self.step, "checkpoint": None,
                "message": f"stopped before the first step: nothing was written to {self.config.out}"}

    def log(self, metrics: dict[str, float], tokens: int, started: float, kind: str = "train",
            lr: float | None = None) -> Record:
        """A training or validation record, kept in the run's history."""
        record = {"kind": kind, "step": self.step, "tokens": tokens, **metrics,
                  "elapsed": round(time.perf_counter() - started, 3)}
        if lr is not None:
            record["lr"] = lr
        self.history.append(record)
        return record

    def take_snapshot(self) -> Iterator[Record]:
        """Keep this step's weights for the timeline, unless the run's snapshots would pass their disk budget."""
        size = sum(t.numel() * 2 for name, t in self.model.state_dict().items() if name not in TIED_KEYS)  # fp16
        written = timeline.used_bytes(self.config.out) if self._owns_timeline else 0
        if written + sum(map(timeline.size, self.snapshots.values())) + size > timeline.BUDGET_BYTES:
            yield {"kind": "status", "step": self.step,
                   "message": f"no timeline snapshot at step {self.step}: this model's snapshots would pass their "
                              f"{timeline.BUDGET_BYTES // 2**20} MB budget"}
            return
        self.snapshots[self.step] = timeline.snapshot(self.model, skip=frozenset(TIED_KEYS))

    def save(self, optimizer, started: float) -> Path | None:
        """Rank 0 writes the checkpoint (atomically); the other ranks wait for it."""
        if not self.dist.is_main:
            dist.barrier()
            return None
        elapsed = float(self.metadata.get("elapsed", 0.0)) + time.perf_counter() - started
        hardware, here = trained_on(self.metadata), describe_hardware(self.device, self.dist.world_size)
        metadata = {"train_config": asdict(self.config), "step": self.step, "history": self.history,
                    "elapsed": round(elapsed, 3), "device": self.device.type, "precision": self.precision,
                    "hardware": hardware if here in hardware else [*hardware, here],
                    "world_size": self.dist.world_size, "parameters": self.model.num_parameters(),
                    "origin": self.origin, "visible_to": self.visible_to}
        try:
            extra = {timeline.file_name(step): state for step, state in self.snapshots.items()}
            if optimizer is not None and self.origin != "app":  # the app never resumes its runs (it continues one
                extra[OPTIMIZER_NAME] = optimizer_tensors(optimizer)  # with a new optimizer): 2/3 of a run's bytes
            with self.control.lock:
                saved = save_pretrained(self.model, self.tokenizer, self.config.out, metadata=metadata,
                                        extra_files=extra,
                                        keep=(timeline.FOLDER,) if self._owns_timeline else ())
            self.snapshots.clear()
            self._owns_timeline = True
            return saved
        finally:  # a failed save (disk full) must not leave the other ranks waiting at the barrier for ever
            if self.dist.world_size > 1:
                dist.barrier()

    def rescue(self, model: torch.nn.Module, tokenizer: BertTokenizerFast, step: int, history: list[Record],
               message: str) -> DoneRecord:
        """Save weights that outlived the process that trained them (the app's shared copy of a run whose process
        was killed) as this run's checkpoint, stopped at `step`, with the records it had sent."""
        self.model, self.tokenizer, self.control.step, self.history = model, tokenizer, step, history
        elapsed = float(history[-1]["elapsed"]) if history else 0.0
        return self.finish("stopped", time.perf_counter() - elapsed, None, message)

    def finish(self, reason: str, started: float, optimizer, message: str | None = None) -> DoneRecord:
        """Save the checkpoint and say how the run ended."""
        record: DoneRecord = {"kind": "done", "reason": reason, "step": self.step, "message": message}
        try:
            saved = self.save(optimizer, started)
            record["checkpoint"] = str(saved) if saved else None
        except OSError as exc:
            record["checkpoint"] = None
            record["message"] = f"{message or ''} The checkpoint could not be written to {self.config.out}: " \
                                f"{exc.strerror or exc}".strip()
        return record


def train(run: Run, task: Training, started: float) -> Iterator[Record]:
    """The training loop: steps until the run's last or a stop, with its records, snapshots, validations and saves,
    then the final checkpoint."""
    cfg, control, main = run.config, run.control, run.dist.is_main
    optimizer, schedule = task.optimizer, task.schedule
    forward = wrap_for_training(task.model, run.device, run.dist.world_size, cfg.compile)
    window, first_step = Window(), control.step
    tokens_seen = int(run.history[-1]["tokens"]) if run.history else 0
    taken = timeline.steps(cfg.out) if run._owns_timeline else []  # a resumed run's: never taken twice
    budget = Budget(started + 60 * cfg.minutes, first_step) if cfg.minutes else None
    if budget is not None:
        cfg.steps = bounds("steps")[1]  # until the pace is known; then the time decides
    due = set(timeline.snapshot_steps(cfg.steps)) - set(taken)
    divergence = Divergence(run.device, 1 if run.device.type == "cpu" else cfg.log_every)
    if main and control.step in due:
        yield from run.take_snapshot()
    while control.step < cfg.steps and not run.stopping_now():
        batch = next(task.batches)
        optimizer.zero_grad(set_to_none=True)
        try:
            out = _accumulate(run, task, forward, batch, window)
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)  # free this step's gradients before saving
            torch.cuda.empty_cache()
            yield run.finish("out of memory", started, optimizer, f"step {control.step + 1} ran out of memory on "
                             f"{run.device}: the run stopped and the weights from before that step were saved. "
                             "Try a smaller batch, sequence length or model.")
            return
        grad_norm = torch.nn.utils.clip_grad_norm_(task.model.parameters(), cfg.grad_clip)
        with control.lock:  # the step counts with the weights: a reader of both never sees one without the other
            if divergence.guard(optimizer, grad_norm, out.loss, control.step + 1):
                optimizer.step()
            schedule.step()
            control.step += 1
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
        if budget is not None:
            planned = budget.after(step)
            if planned is not None:
                before, cfg.steps = cfg.steps, run.agree(planned, min)
                due = set(timeline.snapshot_steps(cfg.steps)) - set(taken)
                if budget.worth_telling(before, cfg.steps):
                    yield {"kind": "status", "step": step, "steps": cfg.steps, "message": f"{budget.pace * 1000:.1f}"
                           f" ms a step: {cfg.steps:,} steps fit the {cfg.minutes:g} minutes"}
            if budget.spent() and not run.stopping:
                run.stop()
                yield {"kind": "status", "step": step, "message": f"the {cfg.minutes:g} minutes are up: the run "
                       "stops and saves" + ("" if budget.pace else f", before it could time {PACE_STEPS[1]} steps "
                                            "of its own (its preparation took most of the time)")}
        if main and step in due:
            yield from run.take_snapshot()
        if step % TRIM_EVERY == 0:
            release_free_memory()
        tokens_seen += int(batch["attention_mask"].sum()) * run.dist.world_size
        if main and (step % cfg.log_every == 0 or step == cfg.steps):
            yield run.log(window.flush(run.dist.world_size), tokens_seen, started, lr=schedule.get_last_lr()[0])
        if main and (step % cfg.eval_every == 0 or step == cfg.steps):
            yield from _validation(run, task, tokens_seen, started)
        if step % cfg.save_every == 0 and step < cfg.steps:
            try:
                run.save(optimizer, started)
            except OSError as exc:  # disk full, say: keep training; the final save tries again
                yield {"kind": "status", "step": step, "message": f"could not save the checkpoint at step {step} to "
                                                                  f"{cfg.out}: {exc.strerror or exc}; training goes on"}
    if control.step == first_step < cfg.steps:
        yield run.nothing_written()
        return
    if main and control.step < cfg.steps and control.step % cfg.eval_every:  # stopped between two validations
        yield from task.look()
    yield run.finish("finished" if control.step >= cfg.steps else "stopped", started, optimizer)


def _accumulate(run: Run, task: Training, forward: torch.nn.Module, batch: Batch, window: Window) -> Any:
    """Forward and backward passes over the batch's micro-batches (gradient accumulation), adding their metrics to
    `window`; the last output. Only the forward pass runs under autocast, as PyTorch advises; backward runs outside
    it, inside DDP's `no_sync` for every micro-batch but the last. The task reads what it needs from the CPU copy of
    the batch, so that no step waits on the GPU for it."""
    parts = split_batch(batch, run.config.grad_accum)
    for index, part in enumerate(parts):
        tokens = int(part["attention_mask"].sum())
        on_device = to_device(part, run.device)
        last = index == len(parts) - 1
        with nullcontext() if last or run.dist.world_size == 1 else forward.no_sync():
            with autocast(run.device, run.precision):
                out = forward(**on_device, **task.known(part))
            loss, metrics = task.loss(out, part, batch)
            loss.backward()
        window.add(metrics, tokens)
    return out


def _validation(run: Run, task: Training, tokens: int, started: float) -> Iterator[Record]:
    """A "check" record (a validation begins: it may take as long as many steps), then the task's validation
    records; its "val" record is stamped with the step, tokens and time, and kept."""
    yield {"kind": "check", "step": run.step, "elapsed": round(time.perf_counter() - started, 3)}
    for record in task.evaluate(run.step >= run.config.steps):
        if record["kind"] == "val":
            record = run.log({k: v for k, v in record.items() if k != "kind"}, tokens, started, kind="val")
        yield record


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Cut a batch into `parts` equal micro-batches along the batch dimension (gradient accumulation)."""
    if parts == 1:
        return [batch]
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]
