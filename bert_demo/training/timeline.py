"""A run's timeline: light snapshots of its weights at growing intervals, to see how the model got where it is.

Snapshots are taken at steps 0, 10, 30, 100, 300, 1,000, 3,000, ... (a factor of about 3 each time), kept in memory
until the next checkpoint save, and written with it, atomically, into the checkpoint folder's `timeline/` as
half-precision safetensors (`step-000100.safetensors`). The final weights are the checkpoint itself. A run keeps at
most BUDGET_BYTES of snapshots: a model too big for the budget keeps its earliest snapshots only, and says so.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from bert_demo.checkpoint import TIED_KEYS

FOLDER = "timeline"
BUDGET_BYTES = 128 * 2**20  # per run: 11 snapshots of `mini` (11 MB each), 40 of `tiny`; `base` keeps none
_NAME = re.compile(r"step-(\d{6,})\.safetensors")
State = dict[str, torch.Tensor]


def snapshot_steps(total: int) -> list[int]:
    """The steps below `total` that get a snapshot: 0, 10, 30, 100, 300, 1000, 3000, ..."""
    steps, scale = [0], 10
    while scale < total:
        steps += [s for s in (scale, 3 * scale) if s < total]
        scale *= 10
    return steps


def file_name(step: int) -> str:
    return f"{FOLDER}/step-{step:06d}.safetensors"


def snapshot(model: torch.nn.Module, skip: frozenset[str] = frozenset()) -> State:
    """The model's weights as half-precision CPU copies (a snapshot is for looking at, not for training on)."""
    return {name: tensor.detach().to("cpu", torch.float16).contiguous()
            for name, tensor in model.state_dict().items() if name not in skip}


def size(state: State) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def steps(folder: str | Path | None) -> list[int]:
    """The steps a checkpoint folder has snapshots of, in order (none for a folder without a timeline)."""
    if folder is None or not (Path(folder) / FOLDER).is_dir():
        return []
    return sorted(int(m[1]) for p in (Path(folder) / FOLDER).iterdir() if (m := _NAME.fullmatch(p.name)))


def used_bytes(folder: str | Path) -> int:
    timeline = Path(folder) / FOLDER
    return sum(p.stat().st_size for p in timeline.iterdir()) if timeline.is_dir() else 0


def load(folder: str | Path, step: int) -> State:
    """A snapshot's weights in float32, ready for `load_state_dict(strict=False)` (tied weights are left out)."""
    if step not in steps(folder):
        raise ValueError(f"this run has no snapshot at step {step}: it has {', '.join(map(str, steps(folder)))}")
    return {name: tensor.float() for name, tensor in load_file(str(Path(folder) / file_name(step))).items()}


def load_into(model: torch.nn.Module, folder: str | Path, step: int) -> None:
    """Put a snapshot's weights into `model`: every one of its weights but the tied ones, which a snapshot leaves out
    (they follow the word table). A snapshot that misses another weight, or holds one the model lacks, is refused:
    a partial load would show a mix of two models."""
    missing, unexpected = model.load_state_dict(load(folder, step), strict=False)
    if unexpected or set(missing) - set(TIED_KEYS):
        raise ValueError(f"the snapshot at step {step} does not fit the model: it lacks "
                         f"{sorted(set(missing) - set(TIED_KEYS))[:3]} and has {sorted(unexpected)[:3]} besides")
