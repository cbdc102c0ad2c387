"""Adam over a run, and plain SGD beside it (Kingma & Ba 2015; Devlin et al. 2019, Appendix A.2): a few steps of a
real run on the trainer's own batches, optimizer and learning-rate schedule (`recipe.optimizer_and_schedule`: a
warm-up, then a linear decay) with its clipping, each step the training loop's own (`training.step`), on a private
copy of the model.

For a few weights, step by step: the gradient the optimizer read (after clipping), Adam's moments m and v, their
bias-corrected m̂ and v̂, the step m̂/(√v̂ + ε) in units of the rate, the rate itself, and the move. Beside them, what
SGD would have moved the same weight by with the same gradients and rates: −lr·g, and with momentum (MOMENTUM),
−lr·b where b = MOMENTUM·b + g. Adam's step (LAMB's: Adam's, rescaled by each matrix's trust ratio) is about the
rate whatever the gradient's size, where SGD's is the gradient's size times the rate, which after clipping is tiny:
that is why Adam trains BERT at a rate of 1e-4 where SGD would need far more.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from bert_demo.config import whole_number
from bert_demo.data.pairs import SpecialIds
from bert_demo.inspection.pretraining_example import Documents, tokenized
from bert_demo.inspection.training_step import OPTIMIZER_NAMES, pick_weights
from bert_demo.model import BertForPreTraining
from bert_demo.training.pretraining import micro_batch_loss, sentence_pairs
from bert_demo.training.recipe import optimizer_and_schedule
from bert_demo.training.settings import LESSON_RUN_BATCH, LESSON_RUN_EXAMPLES, LESSON_RUN_STEPS, TrainConfig
from bert_demo.training.step import backward, update

MOMENTUM = 0.9  # SGD's, beside Adam's β1 = 0.9
WARMUP_SHARE = 5  # a fifth of a short run warms up, so that a few steps show it (the paper: 1% of 1,000,000 steps)


@dataclass(frozen=True, kw_only=True)
class Trace:
    """One weight, step by step (index s is step s + 1)."""

    name: str
    index: tuple[int, ...]
    gradient: list[float]  # after clipping: what the optimizer read
    m: list[float]
    v: list[float]
    m_hat: list[float]
    v_hat: list[float]
    move: list[float]  # Adam's: the weight after minus before (weight decay included)
    sgd: list[float]  # plain SGD's move with the same gradients and rates: −lr·g
    momentum: list[float]  # SGD's momentum buffer b = 0.9·b + g (b = g at the first step)
    sgd_momentum: list[float]  # SGD with momentum: its move −lr·b


@dataclass(frozen=True, kw_only=True)
class OverTime:
    """A short run: its rates, losses and clipping, and a few weights traced through it."""

    optimizer: str  # the recipe's: AdamW, or LAMB
    peak_lr: float
    betas: tuple[float, float]
    eps: float
    momentum: float  # SGD's with momentum, beside the optimizer
    warmup: int
    batch_size: int
    rates: list[float]  # the rate each step used
    losses: list[float]  # the batch's loss before each step (each step's own batch)
    grad_norms: list[float]  # before clipping
    clipped: list[float]  # the factor clipping multiplied the gradients by (1: none)
    over_half: list[float]  # each step: the share of all weights moved by more than half that step's rate
    traces: list[Trace]


def run(model: BertForPreTraining, source: Documents, tokenizer: Any, recipe: TrainConfig, seed: int, steps: int,
        batch_size: int) -> OverTime:
    """`steps` steps of the recipe on the trainer's batches of `batch_size` drawn with `seed` from `source` (no
    dropout, so that a run repeats number for number), the schedule's warm-up over a fifth of them, then its
    decay."""
    _check(steps, batch_size)
    warmup = max(1, steps // WARMUP_SHARE)
    config = replace(recipe, steps=steps, warmup_steps=warmup, batch_size=batch_size, grad_accum=1)
    data = sentence_pairs(config, tokenized(source, tokenizer), SpecialIds.from_tokenizer(tokenizer), seed,
                          batch_size, first_step=0)
    own = copy.deepcopy(model).eval()  # its weights change: never the shared ones; eval: no dropout
    optimizer, schedule = optimizer_and_schedule(own, config, lambda: steps)
    device, loss_of = next(own.parameters()).device, functools.partial(micro_batch_loss, config)
    rates, losses, norms, clipped, over_half, picked, traces = [], [], [], [], [], [], []
    for batch, _ in zip(data.shard_batches(0, 1), range(steps)):
        optimizer.zero_grad(set_to_none=True)
        _, loss = backward(own, batch, loss_of, device=device)  # the training loop's own step
        before = {name: p.detach().clone() for name, p in own.named_parameters()}
        rate = optimizer.param_groups[0]["lr"]
        norm = float(update(own, optimizer, config.grad_clip, schedule=schedule))
        if not picked:  # from the first step's clipped gradients, which the optimizer's step leaves
            picked = pick_weights(own, config.adam_eps)
            traces = [_empty(name, index) for name, index in picked]
        rates.append(rate)
        losses.append(float(loss.detach()))
        norms.append(norm)
        clipped.append(min(1.0, config.grad_clip / (norm + 1e-6)))
        over_half.append(_over_half(own, before, rate))
        for trace in traces:
            _record(trace, own, optimizer, before[trace.name], rate)
    return OverTime(optimizer=OPTIMIZER_NAMES.get(type(optimizer).__name__, type(optimizer).__name__),
                    peak_lr=config.lr, betas=tuple(optimizer.param_groups[0]["betas"]), eps=config.adam_eps,
                    momentum=MOMENTUM, warmup=warmup, batch_size=batch_size, rates=rates, losses=losses,
                    grad_norms=norms, clipped=clipped, over_half=over_half, traces=traces)


def _check(steps: object, batch_size: object) -> None:
    for value, name, high in ((steps, "steps", LESSON_RUN_STEPS),
                              (batch_size, "examples in a batch", LESSON_RUN_BATCH)):
        whole_number(value, f"the number of {name}", 1, high)
    if steps * batch_size > LESSON_RUN_EXAMPLES:
        raise ValueError(f"{steps} steps of {batch_size} examples are {steps * batch_size}: a run here reads at most "
                         f"{LESSON_RUN_EXAMPLES} examples in all (fewer steps, or a smaller batch)")


def _empty(name: str, index: tuple[int, ...]) -> Trace:
    return Trace(name=name, index=index, gradient=[], m=[], v=[], m_hat=[], v_hat=[], move=[], sgd=[], momentum=[],
                 sgd_momentum=[])


def _record(trace: Trace, model: nn.Module, optimizer: torch.optim.Optimizer, before: Tensor, rate: float) -> None:
    """One step of one weight: the optimizer's own state after it, and SGD's moves with the same gradient."""
    p = model.get_parameter(trace.name)
    state = optimizer.state[p]
    beta1, beta2 = optimizer.param_groups[0]["betas"]
    t = float(state["step"])
    g, m, v = float(p.grad[trace.index]), float(state["exp_avg"][trace.index]), float(state["exp_avg_sq"][trace.index])
    buffer = MOMENTUM * trace.momentum[-1] + g if trace.momentum else g
    trace.gradient.append(g)
    trace.m.append(m)
    trace.v.append(v)
    trace.m_hat.append(m / (1 - beta1 ** t))
    trace.v_hat.append(v / (1 - beta2 ** t))
    trace.move.append(float(p.detach()[trace.index] - before[trace.index]))
    trace.sgd.append(-rate * g)
    trace.momentum.append(buffer)
    trace.sgd_momentum.append(-rate * buffer)


def _over_half(model: nn.Module, before: dict[str, Tensor], rate: float) -> float:
    moved = sum(int(torch.count_nonzero((p.detach() - before[name]).abs() > rate / 2))
                for name, p in model.named_parameters())
    return moved / sum(p.numel() for p in model.parameters())
