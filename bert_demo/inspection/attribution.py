"""Which words drove a decision: integrated gradients over the input word embeddings (Sundararajan et al. 2017,
"Axiomatic Attribution for Deep Networks").

The model's output F (a class's probability, or the probability of a word at a [MASK]) is followed along the
straight path from a baseline input x' to the real input x, where every word's embedding is replaced by the [PAD]
embedding ([CLS], [SEP] and [MASK] keep theirs, so the baseline is the same sentence frame with nothing said). A
word's attribution is (x - x') times the path's average gradient, summed over the embedding's dimensions. The
attributions add up to F(x) - F(x') ("completeness"); `Attribution.gap` is how far this Riemann sum of `steps`
midpoints is from that, the check that `steps` was enough.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.inference import encode_pair, masked_batch
from bert_demo.model import BertForPreTraining, BertForSequenceClassification

STEPS = 64  # midpoints of the path: completeness within 1% on the shipped model (tests/inspection/test_attribution.py)
CHUNK = 16  # path points per forward pass: bounds memory on long inputs and large models
MAX_STEPS = 512
# The most work one attribution may ask: tokens x steps x layers x hidden size^2, here the shipped mini's 4 layers of
# 256 at 128 tokens and the default 64 steps (about 3 s on 2 CPU cores). 505 tokens of it held both cores for 25 s,
# and two such requests kept every other visitor's attribution waiting behind them.
MAX_WORK = 128 * STEPS * 4 * 256**2


@dataclass(kw_only=True)
class Attribution:
    """Each token with its attribution, and the numbers that check them."""

    tokens: list[str]
    scores: list[float]  # one per token; they sum to about output - baseline
    target: str  # what F is the probability of: a class, or a word at the first [MASK]
    output: float  # F(x)
    baseline: float  # F(x')

    @property
    def gap(self) -> float:
        """|sum of attributions - (F(x) - F(x'))| as a share of |F(x) - F(x')| (completeness: 0 in the limit)."""
        change = self.output - self.baseline
        return abs(sum(self.scores) - change) / max(abs(change), 1e-12)


def classification(model: BertForSequenceClassification, tokenizer: BertTokenizerFast, text_a: str,
                   text_b: str | None = None, label: str | None = None, steps: int = STEPS) -> Attribution:
    """Which words made a fine-tuned classifier give `label` (default: the class it predicts) its probability."""
    if not isinstance(model, BertForSequenceClassification):
        raise ValueError("this model has no classifier: fine-tune it on a task first")
    text_b = text_b if isinstance(text_b, str) and text_b.strip() else None
    batch = encode_pair(model, tokenizer, text_a, text_b)
    labels = model.config.labels
    if label is not None and label not in labels:
        raise ValueError(f"unknown class {label!r}: this model has {', '.join(labels)}")

    def probabilities(net: torch.nn.Module, ids: dict[str, Tensor]) -> Tensor:
        return net(**ids).logits.float().softmax(-1)  # (n, C)

    if label is None:
        with torch.no_grad():
            label = labels[int(probabilities(model, batch)[0].argmax())]
    index = labels.index(label)
    return _integrate(model, tokenizer, batch, lambda net, ids: probabilities(net, ids)[:, index], label, steps)


def masked_word(model: BertForPreTraining, tokenizer: BertTokenizerFast, text: str, word: str | None = None,
                steps: int = STEPS) -> Attribution:
    """Which words made the model put `word` (default: its top guess) at the first [MASK] of `text`."""
    batch, masked = masked_batch(model, tokenizer, text)
    first = torch.zeros_like(masked)
    first[0, int(masked[0].nonzero()[0])] = True  # the first [MASK] only

    def probabilities(net: torch.nn.Module, ids: dict[str, Tensor]) -> Tensor:
        rows = first.expand(len(ids["input_ids"]), -1)
        return net(**ids, mlm_positions=rows).mlm_logits.float().softmax(-1)  # (n, V)

    if word is None:
        with torch.no_grad():
            token = int(probabilities(model, batch)[0].argmax())
    else:
        ids = tokenizer.convert_tokens_to_ids([word.strip().lower()])
        token = ids[0] if ids and ids[0] != tokenizer.unk_token_id else None
        if token is None:
            raise ValueError(f"{word!r} is not one token of this model's vocabulary: choose one of its guesses")
    return _integrate(model, tokenizer, batch, lambda net, ids: probabilities(net, ids)[:, token],
                      tokenizer.convert_ids_to_tokens(token), steps)


def _integrate(model: torch.nn.Module, tokenizer: BertTokenizerFast, batch: dict[str, Tensor], output,
               target: str, steps: int) -> Attribution:
    """Integrated gradients of `output(model, batch) -> (n,)` along the path from the [PAD]-word baseline to the
    input. The path replaces the word embeddings through a hook, on a copy of the model: the app answers other visitors
    with the same model object at the same time, and a hook on it would feed them this path instead of their words.
    So `output` is handed the model to call."""
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"steps must be a whole number between 1 and {MAX_STEPS}, got {steps!r}")
    _check_work(model, batch["input_ids"].shape[1], steps)
    model = copy.deepcopy(model).eval().requires_grad_(False)  # gradients flow to the path alone
    ids = batch["input_ids"]
    table = model.bert.embeddings.word_embeddings
    frame = torch.isin(ids, torch.tensor(tokenizer.all_special_ids, device=ids.device))  # [CLS], [SEP], [MASK]...
    with torch.no_grad():
        real = table(ids)[0]  # (T, H)
        base = torch.where(frame[0, :, None], real, table.weight[tokenizer.pad_token_id])
    alphas = (torch.arange(steps, dtype=real.dtype, device=real.device) + 0.5) / steps  # midpoints
    total = torch.zeros_like(real)
    for chunk in alphas.split(CHUNK):
        path = (base + chunk[:, None, None] * (real - base)).requires_grad_(True)  # (n, T, H)
        handle = table.register_forward_hook(lambda module, inputs, result, path=path: path)
        try:
            repeated = {name: tensor.expand(len(chunk), -1) for name, tensor in batch.items()}
            (gradient,) = torch.autograd.grad(output(model, repeated).sum(), path)
        finally:
            handle.remove()
        total += gradient.sum(0)
    with torch.no_grad():
        handle = table.register_forward_hook(lambda module, inputs, result: base[None])
        try:
            at_baseline = float(output(model, batch)[0])
        finally:
            handle.remove()
        at_input = float(output(model, batch)[0])
    scores = ((real - base) * total / steps).sum(-1)  # (T,)
    return Attribution(tokens=tokenizer.convert_ids_to_tokens(ids[0].tolist()), scores=scores.tolist(), target=target,
                       output=at_input, baseline=at_baseline)


def _check_work(model: torch.nn.Module, tokens: int, steps: int) -> None:
    """Refuse an input whose attribution would cost more than MAX_WORK: the model runs forward and back `steps`
    times over every token, so its cost grows with the text, the steps and the model's size."""
    config = model.config
    per_token = steps * config.num_hidden_layers * config.hidden_size ** 2
    if tokens * per_token > MAX_WORK:
        raise ValueError(f"integrated gradients run this model forward and back {steps} times: give at most "
                         f"{MAX_WORK // per_token} tokens, not {tokens}")
