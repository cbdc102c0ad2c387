"""Every layer at once, from one forward pass (`forward_steps.Pass`): one token's path up through the depth, and one
step of the forward pass in every layer and head side by side.

A token's path: after the embeddings and after each layer, the size of its vector, the words the masked-LM head would
guess from it there (the logit lens: nostalgebraist 2020; Tenney et al. 2019 find BERT's layers ordered roughly as a
classical pipeline), and how widely its attention spreads (the exponential of its attention row's entropy, averaged
over the heads: 1 when a token reads one token only, T when it reads all T alike).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.inspection.forward_steps import ENCODER_PARTS, Pass, Spec
from bert_demo.model import BertForPreTraining

PATH_GUESSES = 3  # the logit lens's guesses shown at each depth


@dataclass(frozen=True, kw_only=True)
class Depth:
    """One token after the embeddings (layer 0) or after layer `layer`."""

    layer: int
    size: float  # the L2 norm of its vector
    guesses: list[tuple[str, float]]  # the masked-LM head's top guesses from that vector, with probabilities
    spread: float | None  # how many tokens its attention reads, in effect (None at the embeddings)
    most: tuple[str, float] | None  # the token its heads attend to most on average, and that weight


def token_path(model: BertForPreTraining, tokenizer: BertTokenizerFast, p: Pass, position: int) -> list[Depth]:
    """The token at `position` after the embeddings and after every layer of the pass `p` (which keeps them all)."""
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(p.tokens):
        raise ValueError(f"the token followed is a position from 0 to {len(p.tokens) - 1}, got {str(position)[:40]}")
    layers = p.probs.shape[1]
    names = ["bert.embeddings.LayerNorm"] + [f"bert.encoder.layer.{i}.output.LayerNorm" for i in range(layers)]
    vectors = torch.stack([p.out(name)[position] for name in names])  # (L + 1, H)
    device = next(model.parameters()).device
    with torch.inference_mode():
        probs = model.cls.predictions(vectors.to(device)).float().softmax(-1).cpu()  # (L + 1, V): a head, no state
    top = probs.topk(PATH_GUESSES, dim=-1)
    rows = p.probs[0, :, :, position].float()  # (L, A, T): each layer's heads' attention from this token
    entropy = -(rows * rows.clamp_min(1e-12).log()).sum(-1)  # (L, A)
    mean = rows.mean(1)  # (L, T)
    path = []
    for depth in range(layers + 1):
        guesses = list(zip(tokenizer.convert_ids_to_tokens(top.indices[depth].tolist()), top.values[depth].tolist()))
        spread = most = None
        if depth:
            spread = float(entropy[depth - 1].exp().mean())
            weight, index = mean[depth - 1].max(-1)
            most = (p.tokens[int(index)], float(weight))
        path.append(Depth(layer=depth, size=float(vectors[depth].norm()), guesses=guesses, spread=spread, most=most))
    return path


def every_layer(spec: Spec, p: Pass) -> list[tuple[Tensor, str]]:
    """One encoder step in every layer (and every head, for a head's step), with its caption ("L2 H3"), read from
    the pass `p` (a forward pass that keeps every layer, or its gradient); nothing for a step outside the encoder."""
    if spec.part not in ENCODER_PARTS:
        return []
    layers = p.probs.shape[1]
    heads = range(p.heads) if spec.per_head else [None]
    return [(spec.values(replace(p, layer=layer, head=head or 0)),
             f"L{layer + 1}" + ("" if head is None else f" H{head + 1}"))
            for layer in range(layers) for head in heads]
