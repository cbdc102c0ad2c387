"""What a trained BERT can be asked: fill in [MASK]s (and its guesses at every layer), judge a sentence pair, classify
it, show its attention; and the checks and encoding every question shares. Looking further inside is
`bert_demo.inspection`'s: heads switched off, a head's queries and keys, rollout (`inspection.heads`), and the
embedding space (`inspection.neighbours`).

These are the backend functions that the app, the CLI and the tests all call. Bad input raises ValueError with a
message meant for a person; nothing is silently truncated.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.config import IS_NEXT, MASK_PATTERN, BertConfig, echo, whole_number
from bert_demo.model import (
    BertForPreTraining,
    BertForSequenceClassification,
    M,
    in_eval_mode,
)

HeadMask = Tensor | list[list[float]] | None

MAX_MASKS = 20
MAX_TOP_K = 50
MAX_TEXT_CHARS = 5000
SHOWN_PIECES = 8  # and the most of its WordPiece pieces


def fill_mask(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, top_k: int = 5, head_mask: HeadMask = None
) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, left to right, the `top_k` most likely tokens with their probabilities.

    `head_mask` [layers, heads] of 1 (keep) and 0 (switch off) runs the model with those heads silenced.
    """
    check_top_k(top_k)
    batch, masked = masked_batch(model, tokenizer, text)
    with evaluating(model) as model:
        logits = model(**batch, mlm_positions=masked, head_mask=_head_mask(model, head_mask)).mlm_logits  # (M, V)
    return _ranked(logits, tokenizer, top_k)


def layer_predictions(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, top_k: int = 5, head_mask: HeadMask = None
) -> list[list[list[tuple[str, float]]]]:
    """The logit lens: for each [MASK], left to right, a list over layers 1..L of the `top_k` guesses that the
    model's own MLM head makes from that layer's hidden state. The last layer's entry is `fill_mask`'s answer."""
    check_top_k(top_k)
    batch, masked = masked_batch(model, tokenizer, text)
    with evaluating(model) as model:
        hidden, _ = model.bert(batch["input_ids"], batch["token_type_ids"], None, False, _head_mask(model, head_mask))
        rows = torch.stack([h[masked] for h in hidden[1:]])  # (L, M, H): every layer's state at every [MASK]
        ranked = _ranked(model.cls.predictions(rows.flatten(0, 1)), tokenizer, top_k)  # one head call, L*M rows
    layers, masks = rows.shape[:2]
    return [[ranked[layer * masks + i] for layer in range(layers)] for i in range(masks)]


def next_sentence(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str,
                  head_mask: HeadMask = None) -> float:
    """The model's probability that sentence B follows sentence A (BERT's NSP task, §3.1)."""
    batch = encode_pair(model, tokenizer, read_text(text_a, "sentence A", tokenizer),
                        read_text(text_b, "sentence B", tokenizer))
    with evaluating(model) as model:
        logits = model(**batch, mlm_positions=no_token(batch), head_mask=_head_mask(model, head_mask)).nsp_logits[0]
    return float(logits.float().softmax(dim=-1)[IS_NEXT])  # logits (2,), by class


def classify(model: BertForSequenceClassification, tokenizer: BertTokenizerFast, text_a: str,
             text_b: str | None = None) -> list[tuple[str, float]]:
    """Each class of a fine-tuned classifier with its probability for a sentence (or a pair), in class order."""
    if not isinstance(model, BertForSequenceClassification):
        raise ValueError("this model has no classifier: fine-tune it on a task first")
    text_b = None if text_b is None or not str(text_b).strip() else check_text(text_b, "sentence B")
    batch = encode_pair(model, tokenizer, check_text(text_a, "the sentence" if text_b is None else "sentence A"),
                        text_b)
    with evaluating(model) as model:
        probabilities = model(**batch).logits[0].float().softmax(-1).tolist()
    return list(zip(model.config.labels, probabilities))


def no_token(batch: dict[str, Tensor]) -> Tensor:
    """MLM positions that select no token: for NSP alone, the MLM head then scores nothing over the vocabulary."""
    return torch.zeros_like(batch["input_ids"], dtype=torch.bool)


def attention(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None,
    head_mask: HeadMask = None,
) -> tuple[list[str], Tensor]:
    """Tokens and every head's attention probabilities, weights[layer, head, query, key]; rows sum to 1, except
    for a head switched off by `head_mask`, whose rows are 0."""
    batch, heads = encode_input(model, tokenizer, text_a, text_b), _head_mask(model, head_mask)
    with evaluating(model) as model:  # the encoder alone: the pre-training heads play no part in attention
        _, attentions = model.bert(batch["input_ids"], batch["token_type_ids"], None, True, heads)
    weights = torch.stack([a[0] for a in attentions]).float().cpu()  # (L, A, T, T)
    return tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()), weights


def segments(tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None) -> list[str]:
    """Which sentence each token of `attention`'s input belongs to, as BERT's segment ids say: "A" for [CLS] A
    [SEP], "B" for B [SEP]. A "[SEP]" typed inside sentence A is a [SEP] token, but the model still sees it in A."""
    text_a = read_text(text_a, "the sentence" if text_b is None else "sentence A", tokenizer)
    text_b = None if text_b is None else read_text(text_b, "sentence B", tokenizer)
    ids = tokenizer(text_a, text_b, return_token_type_ids=True)["token_type_ids"]
    return ["A" if segment == 0 else "B" for segment in ids]


def single_token(tokenizer: BertTokenizerFast, word: str) -> int:
    """The vocabulary id of a word that is one WordPiece token; otherwise a message that shows how it splits."""
    word = check_text(word, "the word")
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1 or pieces[0] == tokenizer.unk_token:
        shown = ", ".join(pieces[:SHOWN_PIECES]) + (", ..." if len(pieces) > SHOWN_PIECES else "") or "nothing"
        raise ValueError(f"{echo(word)} is not one token in this model's vocabulary (it becomes {shown}): "
                         "pick a word the vocabulary holds whole")
    return tokenizer.convert_tokens_to_ids(pieces[0])


def check_layer_head(config: BertConfig, layer: int, head: int) -> None:
    """A layer and a head (both from 1) the model has, else a ValueError that gives their range."""
    for name, value, top in (("layer", layer, config.num_hidden_layers), ("head", head, config.num_attention_heads)):
        whole_number(value, name, 1, top)


def check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {echo(top_k)}")


def masked_batch(model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str
                  ) -> tuple[dict[str, Tensor], Tensor]:
    """The encoded text and where its [MASK]s are, bool [1, T]; refuses text without one or with too many."""
    batch = encode_pair(model, tokenizer, read_text(text, "the text", tokenizer))
    masked = batch["input_ids"] == tokenizer.mask_token_id  # (1, T)
    n_masks = int(masked.sum())
    if n_masks == 0:
        raise ValueError("the text has no [MASK]: write [MASK] where the model should guess a word")
    if n_masks > MAX_MASKS:
        raise ValueError(f"the text has {n_masks} [MASK] tokens; at most {MAX_MASKS} are allowed")
    return batch, masked


def _ranked(logits: Tensor, tokenizer: BertTokenizerFast, top_k: int) -> list[list[tuple[str, float]]]:
    """Each row of logits [M, V] as its top_k (token, probability) pairs, most likely first."""
    probs, ids = logits.float().softmax(dim=-1).topk(min(top_k, logits.shape[-1]), dim=-1)  # (M, k)
    return [list(zip(tokenizer.convert_ids_to_tokens(row_ids.tolist()), row_probs.tolist()))
            for row_ids, row_probs in zip(ids, probs)]


def _head_mask(model: BertForPreTraining, head_mask: HeadMask) -> Tensor | None:
    """A visitor's head mask, checked: [layers, heads] of 0 and 1, as a float tensor on the model's device."""
    if head_mask is None:
        return None
    shape = (model.config.num_hidden_layers, model.config.num_attention_heads)
    try:
        mask = torch.as_tensor(head_mask, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"head_mask must be a {shape[0]} x {shape[1]} grid of 0 and 1") from None
    if tuple(mask.shape) != shape:
        raise ValueError(f"head_mask must be [layers, heads] = {list(shape)}, got {list(mask.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("head_mask may hold only 1 (keep a head) and 0 (switch it off)")
    return mask.to(next(model.parameters()).device)


def read_text(text: str, what: str, tokenizer: BertTokenizerFast) -> str:
    """A visitor's text, checked, with every way of writing [MASK] ("[mask]", "[ MASK ]") made the real token."""
    return MASK_PATTERN.sub(tokenizer.mask_token, check_text(text, what))


def check_text(text: str, what: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{what} must be text, got {type(text).__name__}")
    text = text.replace("\x00", " ").strip()
    if not text:
        raise ValueError(f"{what} is empty: type a sentence")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"{what} has {len(text)} characters; at most {MAX_TEXT_CHARS} are allowed")
    return text


def encode_input(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None
                 ) -> dict[str, Tensor]:
    """A visitor's sentence (or pair), checked, as the model reads it: [CLS] A [SEP] (B [SEP]), a batch of one on the
    model's device, any way of writing [MASK] made the real token."""
    text_a = read_text(text_a, "the sentence" if text_b is None else "sentence A", tokenizer)
    return encode_pair(model, tokenizer, text_a, None if text_b is None else read_text(text_b, "sentence B", tokenizer))


def encode_pair(
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
def evaluating(model: M) -> Iterator[M]:
    """The model to run without dropout or autograd: `model` itself where it is in eval mode, else a private view of
    it in eval mode (`model.in_eval_mode`). The model handed in is never switched: another thread may be running it."""
    with torch.inference_mode():
        yield in_eval_mode(model)


def fill_in_masks(text: str, predictions: list[list[tuple[str, float]]]) -> list[tuple[str, str | None]]:
    """`text` cut into (piece, label) spans with each [MASK] replaced by its best guess, labelled with its
    probability (e.g. ("capital", "61%")); plain text has label None. WordPiece continuations ("##s") are shown
    as written. `predictions` is `fill_mask`'s output for the same text."""
    pieces = MASK_PATTERN.split(text.replace("\x00", " "))  # as fill_mask reads it: NUL is a space there
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
