"""From one example to a batch: what a step on a batch does that a step on one example does not (Devlin et al. 2019,
Appendix A.2: batches of 256 sequences), with the trainer's own code and the model's own numbers.

The batch is the drawn example and the examples the trainer's stream draws after it (`pretraining.sentence_pairs`,
the same seed and recipe), padded together as a batch is. Its loss is the trainer's (`pretraining.micro_batch_loss`):
the masked-LM loss is the mean over every picked position in the batch, so example i's part of the batch's gradient
is (n_i / N) x its own masked-LM gradient plus (w / B) x its NSP gradient, and the parts add up to the batch's
gradient. One step of a fresh optimizer (the recipe's: AdamW, or LAMB) on the batch, and one on the drawn example
alone, each the loop's own clipping and step on a private copy, show how each example's loss moves.

The same batch shows the two other things a real step has that one example's does not: dropout's noise (the gradient
under a few draws of the recipe's dropout mask against none) and gradient accumulation (the examples' parts are the
batch taken as micro-batches of one example, each's loss weighted by the trainer's own `micro_batch_loss`: their sum
is the batch's gradient).
"""
from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from bert_demo.config import whole_number
from bert_demo.data.pairs import SpecialIds
from bert_demo.inspection.pretraining_example import Documents, tokenized
from bert_demo.config import IS_NEXT
from bert_demo.model import IGNORE_INDEX, BertForPreTraining, in_eval_mode, private_view
from bert_demo.training.pretraining import micro_batch_loss, sentence_pairs
from bert_demo.training.recipe import make_optimizer, set_dropout
from bert_demo.training.settings import LESSON_BATCH, TrainConfig
from bert_demo.training.step import backward, update

SHOWN_WEIGHTS = 4  # the weights whose gradient is shown split into the examples' parts
DROPOUT_DRAWS = 2  # draws of the dropout mask compared, each with the gradient without it and with each other


@dataclass(frozen=True, kw_only=True)
class InBatch:
    """One example of the batch."""

    targets: int  # its picked positions
    share: float  # its masked-LM loss's weight in the batch's: targets / the batch's targets
    is_next: bool
    cosine: float  # between its own gradient (its loss's, alone) and the batch's
    loss_before: float  # its own loss: its masked-LM mean + nsp_weight x its NSP loss (eval mode)
    loss_after_batch: float  # after one step on the batch
    loss_after_alone: float  # after one step on the drawn example (example 0) alone


@dataclass(frozen=True, kw_only=True)
class WeightParts:
    """One weight's gradient in the batch, split into each example's part."""

    name: str
    index: tuple[int, ...]
    parts: list[float]  # example i's part: (n_i/N) x its masked-LM gradient + (w/B) x its NSP gradient
    batch: float  # the batch's gradient, from one backward pass over the batch


@dataclass(frozen=True, kw_only=True)
class Dropout:
    """The batch's gradient under `draws` draws of the dropout mask, against the gradient without dropout."""

    rate: float
    change: list[float]  # per draw: |g_draw - g_none| / |g_none|
    cosine: list[float]  # per draw: between g_draw and g_none
    between: float  # the cosine between the first two draws


@dataclass(frozen=True, kw_only=True)
class Accumulation:
    """The batch taken as micro-batches of one example each, their gradients (the examples' parts) summed as the
    loop's loss.backward() sums them, against one pass over the whole batch."""

    micro_batches: int
    largest: float  # the largest |gradient| of the whole batch's
    difference: float  # the largest |accumulated - whole| over every weight


@dataclass(frozen=True, kw_only=True)
class BatchStep:
    """A step on the drawn example's batch, beside a step on the example alone."""

    size: int
    lr: float
    nsp_weight: float
    examples: list[InBatch]  # example 0 is the drawn one
    weights: list[WeightParts]
    batch_norm: float  # the norm of the batch's gradient (before clipping)
    alone_norm: float  # the norm of the drawn example's gradient alone
    dropout: Dropout
    accumulation: Accumulation


def draw_batch(source: Documents, tokenizer: Any, recipe: TrainConfig, seed: int, size: int) -> dict[str, Tensor]:
    """The first `size` examples the trainer's stream draws with `seed` from `source` (the first is the example
    `pretraining_example.draw` shows), padded into one batch as the collator pads: [PAD], attention mask 0, no
    label."""
    check_size(size)
    data = sentence_pairs(recipe, tokenized(source, tokenizer), SpecialIds.from_tokenizer(tokenizer), seed, 1,
                          first_step=0)
    rows = [batch for batch, _ in zip(data.shard_batches(0, 1), range(size))]
    length = max(row["input_ids"].shape[1] for row in rows)
    fill = {"input_ids": tokenizer.pad_token_id, "token_type_ids": 0, "attention_mask": 0, "mlm_labels": IGNORE_INDEX}
    batch = {name: torch.cat([nn.functional.pad(row[name], (0, length - row[name].shape[1]), value=value)
                              for row in rows]) for name, value in fill.items()}
    return {**batch, "nsp_labels": torch.cat([row["nsp_labels"] for row in rows])}


def check_size(size: object) -> int:
    """A batch size as a whole number from 2 to LESSON_BATCH, else a ValueError that says what is allowed."""
    return whole_number(size, "the number of examples in the batch", 2, LESSON_BATCH)


def step_on_batch(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig) -> BatchStep:
    """The batch's gradient and its examples' parts, a fresh optimizer's step on the batch and on example 0 alone
    (the recipe's peak rate, its clipping), each example's loss before and after each, dropout's noise and
    accumulation's equality; the model handed in is never written to. The examples' gradients are read one at a
    time and not kept (a batch of them would hold the model's size again for each)."""
    size = check_size(len(batch["nsp_labels"]))
    view = private_view(model).eval()
    rows = [_row(batch, i) for i in range(size)]
    whole = gradient(view, batch, recipe)
    shown = _shown_weights(whole)
    targets = [int((row["mlm_labels"] != IGNORE_INDEX).sum()) for row in rows]
    summed = {name: torch.zeros_like(g) for name, g in whole.items()}
    cosines, parts, alone = [], [], {}
    for row in rows:
        part, own = _part_and_own(view, row, batch, recipe)
        for name in whole:
            summed[name] += part[name]
        cosines.append(_cosine(own, whole))
        parts.append([float(part[name][index]) for name, index in shown])
        alone = alone or own
    accumulation = Accumulation(micro_batches=size, largest=max(float(g.abs().max()) for g in whole.values()),
                                difference=max(float((summed[name] - whole[name]).abs().max()) for name in whole))
    del summed
    before = [_loss(view, row, recipe) for row in rows]
    after_batch, after_alone = _after_step(model, whole, recipe, rows), _after_step(model, alone, recipe, rows)
    examples = [InBatch(targets=targets[i], share=targets[i] / sum(targets),
                        is_next=int(rows[i]["nsp_labels"][0]) == IS_NEXT, cosine=cosines[i],
                        loss_before=before[i], loss_after_batch=after_batch[i], loss_after_alone=after_alone[i])
                for i in range(size)]
    weights = [WeightParts(name=name, index=index, parts=[row[j] for row in parts], batch=float(whole[name][index]))
               for j, (name, index) in enumerate(shown)]
    return BatchStep(size=size, lr=recipe.lr, nsp_weight=recipe.nsp_weight, examples=examples, weights=weights,
                     batch_norm=_norm(whole), alone_norm=_norm(alone),
                     dropout=dropout_noise(model, batch, recipe, whole), accumulation=accumulation)


def gradient(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig) -> dict[str, Tensor]:
    """The gradient of the trainer's loss on the CPU `batch`, by the training loop's own forward and backward passes
    (`step.backward`) over the whole batch, for every weight, on leaves of this call's own, so that nothing is written
    to the model's `.grad`."""
    leaves = _leaves(model)
    loss = functools.partial(micro_batch_loss, replace(recipe, grad_accum=1))
    backward(lambda **inputs: _forward(model, leaves, inputs), batch, loss, device=_device(leaves))
    return {name: torch.zeros_like(leaf) if leaf.grad is None else leaf.grad for name, leaf in leaves.items()}


def _leaves(model: BertForPreTraining) -> dict[str, Tensor]:
    return {name: p.detach().requires_grad_() for name, p in model.named_parameters()}


def _part_and_own(model: BertForPreTraining, row: dict[str, Tensor], batch: dict[str, Tensor],
                  recipe: TrainConfig) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """One example's part of the batch's gradient, its loss as the trainer weights a micro-batch of one example (its
    share of the batch's picked positions, the NSP loss / the batch's size: `micro_batch_loss`); and its own loss's
    gradient, as if it were the whole batch. One forward pass, two backward passes."""
    leaves = _leaves(model)
    out = _forward(model, leaves, row)
    size = len(batch["nsp_labels"])
    part, _ = micro_batch_loss(replace(recipe, grad_accum=size, batch_size=size), out, row, batch)
    own, _ = micro_batch_loss(replace(recipe, grad_accum=1), out, row, row)
    grads = [torch.autograd.grad(loss, list(leaves.values()), allow_unused=True, retain_graph=keep)
             for loss, keep in ((part, True), (own, False))]
    return tuple({name: torch.zeros_like(leaves[name]) if g is None else g for name, g in zip(leaves, found)}
                 for found in grads)


def _forward(model: BertForPreTraining, leaves: dict[str, Tensor], batch: dict[str, Tensor]) -> Any:
    device = _device(leaves)
    return torch.func.functional_call(model, leaves, (), {k: v.to(device) for k, v in batch.items()}, strict=False)


def _device(leaves: dict[str, Tensor]) -> torch.device:
    return next(iter(leaves.values())).device


def dropout_noise(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig,
                  none: dict[str, Tensor], rate: float = 0.1, draws: int = DROPOUT_DRAWS) -> Dropout:
    """The batch's gradient under `draws` draws of dropout at `rate` (the paper's 0.1), each against `none`, the
    gradient without dropout, and the first two against each other."""
    view = private_view(model)
    set_dropout(view, rate)
    view.train()
    seen = [gradient(view, batch, recipe) for _ in range(draws)]
    return Dropout(rate=rate, change=[_norm({n: g[n] - none[n] for n in none}) / _norm(none) for g in seen],
                   cosine=[_cosine(g, none) for g in seen], between=_cosine(seen[0], seen[1]))


def _row(batch: dict[str, Tensor], i: int) -> dict[str, Tensor]:
    """Example i as a batch of one, its padding cut off."""
    length = int(batch["attention_mask"][i].sum())
    return {name: value[i:i + 1, :length] if value.dim() == 2 else value[i:i + 1] for name, value in batch.items()}


def _loss(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig) -> float:
    """The trainer's loss on a batch (eval mode, no gradient)."""
    with torch.inference_mode():
        device = next(model.parameters()).device
        out = in_eval_mode(model)(**{k: v.to(device) for k, v in batch.items()})
        return float(micro_batch_loss(recipe, out, batch, batch)[0])


def _after_step(model: BertForPreTraining, grads: dict[str, Tensor], recipe: TrainConfig,
                rows: list[dict[str, Tensor]]) -> list[float]:
    """Each row's loss after one step of a fresh optimizer (the recipe's, at its peak rate) on `grads`, clipped and
    stepped by the training loop's own `step.update`, on a private copy."""
    own = copy.deepcopy(model)
    for name, p in own.named_parameters():
        p.grad = grads[name].detach().clone()
    update(own, make_optimizer(own, recipe), recipe.grad_clip)
    return [_loss(own, row, recipe) for row in rows]


def _shown_weights(whole: dict[str, Tensor]) -> list[tuple[str, tuple[int, ...]]]:
    """The weights shown split into parts: the largest gradient of a few tensors, from the heads down."""
    names = [name for name in ("cls.seq_relationship.weight", "cls.predictions.transform.dense.weight",
                               "bert.encoder.layer.0.attention.self.query.weight",
                               "bert.embeddings.word_embeddings.weight") if name in whole][:SHOWN_WEIGHTS]
    return [(name, _unravel(int(whole[name].abs().argmax()), whole[name].shape)) for name in names]


def _unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))


def _norm(grads: dict[str, Tensor]) -> float:
    return math.sqrt(sum(float(g.float().pow(2).sum()) for g in grads.values()))


def _cosine(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    dot = sum(float((a[name].float() * b[name].float()).sum()) for name in b)
    return dot / max(_norm(a) * _norm(b), 1e-30)
