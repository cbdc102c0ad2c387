"""What a trained BERT can be asked: fill in [MASK]s, judge a sentence pair, show its attention, and look inside:
guesses at every layer, heads switched off and their importance, and words projected from the embedding space
(`neighbours` holds what lies near a word).

These are the backend functions that the app, the CLI and the tests all call. Bad input raises ValueError with a
message meant for a person; nothing is silently truncated.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.config import MASK_PATTERN, BertConfig
from bert_demo.model import M, BertForPreTraining, BertForSequenceClassification, in_eval_mode

HeadMask = Tensor | list[list[float]] | None

MAX_MASKS = 20
MAX_TOP_K = 50
MAX_TEXT_CHARS = 5000
MAX_PROJECTED = 60  # words in one embedding projection: more is unreadable as a scatter plot
ECHO_CHARS = 40  # the most of a visitor's input a message repeats: a message says what is wrong, not the input
SHOWN_PIECES = 8  # and the most of its WordPiece pieces
IMPORTANCE_CHUNK = 48  # heads switched off per forward pass in head_importance: bounds its memory on `base`
MAX_IMPORTANCE_WORK = 16 * 512  # tokens x heads per head-importance request: mini at full length, base at 56 tokens


def fill_mask(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, top_k: int = 5, head_mask: HeadMask = None
) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, left to right, the `top_k` most likely tokens with their probabilities.

    `head_mask` [layers, heads] of 1 (keep) and 0 (switch off) runs the model with those heads silenced.
    """
    check_top_k(top_k)
    batch, masked = _masked_batch(model, tokenizer, text)
    with evaluating(model) as model:
        logits = model(**batch, mlm_positions=masked, head_mask=_head_mask(model, head_mask)).mlm_logits  # (M, V)
    return _ranked(logits, tokenizer, top_k)


def layer_predictions(
    model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, top_k: int = 5, head_mask: HeadMask = None
) -> list[list[list[tuple[str, float]]]]:
    """The logit lens: for each [MASK], left to right, a list over layers 1..L of the `top_k` guesses that the
    model's own MLM head makes from that layer's hidden state. The last layer's entry is `fill_mask`'s answer."""
    check_top_k(top_k)
    batch, masked = _masked_batch(model, tokenizer, text)
    with evaluating(model) as model:
        hidden, _ = model.bert(batch["input_ids"], batch["token_type_ids"], None, False, _head_mask(model, head_mask))
        rows = torch.stack([h[masked] for h in hidden[1:]])  # (L, M, H): every layer's state at every [MASK]
        ranked = _ranked(model.cls.predictions(rows.flatten(0, 1)), tokenizer, top_k)  # one head call, L*M rows
    layers, masks = rows.shape[:2]
    return [[ranked[layer * masks + i] for layer in range(layers)] for i in range(masks)]


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
        batch, masked = _masked_batch(model, tokenizer, text_a)
        with evaluating(model) as model:
            probs = model(**batch, mlm_positions=masked).mlm_logits.float().softmax(-1)  # (M, V)
        before, best = probs.max(dim=-1)  # (M,): the top guess and its probability
        labels = [f"[MASK] {i + 1}: {token}" for i, token in enumerate(tokenizer.convert_ids_to_tokens(best.tolist()))]
    else:
        batch, masked = _encode(model, tokenizer, _read(text_a, "sentence A", tokenizer),
                                _read(text_b, "sentence B", tokenizer)), None
        before, labels = torch.tensor([next_sentence(model, tokenizer, text_a, text_b)]), ["B follows A"]
    after = []
    with evaluating(model) as model:
        for masks in one_off.to(batch["input_ids"].device).split(IMPORTANCE_CHUNK):
            repeated = {name: ids.expand(len(masks), -1) for name, ids in batch.items()}
            if masked is None:  # the pair's probability of "B follows A"; the MLM head scores no token
                out = model(**repeated, mlm_positions=_no_token(repeated), head_mask=masks)
                after.append(out.nsp_logits.float().softmax(-1)[:, :1].cpu())
            else:
                out = model(**repeated, mlm_positions=masked.expand(len(masks), -1), head_mask=masks)
                chosen = out.mlm_logits.float().softmax(-1).view(len(masks), -1, out.mlm_logits.shape[-1])
                after.append(chosen.gather(-1, best.view(1, -1, 1).expand(len(masks), -1, 1))[..., 0].cpu())
    drops = before.cpu().float() - torch.cat(after)  # (L*A, targets)
    return labels, drops.T.reshape(len(labels), layers, heads)


def next_sentence(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str,
                  head_mask: HeadMask = None) -> float:
    """The model's probability that sentence B follows sentence A (BERT's NSP task, §3.1)."""
    batch = _encode(model, tokenizer, _read(text_a, "sentence A", tokenizer), _read(text_b, "sentence B", tokenizer))
    with evaluating(model) as model:
        logits = model(**batch, mlm_positions=_no_token(batch), head_mask=_head_mask(model, head_mask)).nsp_logits[0]
    return float(logits.float().softmax(dim=-1)[0])  # logits (2,): index 0 is "B follows A"


def classify(model: BertForSequenceClassification, tokenizer: BertTokenizerFast, text_a: str,
             text_b: str | None = None) -> list[tuple[str, float]]:
    """Each class of a fine-tuned classifier with its probability for a sentence (or a pair), in class order."""
    if not isinstance(model, BertForSequenceClassification):
        raise ValueError("this model has no classifier: fine-tune it on a task first")
    text_b = None if text_b is None or not str(text_b).strip() else _check_text(text_b, "sentence B")
    batch = _encode(model, tokenizer, _check_text(text_a, "the sentence" if text_b is None else "sentence A"), text_b)
    with evaluating(model) as model:
        probabilities = model(**batch).logits[0].float().softmax(-1).tolist()
    return list(zip(model.config.labels, probabilities))


def _no_token(batch: dict[str, Tensor]) -> Tensor:
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


class QueryKey(NamedTuple):
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
    return QueryKey(tokens, query, keys, scores, scores.softmax(dim=-1))


def segments(tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None) -> list[str]:
    """Which sentence each token of `attention`'s input belongs to, as BERT's segment ids say: "A" for [CLS] A
    [SEP], "B" for B [SEP]. A "[SEP]" typed inside sentence A is a [SEP] token, but the model still sees it in A."""
    text_a = _read(text_a, "the sentence" if text_b is None else "sentence A", tokenizer)
    text_b = None if text_b is None else _read(text_b, "sentence B", tokenizer)
    ids = tokenizer(text_a, text_b, return_token_type_ids=True)["token_type_ids"]
    return ["A" if segment == 0 else "B" for segment in ids]


def embedding_projection(model: BertForPreTraining, tokenizer: BertTokenizerFast, words: list[str]
                         ) -> list[tuple[str, float, float]]:
    """Each word with its input embedding projected onto the words' first two principal components (PCA)."""
    if not isinstance(words, list) or not 3 <= len(words) <= MAX_PROJECTED:
        count = len(words) if isinstance(words, list) else words
        raise ValueError(f"give from 3 to {MAX_PROJECTED} words to project, got {echo(count)}")
    ids = [_single_token(tokenizer, word) for word in words]
    with torch.inference_mode():
        vectors = model.bert.embeddings.word_embeddings.weight[ids].float().cpu()  # (W, H)
        centred = vectors - vectors.mean(dim=0)
        _, _, components = torch.linalg.svd(centred, full_matrices=False)  # rows: principal directions
        axes = components[:2]
        axes = axes * axes.gather(1, axes.abs().argmax(1, keepdim=True)).sign()  # fixed signs: the same plot each time
        xy = centred @ axes.T  # (W, 2)
    return [(word, float(x), float(y)) for word, (x, y) in zip(words, xy.tolist())]


def echo(value: object) -> str:
    """A visitor's input as a message repeats it: quoted, and cut short."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS - 1]}…"


def _single_token(tokenizer: BertTokenizerFast, word: str) -> int:
    """The vocabulary id of a word that is one WordPiece token; otherwise a message that shows how it splits."""
    word = _check_text(word, "the word")
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1 or pieces[0] == tokenizer.unk_token:
        shown = ", ".join(pieces[:SHOWN_PIECES]) + (", ..." if len(pieces) > SHOWN_PIECES else "") or "nothing"
        raise ValueError(f"{echo(word)} is not one token in this model's vocabulary (it becomes {shown}): "
                         "pick a word the vocabulary holds whole")
    return tokenizer.convert_tokens_to_ids(pieces[0])


def _check_importance_work(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str,
                           text_b: str | None, passes: int) -> None:
    """Refuse an input whose head importance would cost more than MAX_IMPORTANCE_WORK token-passes: the model runs
    once per head, and `base`'s 144 heads over 512 tokens would hold the CPU for a minute."""
    tokens = len(tokenizer(_check_text(text_a, "the text"), _check_text(text_b, "sentence B") if text_b else None)
                 ["input_ids"])
    if tokens * passes > MAX_IMPORTANCE_WORK:
        raise ValueError(f"head importance runs the model once per head ({passes} here): give at most "
                         f"{MAX_IMPORTANCE_WORK // passes} tokens, not {tokens}")


def check_layer_head(config: BertConfig, layer: int, head: int) -> None:
    """A layer and a head (both from 1) the model has, else a ValueError that gives their range."""
    for name, value, top in (("layer", layer, config.num_hidden_layers), ("head", head, config.num_attention_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ValueError(f"{name} must be a whole number from 1 to {top}, got {echo(value)}")


def check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, got {echo(top_k)}")


def _masked_batch(model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str
                  ) -> tuple[dict[str, Tensor], Tensor]:
    """The encoded text and where its [MASK]s are, bool [1, T]; refuses text without one or with too many."""
    batch = _encode(model, tokenizer, _read(text, "the text", tokenizer))
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


def _read(text: str, what: str, tokenizer: BertTokenizerFast) -> str:
    """A visitor's text, checked, with every way of writing [MASK] ("[mask]", "[ MASK ]") made the real token."""
    return MASK_PATTERN.sub(tokenizer.mask_token, _check_text(text, what))


def _check_text(text: str, what: str) -> str:
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
    text_a = _read(text_a, "the sentence" if text_b is None else "sentence A", tokenizer)
    return _encode(model, tokenizer, text_a, None if text_b is None else _read(text_b, "sentence B", tokenizer))


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
def evaluating(model: M) -> Iterator[M]:
    """The model to run without dropout or autograd: `model` itself where it is in eval mode, else a private view of
    it in eval mode (`model.in_eval_mode`). The model handed in is never switched: another thread may be running it."""
    with torch.inference_mode():
        yield in_eval_mode(model)


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
