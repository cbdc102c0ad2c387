"""Independent computations that the tests of what the screen shows compare with: Hugging Face's BertForPreTraining
with the same weights for the model's values and gradients, and torch's own AdamW stepped on the same loss for the
optimizer. Nothing here calls the code under test's training step or views."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import transformers

from bert_demo.model import BertForPreTraining


def transformers_model(ours: BertForPreTraining) -> transformers.BertForPreTraining:
    """transformers' BERT with our model's weights (eager attention, so that its attention probabilities are kept)."""
    theirs = transformers.BertForPreTraining(
        transformers.BertConfig(**ours.config.to_hf_dict(), attn_implementation="eager")).eval()
    theirs.load_state_dict(ours.state_dict(), strict=False)
    theirs.cls.predictions.decoder.bias = theirs.cls.predictions.bias
    return theirs


def example_batch(example: Any) -> dict[str, torch.Tensor]:
    """A drawn example's batch of one, as the model reads it."""
    return {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}


def transformers_loss(theirs: transformers.BertForPreTraining, batch: dict[str, torch.Tensor], nsp_weight: float,
                      **asked: Any) -> tuple[torch.Tensor, Any]:
    """The loss pre-training minimises (masked-LM + nsp_weight x NSP) in transformers' model, and its output."""
    out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=torch.ones_like(batch["input_ids"]), **asked)
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), batch["mlm_labels"].flatten())
    return mlm + nsp_weight * F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"]), out


@dataclass
class ByHand:
    """torch's AdamW stepped on transformers' model: its weights before and after each step, the loss before and
    after each step, the first step's gradients before and after clipping, and the model and optimizer at the end."""

    weights: list[dict[str, torch.Tensor]]
    losses: list[float]
    raw: dict[str, torch.Tensor]
    read: dict[str, torch.Tensor]
    model: transformers.BertForPreTraining
    optimizer: torch.optim.AdamW


def adamw_by_hand(ours: BertForPreTraining, batch: dict[str, torch.Tensor], recipe: Any, steps: int) -> ByHand:
    """torch's AdamW stepped `steps` times on transformers' loss for the batch (clipped as the recipe clips, the
    matrices decayed and nothing else), in eval mode."""
    theirs = transformers_model(copy.deepcopy(ours))
    params = dict(theirs.named_parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params.values() if p.dim() >= 2],
                                    "weight_decay": recipe.weight_decay},
                                   {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=recipe.lr, betas=(0.9, recipe.beta2), eps=recipe.adam_eps)
    weights, losses, raw, read = [{name: p.detach().clone() for name, p in params.items()}], [], {}, {}
    for step in range(steps):
        optimizer.zero_grad()
        loss, _ = transformers_loss(theirs, batch, recipe.nsp_weight)
        loss.backward()
        losses.append(float(loss))
        if step == 0:
            raw = {name: p.grad.detach().clone() for name, p in params.items()}
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), recipe.grad_clip)
        if step == 0:
            read = {name: p.grad.detach().clone() for name, p in params.items()}
        optimizer.step()
        weights.append({name: p.detach().clone() for name, p in params.items()})
    with torch.no_grad():
        losses.append(float(transformers_loss(theirs, batch, recipe.nsp_weight)[0]))
    return ByHand(weights, losses, raw, read, theirs, optimizer)


def random_weights(config: Any) -> BertForPreTraining:
    """Our model of `config` with every weight random, LayerNorms and biases too (about 1 for a LayerNorm's gain, 0
    for the rest, 0.1 apart), so that no gradient is zero by symmetry; the same weights every call, eval mode."""
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1 + name.endswith("LayerNorm.weight"))
    return model
