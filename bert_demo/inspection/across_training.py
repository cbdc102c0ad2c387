"""One pre-training example across a run's training: its loss, and the rank each picked position's label has among
the model's guesses, at every snapshot of the run's timeline (`training.timeline`: steps 0, 10, 30, 100, ...) and at
its final weights. The weights are read into a private copy of the model, one snapshot after another: the model the
app answers with is never touched.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bert_demo.model import BertForPreTraining, in_eval_mode
from bert_demo.training import timeline


@dataclass(frozen=True)
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
    of their steps, then under `model` itself, its final weights (at `final_step`, where known; else after the last
    snapshot). Nothing where the run kept no snapshot."""
    steps = timeline.steps(folder)
    if not steps:
        return []
    own = copy.deepcopy(model).eval()  # its weights are replaced: never the shared ones
    device = next(own.parameters()).device
    batch = {name: tensor.to(device) for name, tensor in example.batch.items() if name != "mlm_fates"}
    moments = []
    for step in steps:
        own.load_state_dict(timeline.load(folder, step), strict=False)
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
    return Moment(step, float(out.mlm_loss + nsp_weight * nsp_loss), float(out.mlm_loss), float(nsp_loss),
                  ranks.tolist())
