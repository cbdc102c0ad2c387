"""A batch as the model reads it: examples padded to one length, and BERT's masked-LM targets drawn afresh for it
(Devlin et al. 2019, §3.1, "Task #1"; RoBERTa's dynamic masking), single tokens or runs of them (SpanBERT).

Shapes: B batch, T tokens (the longest example in the batch).
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from bert_demo.data.masking import MASK_PROB, REPLACE_MASK, REPLACE_RANDOM, Fate
from bert_demo.model import IGNORE_INDEX


@dataclass(frozen=True, kw_only=True)
class SpecialIds:
    """The token ids the data pipeline needs to know about."""

    cls: int
    sep: int
    mask: int
    pad: int
    vocab_size: int
    special: tuple[int, ...]  # never masking targets, never drawn as random replacements

    @classmethod
    def from_tokenizer(cls, tokenizer: PreTrainedTokenizerBase) -> "SpecialIds":
        return cls(cls=tokenizer.cls_token_id, sep=tokenizer.sep_token_id, mask=tokenizer.mask_token_id,
                   pad=tokenizer.pad_token_id, vocab_size=len(tokenizer), special=tuple(tokenizer.all_special_ids))


@dataclass(frozen=True, kw_only=True)
class Example:
    """[CLS] A [SEP] B [SEP] before masking, with its segment ids and NSP label."""

    input_ids: array  # int32
    token_type_ids: array  # int8
    nsp_label: int


class MaskingCollator:
    """Pads a list of examples into a batch and draws the masked-LM targets afresh (BERT §3.1, "Task #1")."""

    def __init__(self, special: SpecialIds, max_predictions: int, mask_prob: float = MASK_PROB,
                 replace_mask: float = REPLACE_MASK, replace_random: float = REPLACE_RANDOM, span: int = 1):
        self.special = special
        self.max_predictions, self.span = max_predictions, span
        self.mask_prob, self.replace_mask, self.replace_random = mask_prob, replace_mask, replace_random
        self.special_tensor = torch.tensor(special.special)
        ordinary = torch.ones(special.vocab_size, dtype=torch.bool)
        ordinary[self.special_tensor] = False
        self.ordinary_ids = ordinary.nonzero().squeeze(1)  # random replacements are never special tokens

    def __call__(self, examples: Sequence[Example], generator: torch.Generator, fates: bool = False,
                 rate: float | None = None) -> dict[str, Tensor]:
        """The batch the model reads, `rate` of its positions picked (default: `mask_prob`); with `fates`, also
        "mlm_fates" (B, T): what masking did to each position (a `masking.Fate`), which a model is never shown."""
        T = max(len(e.input_ids) for e in examples)
        input_ids = torch.full((len(examples), T), self.special.pad, dtype=torch.long)  # (B, T)
        token_type_ids = torch.zeros_like(input_ids)
        attention_mask = torch.zeros_like(input_ids)
        for row, example in enumerate(examples):
            input_ids[row, :len(example.input_ids)] = torch.frombuffer(example.input_ids, dtype=torch.int32)
            token_type_ids[row, :len(example.token_type_ids)] = torch.frombuffer(example.token_type_ids,
                                                                                 dtype=torch.int8)
            attention_mask[row, :len(example.input_ids)] = 1
        input_ids, mlm_labels, fate = self.mask(input_ids, generator, rate)
        batch = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
                 "mlm_labels": mlm_labels, "nsp_labels": torch.tensor([e.nsp_label for e in examples])}
        return {**batch, "mlm_fates": fate} if fates else batch

    def mask(self, input_ids: Tensor, generator: torch.Generator, rate: float | None = None
             ) -> tuple[Tensor, Tensor, Tensor]:
        """Choose `rate` (default `mask_prob`) of each row's non-special tokens, rounded (at least one, at most
        `max_predictions`), single tokens or runs of up to `span`, then apply the 80/10/10 replacement: the
        masked ids, the labels (-100 where not picked) and each position's `masking.Fate`."""
        candidates = ~torch.isin(input_ids, self.special_tensor)  # (B, T); [PAD] is special too
        rate = self.mask_prob if rate is None else rate
        n_targets = (candidates.sum(1) * rate).round().clamp(1, self.max_predictions)  # (B,)
        if self.span > 1:
            targets = self.spans(candidates, n_targets, generator)
        else:
            scores = torch.rand(input_ids.shape, generator=generator).masked_fill(~candidates, 2.0)
            ranks = scores.argsort(dim=1).argsort(dim=1)  # 0 = the row's smallest score
            targets = (ranks < n_targets[:, None]) & candidates  # (B, T)
        labels = torch.where(targets, input_ids, IGNORE_INDEX)
        roll = torch.rand(input_ids.shape, generator=generator)
        to_mask = targets & (roll < self.replace_mask)
        to_random = targets & (roll >= self.replace_mask) & (roll < self.replace_mask + self.replace_random)
        random_ids = self.ordinary_ids[torch.randint(len(self.ordinary_ids), input_ids.shape, generator=generator)]
        masked = torch.where(to_mask, self.special.mask, input_ids)
        kept = targets & ~to_mask & ~to_random
        fates = ((Fate.MASK, to_mask), (Fate.RANDOM, to_random), (Fate.KEPT, kept))
        fate = sum(int(code) * chosen.to(torch.int8) for code, chosen in fates)  # a Fate a position
        return torch.where(to_random, random_ids, masked), labels, fate

    def spans(self, candidates: Tensor, n_targets: Tensor, generator: torch.Generator) -> Tensor:
        """Each row's `n_targets` picked in runs of consecutive candidates (SpanBERT, Joshi et al. 2020; GPT-BERT
        masks runs of 1-3): starts in a random order, each run's length uniform in 1..`span`, a run ending early at a
        special token, one already picked or the row's count. Returns the picked positions (B, T)."""
        B, T = candidates.shape
        order = torch.rand(B, T, generator=generator).argsort(dim=1).tolist()
        lengths = torch.randint(1, self.span + 1, (B, T), generator=generator).tolist()
        allowed, picked = candidates.tolist(), [[False] * T for _ in range(B)]
        for row, left in enumerate(n_targets.tolist()):
            left = int(left)
            for start, length in zip(order[row], lengths[row]):
                position = start
                while left and length and position < T and allowed[row][position] and not picked[row][position]:
                    picked[row][position] = True
                    position, length, left = position + 1, length - 1, left - 1
                if not left:
                    break
        return torch.tensor(picked)
