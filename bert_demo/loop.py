"""The loop every run shares, pre-training or fine-tuning (nanoGPT's train.py and minGPT's trainer are the models:
one flat loop): the device and precision, optimizer steps with clipping and the schedule, a stop from any thread,
divergence and running out of memory, periodic and final checkpoints (atomic, Hugging Face format, with the run's
settings and records beside them), and the timeline's snapshots.

`Run.run()` is a generator of plain-dict records (progress, validation, the end of the run) that the app and the CLI
both consume. A run says what it optimises by four methods: `_prepare` (data, model, optimizer, schedule),
`_accumulate` (forward and backward over one batch), `_window` (what its training records average) and `_evaluate`
(its validation records). `trainer.Trainer` pre-trains, `finetune.FineTuner` fine-tunes.

Under `torchrun --nproc_per_node N` the same code trains with DistributedDataParallel: every rank draws its own
share of the examples, gradients are averaged, and rank 0 alone logs, validates and writes checkpoints.
"""
from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import BertTokenizerFast

from bert_demo import timeline
from bert_demo.checkpoint import TIED_KEYS, check_writable, optimizer_tensors, save_pretrained
from bert_demo.config import read_metadata, trained_on
from bert_demo.records import DoneRecord, Record
from bert_demo.train_config import RunConfig
from bert_demo.runtime import (
    Batch,
    Distributed,
    describe_hardware,
    pick_device,
    release_free_memory,
    resolve_precision,
    set_cpu_threads,
    wrap_for_training,
)

OPTIMIZER_NAME = "optimizer.safetensors"
TRIM_EVERY = 50  # steps between handing freed heap memory back to the operating system (see release_free_memory)


class Run:
    """One training run. Create it, iterate `run()`, and call `stop()` from anywhere to end it early."""

    def __init__(self, config: RunConfig, resume: str | Path | None = None, origin: str = "cli",
                 visible_to: str | None = None):
        """`origin` is stored with the checkpoint: the app deletes its own old runs ("app"), never others.
        `visible_to`, also stored, makes an app run private to one browser session (one trained on an upload)."""
        config.validate()
        self.origin, self.visible_to = origin, visible_to
        self.config = config
        self.resume = Path(resume) if resume else None
        if self.resume and not (self.resume / "config.json").is_file():
            raise ValueError(f"cannot resume from {self.resume}: it is not a checkpoint folder")
        self.dist = Distributed.from_env()
        if self.dist.is_main:
            check_writable(config.out)
        self.device = pick_device(config.device, self.dist)
        self.precision = resolve_precision(config.precision, self.device)
        self.lock = threading.Lock()  # held while weights change; `snapshot` takes it to copy a consistent model
        self._stop = threading.Event()
        self._made_group = False  # whether run() started the torchrun process group (close() ends it)
        self.after_step: Callable[[], None] | None = None  # called in the training thread after each step
        self.model: torch.nn.Module | None = None
        self.tokenizer: BertTokenizerFast | None = None
        self.metadata = read_metadata(self.resume) if self.resume else {}
        self.history: list[Record] = list(self.metadata.get("history", []))
        self.step = int(self.metadata.get("step", 0))
        self.snapshots: dict[int, timeline.State] = {}  # taken since the last save, written with the next one
        # the output folder's timeline is this run's own when it resumes there, or once this run has saved there;
        # a new run writing over an old folder must not inherit that folder's snapshots
        self._owns_timeline = self.resume is not None and self.resume.resolve() == Path(config.out).resolve()

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called."""
        return self._stop.is_set()

    def snapshot(self) -> torch.nn.Module | None:
        """An eval-mode copy of the current weights, safe to use while training continues."""
        if self.model is None:
            return None
        with self.lock:
            return copy.deepcopy(self.model).eval()

    def run(self) -> Iterator[Record]:
        """Prepare data and model, train, and yield records; the last one has kind "done"."""
        started = time.perf_counter()
        set_cpu_threads()
        torch.manual_seed(self.config.seed)
        if self.dist.world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self._made_group = True
        prepared = yield from self._prepare()
        if prepared is None:
            yield self._nothing_written()
            return
        yield from self._train(*prepared, started)

    def close(self) -> None:
        """End the torchrun process group this run made, once its caller is done with it (the CLI, at exit)."""
        if self._made_group and dist.is_initialized():
            dist.destroy_process_group()
            self._made_group = False

    def _prepare(self) -> Generator[Record, None, tuple | None]:
        """Data, model, optimizer and schedule, one status record per phase; (batches, optimizer, schedule), or None
        if a stop was asked for meanwhile."""
        raise NotImplementedError

    def _accumulate(self, forward: torch.nn.Module, batch: Batch, window: Any) -> Any:
        """Forward and backward passes over one batch, adding its metrics to `window`; the model's last output."""
        raise NotImplementedError

    def _window(self) -> Any:
        """A fresh window of running sums: `add` per micro-batch in `_accumulate`, `flush(world_size)` per log."""
        raise NotImplementedError

    def _evaluate(self, tokens: int, started: float) -> Iterator[Record]:
        """The records of a validation, at every eval_every steps and at the end."""
        raise NotImplementedError

    def _look(self) -> Iterator[Record]:
        """What a run stopped between two validations shows of the weights it keeps (nothing by default)."""
        return iter(())

    def _nothing_written(self) -> DoneRecord:
        """The last record of a run stopped before its first step: the output folder keeps what it held."""
        return {"kind": "done", "reason": "stopped", "step": self.step, "checkpoint": None,
                "message": f"stopped before the first step: nothing was written to {self.config.out}"}

    def _train(self, batches: Iterator[Batch], optimizer, schedule, started: float) -> Iterator[Record]:
        cfg, model, main = self.config, self.model, self.dist.is_main
        forward = wrap_for_training(model, self.device, self.dist.world_size, cfg.compile)
        window, first_step = self._window(), self.step
        tokens_seen = int(self.history[-1]["tokens"]) if self.history else 0
        taken = timeline.steps(cfg.out) if self._owns_timeline else []  # a resumed run's: never taken twice
        due = set(timeline.snapshot_steps(cfg.steps)) - set(taken)
        if main and self.step in due:
            yield from self._take_snapshot()
        while self.step < cfg.steps and not self._stopping():
            batch = next(batches)
            optimizer.zero_grad(set_to_none=True)
            try:
                out = self._accumulate(forward, batch, window)
            except torch.OutOfMemoryError:
                optimizer.zero_grad(set_to_none=True)  # free this step's gradients before saving
                torch.cuda.empty_cache()
                yield self._finish("out of memory", started, optimizer, f"step {self.step + 1} ran out of memory on "
                                   f"{self.device}: the run stopped and the weights from before that step were saved. "
                                   "Try a smaller batch, sequence length or model.")
                return
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if not torch.isfinite(grad_norm):
                yield self._finish("diverged", started, optimizer, f"the loss became {out.loss.item():.4g} at step "
                                   f"{self.step + 1}: the run stopped and the weights from before that step were "
                                   "saved. Try a lower learning rate.")
                return
            with self.lock:  # the step counts with the weights: a reader of both never sees one without the other
                optimizer.step()
                schedule.step()
                self.step += 1
            if self.after_step is not None:
                self.after_step()
            if main and self.step in due:
                yield from self._take_snapshot()
            if self.step % TRIM_EVERY == 0:
                release_free_memory()
            tokens_seen += int(batch["attention_mask"].sum()) * self.dist.world_size
            if main and (self.step % cfg.log_every == 0 or self.step == cfg.steps):
                yield self._log(window.flush(self.dist.world_size), tokens_seen, started,
                                lr=schedule.get_last_lr()[0])
            if main and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                yield from self._evaluate(tokens_seen, started)
            if self.step % cfg.save_every == 0 and self.step < cfg.steps:
                try:
                    self._save(optimizer, started)
                except OSError as exc:  # disk full, say: keep training; the final save tries again
                    yield {"kind": "status", "step": self.step,
                           "message": f"could not save the checkpoint at step {self.step} to {cfg.out}: "
                                      f"{exc.strerror or exc}; training goes on"}
        if self.step == first_step < cfg.steps:
            yield self._nothing_written()
            return
        if main and self.step < cfg.steps and self.step % cfg.eval_every:  # stopped between two validations
            yield from self._look()
        yield self._finish("finished" if self.step >= cfg.steps else "stopped", started, optimizer)

    def _stopping(self) -> bool:
        """Whether to stop before the next step. Under torchrun the ranks agree (any rank asked, all stop): a rank
        that stopped alone would leave the others waiting for ever in the next gradient all-reduce."""
        if self.dist.world_size == 1:
            return self._stop.is_set()
        flag = torch.tensor([float(self._stop.is_set())], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _log(self, metrics: dict[str, float], tokens: int, started: float, kind: str = "train",
             lr: float | None = None) -> Record:
        record = {"kind": kind, "step": self.step, "tokens": tokens, **metrics,
                  "elapsed": round(time.perf_counter() - started, 3)}
        if lr is not None:
            record["lr"] = lr
        self.history.append(record)
        return record

    def _take_snapshot(self) -> Iterator[Record]:
        """Keep this step's weights for the timeline, unless the run's snapshots would pass their disk budget."""
        size = sum(t.numel() * 2 for name, t in self.model.state_dict().items() if name not in TIED_KEYS)  # fp16
        written = timeline.used_bytes(self.config.out) if self._owns_timeline else 0
        if written + sum(map(timeline.size, self.snapshots.values())) + size > timeline.BUDGET_BYTES:
            yield {"kind": "status", "step": self.step,
                   "message": f"no timeline snapshot at step {self.step}: this model's snapshots would pass their "
                              f"{timeline.BUDGET_BYTES // 2**20} MB budget"}
            return
        self.snapshots[self.step] = timeline.snapshot(self.model, skip=frozenset(TIED_KEYS))

    def _save(self, optimizer, started: float) -> Path | None:
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
            with self.lock:
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
        self.model, self.tokenizer, self.step, self.history = model, tokenizer, step, history
        elapsed = float(history[-1]["elapsed"]) if history else 0.0
        return self._finish("stopped", time.perf_counter() - elapsed, None, message)

    def _finish(self, reason: str, started: float, optimizer, message: str | None = None) -> DoneRecord:
        record: DoneRecord = {"kind": "done", "reason": reason, "step": self.step, "message": message}
        try:
            saved = self._save(optimizer, started)
            record["checkpoint"] = str(saved) if saved else None
        except OSError as exc:
            record["checkpoint"] = None
            record["message"] = f"{message or ''} The checkpoint could not be written to {self.config.out}: " \
                                f"{exc.strerror or exc}".strip()
        return record


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Cut a batch into `parts` equal micro-batches along the batch dimension (gradient accumulation)."""
    if parts == 1:
        return [batch]
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]
