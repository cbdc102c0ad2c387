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
    text = _MASK_PATTERN.sub(tokenizer.mask_token, _check_text(text, "the text"))
    batch = _encode(model, tokenizer, text)
    masked = batch["input_ids"][0] == tokenizer.mask_token_id  # (T,)
    n_masks = int(masked.sum())
    if n_masks == 0:
        raise ValueError("the text has no [MASK]: write [MASK] where the model should guess a word")
    if n_masks > MAX_MASKS:
        raise ValueError(f"the text has {n_masks} [MASK] tokens; at most {MAX_MASKS} are allowed")
    with _evaluating(model):
        logits = model(**batch).mlm_logits[0, masked]  # (M, V)
    probs, ids = logits.float().softmax(dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)  # (M, k)
    return [
        list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
        for row_ids, row_probs in zip(ids, probs)
    ]


def next_sentence(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str) -> float:
    """The model's probability that sentence B follows sentence A (BERT's NSP task, §3.1)."""
    batch = _encode(model, tokenizer, _check_text(text_a, "sentence A"), _check_text(text_b, "sentence B"))
    with _evaluating(model):
        logits = model(**batch).nsp_logits[0]  # (2,); index 0 = "is next"
    return float(logits.float().softmax(dim=-1)[0])


def attention(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None
) -> tuple[list[str], Tensor]:
    """Tokens and every head's attention probabilities, weights[layer, head, query, key]; rows sum to 1."""
    text_a = _check_text(text_a, "the sentence" if text_b is None else "sentence A")
    text_b = None if text_b is None else _check_text(text_b, "sentence B")
    batch = _encode(model, tokenizer, text_a, text_b)
    with _evaluating(model):
        attentions = model(**batch, output_attentions=True).attentions  # L x (1, A, T, T)
    weights = torch.stack([a[0] for a in attentions]).float().cpu()  # (L, A, T, T)
    return tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()), weights


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
    """[CLS] A [SEP] (B [SEP]) as a batch of one on the model's device; refuse input longer than the model takes."""
    encoded = tokenizer(text_a, text_b, return_tensors="pt", return_token_type_ids=True, return_attention_mask=True)
    limit = min(model.config.max_position_embeddings, tokenizer.model_max_length)
    length = encoded["input_ids"].shape[1]
    if length > limit:
        raise ValueError(f"the input is {length} tokens long; this model takes at most {limit}: shorten it")
    device = next(model.parameters()).device
    return {
        "input_ids": encoded["input_ids"].to(device),
        "token_type_ids": encoded["token_type_ids"].to(device),
        "attention_mask": encoded["attention_mask"].to(device),
    }


@contextmanager
def _evaluating(model: BertForPreTraining) -> Iterator[None]:
    """Run without dropout or autograd, then give the model back in the mode it came in."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)
