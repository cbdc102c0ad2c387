"""Looking inside the attention heads: how much each head matters to an answer (switched off one at a time), how one
head weighs the tokens for one query (its queries and keys), and attention rollout through the layers; with the
helper that leaves [CLS] and [SEP] out of a map. Each runs the model through `inference`'s checks and encoding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.inference import (
    check_layer_head,
    check_text,
    encode_input,
    encode_pair,
    evaluating,
    masked_batch,
    next_sentence,
    no_token,
    read_text,
)
from bert_demo.model import BertForPreTraining

IMPORTANCE_CHUNK = 48  # heads switched off per forward pass in head_importance: bounds its memory on `base`
MAX_IMPORTANCE_WORK = 16 * 512  # tokens x heads per head-importance request: mini at full length, base at 56 tokens


def head_importance(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None
) -> tuple[list[str], Tensor]:
    """How much switching off each head, one at a time, lowers what the model believes (Michel et al. 2019).

    Without `text_b`: for each [MASK], the drop in probability of the model's top guess; with `text_b`: the drop
    in the probability that B follows A. Returns (what was measured, drops[target, layer, head]); a negative drop
    means the head was working against that answer.
    """
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    _check_importance_work(model, tokenizer, text_a, text_b, layers * heads)
    one_off = 1 - torch.eye(layers * heads).view(layers * heads, layers, heads)  # (L*A, L, A): each head off once
    if text_b is None:
        batch, masked = masked_batch(model, tokenizer, text_a)
        with evaluating(model) as model:
            probs = model(**batch, mlm_positions=masked).mlm_logits.float().softmax(-1)  # (M, V)
        before, best = probs.max(dim=-1)  # (M,): the top guess and its probability
        labels = [f"[MASK] {i + 1}: {token}" for i, token in enumerate(tokenizer.convert_ids_to_tokens(best.tolist()))]
    else:
        batch, masked = encode_pair(model, tokenizer, read_text(text_a, "sentence A", tokenizer),
                                read_text(text_b, "sentence B", tokenizer)), None
        before, labels = torch.tensor([next_sentence(model, tokenizer, text_a, text_b)]), ["B follows A"]
    after = []
    with evaluating(model) as model:
        for masks in one_off.to(batch["input_ids"].device).split(IMPORTANCE_CHUNK):
            repeated = {name: ids.expand(len(masks), -1) for name, ids in batch.items()}
            if masked is None:  # the pair's probability of "B follows A"; the MLM head scores no token
                out = model(**repeated, mlm_positions=no_token(repeated), head_mask=masks)
                after.append(out.nsp_logits.float().softmax(-1)[:, :1].cpu())
            else:
                out = model(**repeated, mlm_positions=masked.expand(len(masks), -1), head_mask=masks)
                chosen = out.mlm_logits.float().softmax(-1).view(len(masks), -1, out.mlm_logits.shape[-1])
                after.append(chosen.gather(-1, best.view(1, -1, 1).expand(len(masks), -1, 1))[..., 0].cpu())
    drops = before.cpu().float() - torch.cat(after)  # (L*A, targets)
    return labels, drops.T.reshape(len(labels), layers, heads)


def _check_importance_work(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str,
                           text_b: str | None, passes: int) -> None:
    """Refuse an input whose head importance would cost more than MAX_IMPORTANCE_WORK token-passes: the model runs
    once per head, and `base`'s 144 heads over 512 tokens would hold the CPU for a minute."""
    tokens = len(tokenizer(check_text(text_a, "the text"), check_text(text_b, "sentence B") if text_b else None)
                 ["input_ids"])
    if tokens * passes > MAX_IMPORTANCE_WORK:
        raise ValueError(f"head importance runs the model once per head ({passes} here): give at most "
                         f"{MAX_IMPORTANCE_WORK // passes} tokens, not {tokens}")


@dataclass(frozen=True, kw_only=True)
class QueryKey:
    """How one head weighs the tokens for one query token (what bertviz's neuron view shows)."""

    tokens: list[str]
    query: Tensor  # (D,): the query vector of the token asking
    keys: Tensor  # (T, D): the key vector of every token
    scores: Tensor  # (T,): query · key / sqrt(D)
    weights: Tensor  # (T,): softmax of the scores, the head's attention row for this token


def query_key(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None,
              layer: int, head: int, position: int) -> QueryKey:
    """The query vector of the token at `position`, every token's key vector, and how their products make the
    head's weights (Vaswani et al. 2017, §3.2.1): head `head` of layer `layer`, both from 1. The weights are that
    row of `attention`'s weights."""
    config = model.config
    check_layer_head(config, layer, head)
    batch = encode_input(model, tokenizer, text_a, text_b)
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < len(tokens):
        raise ValueError(f"the query token must be one of the {len(tokens)} tokens, numbered from 0")
    size = config.hidden_size // config.num_attention_heads
    dims = slice((head - 1) * size, head * size)
    with evaluating(model) as model:
        hidden, _ = model.bert(batch["input_ids"], batch["token_type_ids"], None, False)
        heads = model.bert.encoder.layer[layer - 1].attention.self
        x = hidden[layer - 1][0]  # (T, H): what the layer reads
        query, keys = heads.query(x)[position, dims].float().cpu(), heads.key(x)[:, dims].float().cpu()  # (D,), (T, D)
    scores = keys @ query / math.sqrt(size)
    return QueryKey(tokens=tokens, query=query, keys=keys, scores=scores, weights=scores.softmax(dim=-1))


def attention_rollout(weights: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", §3).

    `weights[layer, head, query, key]` as returned by `attention`. Each layer's heads are averaged, the residual
    connection is accounted for by adding the identity (0.5 W + 0.5 I, rows still sum to 1), and the layers are
    multiplied through: rollout[l] = Â[l] @ Â[l-1] @ ... @ Â[0]. Returns rollout[layer, query, key] for every
    depth (the last entry is the whole network); each row sums to 1.
    """
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected attention weights shaped [layers, heads, T, T], got {tuple(weights.shape)}")
    mixed = weights.float().mean(dim=1)  # (L, T, T): average over heads
    eye = torch.eye(mixed.shape[-1], dtype=mixed.dtype, device=mixed.device)  # (T, T)
    mixed = mixed + eye  # the residual stream carries each token's own state forward
    mixed = mixed / mixed.sum(dim=-1, keepdim=True)  # renormalise rows
    rollout = [mixed[0]]
    for layer in mixed[1:]:
        rollout.append(layer @ rollout[-1])  # (T, T)
    return torch.stack(rollout)  # (L, T, T)


def drop_tokens(tokens: list[str], weights: Tensor, hide: tuple[str, ...] = ("[CLS]", "[SEP]"),
                renormalise: bool = True) -> tuple[list[str], Tensor]:
    """Remove the `hide` tokens from both axes of attention maps `weights[..., query, key]`.

    [CLS] and [SEP] often absorb most of the attention and wash out the rest of a heatmap. With `renormalise`, each
    remaining row is rescaled to sum to 1: the share of attention among the tokens that are left. Raises
    ValueError when nothing would be left.
    """
    keep = [i for i, token in enumerate(tokens) if token not in hide]
    if not keep:
        raise ValueError("the input has no tokens other than " + " and ".join(hide))
    index = torch.tensor(keep, device=weights.device)
    kept = weights.index_select(-1, index).index_select(-2, index)  # (..., T', T')
    if renormalise:
        kept = kept / kept.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return [tokens[i] for i in keep], kept
