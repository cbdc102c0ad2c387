"""One training step, written once for the training loop (`loop.train`) and the Step by step tab's step on one
example (`inspection.training_step.take`): the forward and backward passes over a batch's micro-batches (gradient
accumulation), then clipping and the optimizer's step, as nanoGPT's train.py writes them inline.

They are two functions so that a caller can read the gradient between them as autograd left it, before clipping
(the tab shows it): `backward` leaves the batch's gradient in every parameter's `.grad`, `update` clips it and steps.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from bert_demo.training.runtime import Batch, autocast, to_device

Metrics = dict[str, tuple[Tensor | float, Tensor | float]]  # name: (sum, count), averaged as sum / count per record
Loss = Callable[[Any, Batch, Batch], tuple[Tensor, Metrics]]  # (output, CPU micro-batch, CPU batch): loss, metrics


def backward(forward: Callable[..., Any], batch: Batch, loss: Loss, *, device: torch.device, micro_batches: int = 1,
             precision: str = "fp32", extras: Callable[[Batch], dict[str, Any]] = lambda part: {},
             keep: Callable[[Metrics, int], None] = lambda metrics, tokens: None) -> tuple[Any, Tensor]:
    """The forward and backward passes over the CPU `batch` cut into `micro_batches`, each micro-batch's `loss` (its
    share of the batch's) summed into the parameters' `.grad` by `loss.backward()`; each one's metrics and real (not
    padding) tokens handed to `keep`. Returns the last micro-batch's output and loss.

    Only the forward pass runs under autocast (`precision`), as PyTorch advises; backward runs outside it, inside
    DDP's `no_sync` for every micro-batch but the last, so that the gradients are averaged across processes once.
    `extras` and the loss read what they need from the CPU copy of a micro-batch, so that no step waits on the GPU."""
    parts = split_batch(batch, micro_batches)
    for index, part in enumerate(parts):
        tokens = int(part["attention_mask"].sum())
        on_device = to_device(part, device)
        with _no_sync(forward, last=index == len(parts) - 1):
            with autocast(device, precision):
                out = forward(**on_device, **extras(part))
            part_loss, metrics = loss(out, part, batch)
            part_loss.backward()
        keep(metrics, tokens)
    return out, part_loss


def update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float, *,
           schedule: torch.optim.lr_scheduler.LRScheduler | None = None,
           lock: AbstractContextManager | None = None, guard: Callable[[Tensor], bool] = lambda norm: True
           ) -> Tensor:
    """Clip the gradient `backward` left to a norm of `grad_clip` (BERT's released code clips at 1.0), then,
    holding `lock` while the weights change, the optimizer's step where `guard` (handed the norm) allows it, and the
    schedule's. Returns the norm before clipping."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    with lock or nullcontext():
        if guard(grad_norm):
            optimizer.step()
        if schedule is not None:
            schedule.step()
    return grad_norm


def _no_sync(forward: Callable[..., Any], last: bool) -> AbstractContextManager:
    """DDP's `no_sync` for a micro-batch but the last, where `forward` is DistributedDataParallel (alone, or inside
    torch.compile); else nothing."""
    distributed = isinstance(getattr(forward, "_orig_mod", forward), DistributedDataParallel)
    return forward.no_sync() if distributed and not last else nullcontext()


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Cut a batch into `parts` equal micro-batches along the batch dimension (gradient accumulation)."""
    if parts == 1:
        return [batch]
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]
