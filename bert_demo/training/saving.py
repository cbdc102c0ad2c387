"""How a run is saved: its checkpoint, written atomically in Hugging Face format with the run's settings and records
beside it, and its timeline's snapshots with each save; and the record that says how the run ended.

A run's output folder may hold another run's timeline (a new run writing over an old folder): the snapshots there
are this run's own only when it resumes that folder, or once it has saved there, so a new run never inherits them.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from bert_demo.checkpoint import TIED_KEYS, save_pretrained
from bert_demo.config import OPTIMIZER_NAME, trained_on
from bert_demo.training import timeline
from bert_demo.training.recipe import optimizer_tensors
from bert_demo.training.records import DoneRecord, Record
from bert_demo.training.runtime import Distributed, describe_hardware
from bert_demo.training.settings import RunConfig


class Saved(Protocol):
    """What a save reads of a run (`training.loop.Run` has it): what it writes, and how the run stands. Declared
    here so that saving imports nothing of the loop that calls it."""

    config: RunConfig
    model: torch.nn.Module
    tokenizer: Any
    dist: Distributed
    device: torch.device
    precision: str
    origin: str
    visible_to: Any
    metadata: dict[str, Any]
    history: list[Record]
    total_steps: int | None
    training_words: int | None

    @property
    def step(self) -> int: ...

    @property
    def control(self) -> Any: ...  # its `lock`, held while the weights are read


class Saving:
    """A run's checkpoints and timeline. Rank 0 alone writes; the other ranks wait for it."""

    def __init__(self, out: str | Path, resumed: Path | None):
        self.out = Path(out)
        self.snapshots: dict[int, timeline.State] = {}  # taken since the last save, written with the next one
        self.owns_timeline = resumed is not None and resumed.resolve() == self.out.resolve()

    def taken(self) -> list[int]:
        """The steps of this run's timeline already written (a resumed run's: never taken twice)."""
        return timeline.steps(self.out) if self.owns_timeline else []

    def snapshot(self, model: torch.nn.Module, step: int) -> Record | None:
        """Keep this step's weights for the timeline, unless the run's snapshots would pass their disk budget: then
        a status record that says so."""
        size = sum(t.numel() * 2 for name, t in model.state_dict().items() if name not in TIED_KEYS)  # fp16
        written = timeline.used_bytes(self.out) if self.owns_timeline else 0
        if written + sum(map(timeline.size, self.snapshots.values())) + size > timeline.BUDGET_BYTES:
            return {"kind": "status", "step": step,
                    "message": f"no timeline snapshot at step {step}: this model's snapshots would pass their "
                               f"{timeline.BUDGET_BYTES // 2**20} MB budget"}
        self.snapshots[step] = timeline.snapshot(model, skip=frozenset(TIED_KEYS))
        return None

    def save(self, run: Saved, optimizer: torch.optim.Optimizer | None, started: float) -> Path | None:
        """Write the run's checkpoint, its records and the snapshots taken since the last save (rank 0); the
        optimizer's moments too, where the run's settings say so (`save_optimizer`)."""
        if not run.dist.is_main:
            dist.barrier()
            return None
        try:
            extra = {timeline.file_name(step): state for step, state in self.snapshots.items()}
            if optimizer is not None and run.config.save_optimizer:
                extra[OPTIMIZER_NAME] = optimizer_tensors(optimizer)
            with run.control.lock:
                saved = save_pretrained(run.model, run.tokenizer, self.out, metadata=self._metadata(run, started),
                                        extra_files=extra, keep=(timeline.FOLDER,) if self.owns_timeline else ())
            self.snapshots.clear()
            self.owns_timeline = True
            return saved
        finally:  # a failed save (disk full) must not leave the other ranks waiting at the barrier for ever
            if run.dist.world_size > 1:
                dist.barrier()

    def finish(self, run: Saved, reason: str, started: float, optimizer: torch.optim.Optimizer | None,
               message: str | None = None) -> DoneRecord:
        """Save the checkpoint and say how the run ended; a save that fails says why in the record."""
        record: DoneRecord = {"kind": "done", "reason": reason, "step": run.step, "message": message}
        try:
            saved = self.save(run, optimizer, started)
            record["checkpoint"] = str(saved) if saved else None
        except OSError as exc:
            record["checkpoint"] = None
            record["message"] = f"{message or ''} The checkpoint could not be written to {self.out}: " \
                                f"{exc.strerror or exc}".strip()
        return record

    def nothing_written(self, run: Saved) -> DoneRecord:
        """The last record of a run stopped before its first step: the output folder keeps what it held."""
        return {"kind": "done", "reason": "stopped", "step": run.step, "checkpoint": None,
                "message": f"stopped before the first step: nothing was written to {self.out}"}

    @staticmethod
    def _metadata(run: Saved, started: float) -> dict[str, Any]:
        """What is saved beside the weights: the settings as given (the run's length as it came to be is
        `planned_steps`), the records, the time spent (a resumed run's included), where it trained, and how many
        words its own training documents hold (a pre-training run's, where it counted them: the page says how much
        the shipped models read)."""
        elapsed = float(run.metadata.get("elapsed", 0.0)) + time.perf_counter() - started
        hardware, here = trained_on(run.metadata), describe_hardware(run.device, run.dist.world_size)
        return {"train_config": asdict(run.config), "planned_steps": run.total_steps, "step": run.step,
                "history": run.history, "elapsed": round(elapsed, 3), "device": run.device.type,
                "precision": run.precision, "hardware": hardware if here in hardware else [*hardware, here],
                "world_size": run.dist.world_size, "parameters": run.model.num_parameters(), "origin": run.origin,
                "visible_to": run.visible_to,
                **({"training_words": run.training_words} if run.training_words is not None else {})}
