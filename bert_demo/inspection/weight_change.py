"""What fine-tuning changed: how far each part of the encoder moved from the weights it started from.

For each part (the embeddings, every encoder layer, the pooler) the relative change is ||W_after - W_before|| /
||W_before||, over all of that part's weights together (Frobenius norms). Studies of BERT fine-tuning find the top
layers change most and the lower ones little (Merchant et al. 2020, "What Happens To BERT Embeddings During
Fine-tuning?"; Kovaleva et al. 2019): the general features pre-training learned stay, the top adapts to the task.
"""
from __future__ import annotations

import re

import torch
from torch import Tensor

_PART = re.compile(r"bert\.(embeddings|encoder\.layer\.(\d+)|pooler)\.")


def part_of(key: str) -> str | None:
    """The part a weight belongs to: "embeddings", "layer 1" (counted from 1, the bottom), "pooler"; None for the
    heads (masked LM, next sentence, classifier), which one of the two models lacks."""
    match = _PART.match(key)
    if match is None:
        return None
    return f"layer {int(match[2]) + 1}" if match[2] is not None else match[1]


def relative_change(before: dict[str, Tensor], after: dict[str, Tensor]) -> list[tuple[str, float]]:
    """Each part's relative change, bottom (embeddings) to top (pooler), over the weights both models have with the
    same shape. ValueError when they share none: they are not the same architecture."""
    moved: dict[str, list[float]] = {}  # part -> [squared change, squared size]
    for key, old in before.items():
        part, new = part_of(key), after.get(key)
        if part is None or new is None or new.shape != old.shape:
            continue
        old, new = old.double(), new.double()
        sums = moved.setdefault(part, [0.0, 0.0])
        sums[0] += float(torch.sum((new - old) ** 2))
        sums[1] += float(torch.sum(old ** 2))
    if not moved:
        raise ValueError("the two models share no encoder weights: they are not one architecture")
    return [(part, (change / size) ** 0.5 if size else 0.0) for part, (change, size) in
            sorted(moved.items(), key=lambda item: _order(item[0]))]


def _order(part: str) -> int:
    if part == "embeddings":
        return 0
    if part == "pooler":
        return 10**6
    return int(part.split()[1])
