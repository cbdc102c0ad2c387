"""What a trained BERT can be asked: fill in [MASK]s, judge a sentence pair, show its attention.

These are the backend functions that the app, the CLI and the tests all call. Bad input raises ValueError with a
message meant for a person; nothing is silently truncated.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.model import BertForPreTraining

MAX_MASKS = 20
MAX_TOP_K = 50
MAX_TEXT_CHARS = 5000
_MASK_PATTERN = re.compile(r"\[\s*mask\s*\]", re.IGNORECASE)


def fill_mask(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, top_k: int = 5
) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, left to right, the `top_k` most likely tokens with their probabilities."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {top_k!r}")
    batch = _encode(model, tokenizer, _read(text, "the text", tokenizer))
    masked = batch["input_ids"][0] == tokenizer.mask_token_id  # (T,)
    n_masks = int(masked.sum())
    if n_masks == 0:
        raise ValueError("the text has no [MASK]: write [MASK] where the model should guess a word")
    if n_masks > MAX_MASKS:
        raise ValueError(f"the text has {n_masks} [MASK] tokens; at most {MAX_MASKS} are allowed")
    with _evaluating(model):
        logits = model(**batch, mlm_positions=masked[None]).mlm_logits  # (M, V): the vocabulary only at [MASK]s
    probs, ids = logits.float().softmax(dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)  # (M, k)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
        for row_ids, row_probs in zip(ids, probs)
    ]


def next_sentence(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str) -> float:
    """The model's probability that sentence B follows sentence A (BERT's NSP task, §3.1)."""
    batch = _encode(model, tokenizer, _read(text_a, "sentence A", tokenizer), _read(text_b, "sentence B", tokenizer))
    with _evaluating(model):
        logits = model(**batch).nsp_logits[0]  # (2,); index 0 = "is next"
    return float(logits.float().softmax(dim=-1)[0])


def attention(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None
) -> tuple[list[str], Tensor]:
    """Tokens and every head's attention probabilities, weights[layer, head, query, key]; rows sum to 1."""
    text_a = _read(text_a, "the sentence" if text_b is None else "sentence A", tokenizer)
    text_b = None if text_b is None else _read(text_b, "sentence B", tokenizer)
    batch = _encode(model, tokenizer, text_a, text_b)
    with _evaluating(model):  # the encoder alone: the pre-training heads play no part in attention
        _, attentions = model.bert(batch["input_ids"], batch["token_type_ids"], None, output_attentions=True)
    weights = torch.stack([a[0] for a in attentions]).float().cpu()  # (L, A, T, T)
    return tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()), weights


def _read(text: str, what: str, tokenizer: BertTokenizerFast) -> str:
    """A visitor's text, checked, with every way of writing [MASK] ("[mask]", "[ MASK ]") made the real token."""
    return _MASK_PATTERN.sub(tokenizer.mask_token, _check_text(text, what))


def _check_text(text: str, what: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{what} must be text, got {type(text).__name__}")
    text = text.replace("\x00", " ").strip()
    if not text:
        raise ValueError(f"{what} is empty: type a sentence")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"{what} has {len(text)} characters; at most {MAX_TEXT_CHARS} are allowed")
    return text


def _encode(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None
) -> dict[str, Tensor]:
    """[CLS] A [SEP] (B [SEP]) as a batch of one on the model's device; refuse input longer than the model takes.

    A batch of one has no padding, so no attention mask is passed: attention then runs unmasked (and faster).
    """
    encoded = tokenizer(text_a, text_b, return_tensors="pt", return_token_type_ids=True)
    limit = min(model.config.max_position_embeddings, tokenizer.model_max_length)
    length = encoded["input_ids"].shape[1]
    if length > limit:
        raise ValueError(f"the input is {length} tokens long; this model takes at most {limit}: shorten it")
    device = next(model.parameters()).device
    return {
        "input_ids": encoded["input_ids"].to(device),
        "token_type_ids": encoded["token_type_ids"].to(device),
    }


@contextmanager
def _evaluating(model: BertForPreTraining) -> Iterator[None]:
    """Run without dropout or autograd, then give the model back in the mode it came in."""
    was_training = model.training
    if was_training:  # switching modes walks every module: skip it for a model already in eval mode (the app's)
        model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        if was_training:
            model.train()


# --- Looking inside: attention rollout and display helpers (used by the app's Attention and Fill-mask tabs) ---


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


def fill_in_masks(text: str, predictions: list[list[tuple[str, float]]]) -> list[tuple[str, str | None]]:
    """`text` cut into (piece, label) spans with each [MASK] replaced by its best guess, labelled with its
    probability (e.g. ("capital", "61%")); plain text has label None. WordPiece continuations ("##s") are shown
    as written. `predictions` is `fill_mask`'s output for the same text."""
    pieces = _MASK_PATTERN.split(text.replace("\x00", " "))  # as fill_mask reads it: NUL is a space there
    if len(pieces) - 1 != len(predictions):
        raise ValueError(f"the text has {len(pieces) - 1} [MASK] but {len(predictions)} predictions were given")
    spans: list[tuple[str, str | None]] = []
    for i, piece in enumerate(pieces):
        if piece:
            spans.append((piece, None))
        if i < len(predictions):
            if predictions[i]:
                token, prob = predictions[i][0]
                spans.append((token, f"{prob:.0%}"))
            else:
                spans.append(("[MASK]", None))
    return spans
