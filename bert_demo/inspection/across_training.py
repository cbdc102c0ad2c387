"""One pre-training example across a run's training: its loss, and the rank each picked position's label has among
the model's guesses, at every snapshot of the run's timeline (`training.timeline`: steps 0, 10, 30, 100, ...) and at
its final weights where the run's last step is known and past its last snapshot; and, on a fixed batch, the size of
the gradient at every depth of the model at each snapshot (does it vanish or explode from the heads down to the
embeddings, and does that change as the run trains?). The weights are read into a private copy of the model, one
snapshot after another: the model the app answers with is never touched.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bert_demo.model import BertForPreTraining, in_eval_mode
from bert_demo.training import timeline
from bert_demo.training.pretraining import micro_batch_loss
from bert_demo.training.settings import TrainConfig


@dataclass(frozen=True, kw_only=True)
class Moment:
    """The example under the weights of one training step."""

    step: int
    loss: float  # mlm_loss + nsp_weight * nsp_loss
    mlm_loss: float
    nsp_loss: float
    ranks: list[int]  # each picked position's label among the model's guesses there: 1 is its top guess


def across(model: BertForPreTraining, folder: str | Path, example: Any, nsp_weight: float = 1.0,
           final_step: int | None = None) -> list[Moment]:
    """The example (`pretraining_example.PretrainingExample`) under every snapshot the run in `folder` kept, in order
    of their steps, then under `model` itself, its final weights, where `final_step` (the run's last step) is past the
    last snapshot: unknown, a moment would have no step to be shown at, and at the last snapshot it would be that
    snapshot again. Nothing where the run kept no snapshot."""
    steps = timeline.steps(folder)
    if not steps:
        return []
    own = copy.deepcopy(model).eval()  # its weights are replaced: never the shared ones
    device = next(own.parameters()).device
    batch = {name: tensor.to(device) for name, tensor in example.batch.items() if name != "mlm_fates"}
    moments = []
    for step in steps:
        timeline.load_into(own, folder, step)
        moments.append(_moment(own, batch, step, nsp_weight))
    last = final_step if final_step is not None and final_step > steps[-1] else None
    if last is not None:
        moments.append(_moment(model, batch, last, nsp_weight))
    return moments


@torch.inference_mode()
def _moment(model: BertForPreTraining, batch: dict[str, torch.Tensor], step: int, nsp_weight: float) -> Moment:
    out = in_eval_mode(model)(**batch)
    logits = out.mlm_logits.float()  # (N, V) at the picked positions
    label_scores = logits.gather(1, out.mlm_targets[:, None])  # (N, 1)
    ranks = (logits > label_scores).sum(-1) + 1  # (N,): how many guesses score above the label, plus one
    nsp_loss = F.cross_entropy(out.nsp_logits.float(), batch["nsp_labels"].view(-1))
    return Moment(step=step, loss=float(out.mlm_loss + nsp_weight * nsp_loss), mlm_loss=float(out.mlm_loss),
                  nsp_loss=float(nsp_loss), ranks=ranks.tolist())


@dataclass(frozen=True, kw_only=True)
class Depth:
    """The gradient of a batch's loss through the depth under the weights of one step: at each layer's output (the
    hidden states, from the embeddings' output up to the last layer's) and in each layer's weights."""

    step: int
    loss: float
    at_outputs: list[float]  # |∂loss/∂h| at the embeddings' output, then at each layer's, bottom up
    in_weights: list[float]  # the norm of each encoder layer's weight gradient, bottom up


def depth_across(model: BertForPreTraining, folder: str | Path, batch: dict[str, torch.Tensor], recipe: TrainConfig,
                 final_step: int | None = None) -> list[Depth]:
    """The gradient through the depth on `batch` (the trainer's loss, no dropout) under every snapshot the run in
    `folder` kept, then under `model`'s own weights (at `final_step` where it is past the last snapshot)."""
    steps = timeline.steps(folder)
    if not steps:
        return []
    own = copy.deepcopy(model).eval()
    depths = []
    for step in steps:
        timeline.load_into(own, folder, step)
        depths.append(_depth(own, batch, recipe, step))
    if final_step is not None and final_step > steps[-1]:
        own.load_state_dict(model.state_dict())
        depths.append(_depth(own, batch, recipe, final_step))
    return depths


def _depth(model: BertForPreTraining, batch: dict[str, torch.Tensor], recipe: TrainConfig, step: int) -> Depth:
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    out = model(**{name: t.to(device) for name, t in batch.items()}, output_hidden_states=True)
    for hidden in out.hidden_states:
        hidden.retain_grad()
    loss, _ = micro_batch_loss(replace(recipe, grad_accum=1), out, batch, batch)
    loss.backward()
    layers = model.bert.encoder.layer
    return Depth(step=step, loss=float(loss.detach()),
                 at_outputs=[float(hidden.grad.norm()) for hidden in out.hidden_states],
                 in_weights=[float(torch.stack([p.grad.norm() for p in layer.parameters()]).norm())
                             for layer in layers])
