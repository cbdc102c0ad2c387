"""BERT's masking rule, as numbers (Devlin et al. 2019, §3.1, "Task #1"): the share of a sequence's positions picked
as masked-LM targets, what becomes of the picked ones, and how many a sequence may hold; and the next-sentence labels.
Imports nothing, so the settings (`training.settings`) and the app's first page read it without torch; `data.collator`
applies it."""
from __future__ import annotations

from enum import IntEnum

MASK_PROB = 0.15  # the paper's share of positions picked; validation always picks this share
REPLACE_MASK, REPLACE_RANDOM = 0.8, 0.1  # of the picked: [MASK], a random word; the rest (0.1) stay as they are


class Fate(IntEnum):
    """What masking did to a position (the collator's "mlm_fates"): not picked, or picked and then made [MASK],
    replaced by a random word, or kept as it was."""

    NOT_PICKED = 0
    MASK = 1
    RANDOM = 2
    KEPT = 3


FATES = ("not picked", "[MASK]", "a random word", "kept")  # each Fate in words, by its value
MARKED = {Fate.RANDOM: " (random)", Fate.KEPT: " (kept)"}  # after a picked position whose input is not [MASK]
PICKED = (Fate.MASK, Fate.RANDOM, Fate.KEPT)
IS_NEXT_SHARE = 0.5  # the share of pairs whose B is what follows A (§3.1: "50% of the time B is the actual next")


def fate_shares(mask_share: float = REPLACE_MASK) -> dict[Fate, float]:
    """What becomes of the picked positions: `mask_share` of them [MASK], the rest a random word or kept, half and
    half (BERT: 0.8, so 80/10/10)."""
    rest = (1 - mask_share) / 2
    return {Fate.MASK: mask_share, Fate.RANDOM: rest, Fate.KEPT: rest}


def max_predictions(seq_len: int, mask_prob: float = MASK_PROB) -> int:
    """The most positions one sequence of `seq_len` tokens may have picked: its share, rounded, and one more (the
    reference code's max_predictions_per_seq, 20 at 128 tokens and 15%)."""
    return round(seq_len * mask_prob) + 1


def masking_rate(progress: float, rate: float, first: float | None = None) -> float:
    """The share of positions picked at `progress` (0 at the first step, 1 at the last) of a run: `first` falling
    linearly to `rate` (GPT-BERT 2024 masks 30% at first and 15% at the end), or `rate` throughout."""
    if first is None:
        return rate
    return first + (rate - first) * min(max(progress, 0.0), 1.0)
