"""What BERT computes between the input and its guesses, one step at a time, with the model's own numbers.

`capture` runs the model once, in eval mode on the explicit attention path, and keeps what its modules received and
returned (forward hooks; the attention scores through the `Tap` that `model.BertSelfAttention` passes them through).
`forward_steps` lays those values out as the paper's steps (Devlin et al. 2019, §3 and Figure 2; Vaswani et al.
2017, §3.2-3.3): the three embeddings and their sum, LayerNorm; in one layer and head, Q, K and V, the scaled
scores, the padding mask, the softmax, the weighted sum of V; every head joined, the output projection, the
residual and LayerNorm; the feed-forward network, its residual and LayerNorm; then the two pre-training heads. Each
step has its equation, its shape, its values and the line of `bert_demo/model.py` that computes it. Nothing here
computes a step a second time.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor, nn
from transformers import BertTokenizerFast

from bert_demo import model as model_module
from bert_demo.inference import _evaluating, encode_input
from bert_demo.model import BertForPreTraining

TOP_GUESSES = 10  # guesses shown at each position by the decoder and softmax steps
PARTS = ("Embeddings", "Attention", "Feed-forward", "Masked-LM head", "Next-sentence head")

# what a module returned ("name>"), its first input ("name<") and its second ("name<1"), float32 on the CPU
Captured = dict[str, Tensor]


@dataclass(frozen=True)
class Step:
    """One step of the forward pass: what it computes, and its values for the input."""

    part: str  # one of PARTS
    title: str
    equation: str  # LaTeX
    about: str  # what the step does and why, in a sentence or two
    values: Tensor  # (rows, columns), float32 on the CPU
    rows: list[str]  # a label for each row: the tokens, or the positions a head reads
    columns: str | list[str]  # what the columns are: a name ("dimension"), or a label each
    code: str  # a fragment of one line of model.py (`source_line` finds it)
    cells: list[list[str]] | None = None  # a label for each value, where each row's columns differ (the guesses)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


def capture(model: BertForPreTraining, batch: dict[str, Tensor]) -> tuple[Captured, Tensor]:
    """Run the model once on a batch of one (eval mode, attention probabilities asked for, so the explicit path
    computes them) and keep every module's output and first input; with the [B, L, A, T, T] stack of attention
    probabilities."""
    kept: Captured = {}

    def keep(name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            for index, value in enumerate(inputs[:2]):  # what a module reads, and a mask it is handed
                if isinstance(value, Tensor):
                    kept[f"{name}<{index or ''}"] = value.detach().float().cpu()
            if isinstance(output, Tensor):
                kept[f"{name}>"] = output.detach().float().cpu()
        return hook

    handles = [module.register_forward_hook(keep(name)) for name, module in model.named_modules() if name]
    try:
        with _evaluating(model):
            out = model(**batch, attention_mask=torch.ones_like(batch["input_ids"]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return kept, torch.stack(out.attentions, dim=1).float().cpu()


def forward_steps(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None,
                  layer: int = 1, head: int = 1) -> list[Step]:
    """Every step of the forward pass for a sentence (or a pair), the encoder's inside shown for layer `layer` and
    head `head` (both from 1); the masked-LM head's guesses at each [MASK], or at every token where there is none."""
    config = model.config
    for name, value, top in (("layer", layer, config.num_hidden_layers), ("head", head, config.num_attention_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ValueError(f"{name} must be a whole number from 1 to {top}, got {str(value)[:40]}")
    batch = encode_input(model, tokenizer, text_a, text_b)
    ids = batch["input_ids"][0].tolist()
    tokens = tokenizer.convert_ids_to_tokens(ids)
    rows = [f"{i} {token}" for i, token in enumerate(tokens)]
    kept, probs = capture(model, batch)
    masks = [i for i, id_ in enumerate(ids) if id_ == tokenizer.mask_token_id]
    return [*_embedding_steps(kept, rows, batch["token_type_ids"][0]),
            *_attention_steps(kept, probs, rows, layer, head, config.num_attention_heads),
            *_feed_forward_steps(kept, rows, layer),
            *_masked_lm_steps(kept, rows, masks, tokenizer),
            *_next_sentence_steps(kept)]


def _embedding_steps(kept: Captured, rows: list[str], segments: Tensor) -> list[Step]:
    e = "bert.embeddings"
    return [
        Step("Embeddings", "Word rows", r"E_{\text{word}}[x_t]",
             "Each word piece's id picks its row of the word-embedding table (V rows, one a piece).",
             kept[f"{e}.word_embeddings>"][0], rows, "dimension", "x = self.word_embeddings(input_ids) +"),
        Step("Embeddings", "Position rows", r"E_{\text{pos}}[t]",
             "Position t picks row t of a learned position table: without it, attention would not know the order.",
             kept[f"{e}.position_embeddings>"], rows, "dimension", "x = x + self.position_embeddings(positions)"),
        Step("Embeddings", "Segment rows", r"E_{\text{seg}}[s_t]",
             "Segment A ([CLS] A [SEP]) picks row 0 of the segment table, segment B (B [SEP]) row 1: "
             f"here {int((segments == 0).sum())} tokens of A and {int((segments == 1).sum())} of B.",
             kept[f"{e}.token_type_embeddings>"][0], rows, "dimension", "self.token_type_embeddings(token_type_ids)"),
        Step("Embeddings", "Their sum", r"e_t = E_{\text{word}}[x_t] + E_{\text{pos}}[t] + E_{\text{seg}}[s_t]",
             "The three rows are added: one vector a token, holding what it is, where it is and which sentence "
             "it is in.", kept[f"{e}.LayerNorm<"][0], rows, "dimension", "x = x + self.position_embeddings(positions)"),
        Step("Embeddings", "LayerNorm", r"h^0_t = \gamma \odot \frac{e_t - \mu_t}{\sigma_t} + \beta",
             "Each token's vector is normalised to mean 0 and variance 1, then scaled and shifted by learned "
             "weights: the input of layer 1.", kept[f"{e}.LayerNorm>"][0], rows, "dimension",
             "return self.dropout(self.LayerNorm(x))"),
    ]


def _attention_steps(kept: Captured, probs: Tensor, rows: list[str], layer: int, head: int, heads: int
                     ) -> list[Step]:
    n = f"bert.encoder.layer.{layer - 1}.attention"
    width = kept[f"{n}.self.query>"][0].shape[-1] // heads
    own = slice((head - 1) * width, head * width)  # head h's columns of Q, K, V and of the joined heads
    where = f"layer {layer}, head {head}"
    qkv = 'for proj in (self.query, self.key, self.value)'
    scores = kept[f"{n}.self.attention_scores>"][0][head - 1]  # (T, T)
    return [
        Step("Attention", f"Queries Q ({where})", r"Q = h^{l-1} W_Q + b_Q",
             f"A linear map of the layer's input; head {head} keeps its own {width} columns. A token's query says "
             "what it looks for.", kept[f"{n}.self.query>"][0][:, own], rows, "dimension", qkv),
        Step("Attention", f"Keys K ({where})", r"K = h^{l-1} W_K + b_K",
             "A token's key says what it offers: a query matches the keys that point its way.",
             kept[f"{n}.self.key>"][0][:, own], rows, "dimension", qkv),
        Step("Attention", f"Values V ({where})", r"V = h^{l-1} W_V + b_V",
             "A token's value is what it hands on to the tokens that attend to it.",
             kept[f"{n}.self.value>"][0][:, own], rows, "dimension", qkv),
        Step("Attention", f"Scores ({where})", rf"S = \frac{{Q K^\top}}{{\sqrt{{d}}}},\; d = {width}",
             "Every query against every key (rows: the token asking, columns: the token asked), divided by the "
             "square root of the head's width so that the softmax stays soft.", scores, rows, rows,
             "scores = self.attention_scores("),
        Step("Attention", "Padding mask", r"S_{ij} \leftarrow -\infty \text{ where key } j \text{ is [PAD]}",
             "In a batch, shorter inputs are padded to the longest: their [PAD] keys get minus infinity, so no "
             "token attends to them. One input has no padding: every key is allowed (1).",
             kept[f"{n}.self<1"][0].reshape(1, -1), ["may be attended"], rows,
             "scores = scores.masked_fill(~key_mask"),
        Step("Attention", f"Softmax ({where})", r"A = \operatorname{softmax}_j(S_{ij})",
             "Each row of scores becomes weights that sum to 1: how much each token attends to every other.",
             probs[0, layer - 1, head - 1], rows, rows, "probs = scores.softmax(dim=-1)"),
        Step("Attention", f"Weighted sum of V ({where})", r"Z_h = A V",
             "Each token's output is the average of the values, weighted by its attention row.",
             kept[f"{n}.output.dense<"][0][:, own], rows, "dimension", "context = self.dropout(probs) @ v"),
        Step("Attention", "Every head joined", r"Z = [Z_1; Z_2; \dots; Z_A]",
             f"The {heads} heads' outputs side by side: head {head}'s are columns {own.start}-{own.stop - 1}.",
             kept[f"{n}.output.dense<"][0], rows, "dimension", 'return rearrange(context, "b a t d -> b t (a d)")'),
        Step("Attention", "Output projection", r"Z W_O + b_O",
             "One linear map mixes the heads' outputs back into the hidden size.",
             kept[f"{n}.output.dense>"][0], rows, "dimension",
             "return self.LayerNorm(residual + self.dropout(self.dense(h)))"),
        Step("Attention", "Residual", r"h^{l-1} + Z W_O + b_O",
             "The sub-layer's input is added back (a residual connection): attention adds to what a token was.",
             kept[f"{n}.output.LayerNorm<"][0], rows, "dimension",
             "return self.LayerNorm(residual + self.dropout(self.dense(h)))"),
        Step("Attention", "LayerNorm (post-LN)", r"a^l = \operatorname{LN}(h^{l-1} + Z W_O + b_O)",
             "Normalised after the residual, as in the paper (post-LN): the feed-forward network's input.",
             kept[f"{n}.output.LayerNorm>"][0], rows, "dimension",
             "return self.LayerNorm(residual + self.dropout(self.dense(h)))"),
    ]


def _feed_forward_steps(kept: Captured, rows: list[str], layer: int) -> list[Step]:
    n = f"bert.encoder.layer.{layer - 1}"
    return [
        Step("Feed-forward", "First linear map", r"u = a^l W_1 + b_1",
             "Each token alone (no mixing between tokens here) is mapped to a wider vector, four times the hidden "
             "size.", kept[f"{n}.intermediate.dense>"][0], rows, "dimension", "return F.gelu(self.dense(x))"),
        Step("Feed-forward", "GELU", r"\operatorname{GELU}(u) = u\,\Phi(u)",
             "Each number is kept in proportion to how likely a standard normal falls below it: negatives shrink "
             "towards 0.", kept[f"{n}.intermediate>"][0], rows, "dimension", "return F.gelu(self.dense(x))"),
        Step("Feed-forward", "Second linear map", r"\operatorname{GELU}(u) W_2 + b_2",
             "Back down to the hidden size.", kept[f"{n}.output.dense>"][0], rows, "dimension",
             "return self.LayerNorm(residual + self.dropout(self.dense(h)))"),
        Step("Feed-forward", "Residual", r"a^l + \operatorname{FFN}(a^l)",
             "The sub-layer's input is added back.", kept[f"{n}.output.LayerNorm<"][0], rows, "dimension",
             "return self.LayerNorm(residual + self.dropout(self.dense(h)))"),
        Step("Feed-forward", f"LayerNorm: layer {layer}'s output",
             r"h^l = \operatorname{LN}(a^l + \operatorname{FFN}(a^l))",
             "The layer's output, the next layer's input; the last layer's feeds the two heads.",
             kept[f"{n}.output.LayerNorm>"][0], rows, "dimension",
             "return self.output(self.intermediate(x), x), probs"),
    ]


def _masked_lm_steps(kept: Captured, rows: list[str], masks: list[int], tokenizer: BertTokenizerFast
                     ) -> list[Step]:
    """The head's transform at every token, then its scores and guesses at each [MASK] (every token, where there is
    none)."""
    p = "cls.predictions"
    where = "each [MASK]" if masks else "each token"
    masks = masks or list(range(len(rows)))
    at = [rows[i] for i in masks]
    logits = kept[f"{p}>"][0][masks]  # (M, V)
    top_logits, top_ids = logits.topk(min(TOP_GUESSES, logits.shape[-1]), dim=-1)  # (M, k)
    top_probs = logits.softmax(-1).gather(1, top_ids)
    ranks = [f"guess {i + 1}" for i in range(top_ids.shape[-1])]
    pieces = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in top_ids]
    return [
        Step("Masked-LM head", "Transform: dense", r"t = h^L W_T + b_T",
             "The last layer's output, mapped once more before it is compared with the vocabulary.",
             kept[f"{p}.transform.dense>"][0], rows, "dimension", "return self.LayerNorm(F.gelu(self.dense(x)))"),
        Step("Masked-LM head", "Transform: GELU", r"\operatorname{GELU}(t)", "The same GELU as the feed-forward's.",
             kept[f"{p}.transform.LayerNorm<"][0], rows, "dimension", "return self.LayerNorm(F.gelu(self.dense(x)))"),
        Step("Masked-LM head", "Transform: LayerNorm", r"g = \operatorname{LN}(\operatorname{GELU}(t))",
             "Normalised, ready to be scored against every word piece.", kept[f"{p}.transform.LayerNorm>"][0], rows,
             "dimension", "return self.LayerNorm(F.gelu(self.dense(x)))"),
        Step("Masked-LM head", "Decoder, tied to the word embeddings", r"z = g\, E_{\text{word}}^\top + b",
             "A score for every word piece of the vocabulary: the dot product with its own word-embedding row (the "
             f"decoder shares the input's table), plus a bias a piece. Shown: the {len(ranks)} highest at {where}.",
             top_logits, at, ranks, "return F.linear(self.transform(x), self.decoder.weight, self.bias)", pieces),
        Step("Masked-LM head", "Softmax: the guesses", r"p = \operatorname{softmax}(z)",
             f"The scores become probabilities over the vocabulary; the highest is the guess at {where}.",
             top_probs, at, ranks, "return F.linear(self.transform(x), self.decoder.weight, self.bias)", pieces),
    ]


def _next_sentence_steps(kept: Captured) -> list[Step]:
    logits = kept["cls.seq_relationship>"][0][None]  # (1, 2)
    labels = ["B follows A", "B is random"]
    cls = ["[CLS]"]
    return [
        Step("Next-sentence head", "The [CLS] vector", r"h^L_{[\mathrm{CLS}]}",
             "Only the first token's final vector is read: [CLS] has attended to both sentences in every layer.",
             kept["bert.pooler.dense<"][0][None], cls, "dimension", "return torch.tanh(self.dense(hidden[:, 0]))"),
        Step("Next-sentence head", "Pooler: dense", r"W_P h^L_{[\mathrm{CLS}]} + b_P", "A linear map of it.",
             kept["bert.pooler.dense>"][0][None], cls, "dimension", "return torch.tanh(self.dense(hidden[:, 0]))"),
        Step("Next-sentence head", "Pooler: tanh", r"c = \tanh(W_P h^L_{[\mathrm{CLS}]} + b_P)",
             "Squashed into (-1, 1): the pooled summary of the pair.", kept["bert.pooler>"][0][None], cls,
             "dimension", "return torch.tanh(self.dense(hidden[:, 0]))"),
        Step("Next-sentence head", "Classifier", r"y = c\, W_{\text{NSP}} + b_{\text{NSP}}",
             "Two scores: B follows A, or B is a random sentence.", logits, cls, labels,
             "nsp_logits=self.cls.seq_relationship(self.bert.pooler(sequence_output))"),
        Step("Next-sentence head", "Softmax", r"P(\text{IsNext}) = \operatorname{softmax}(y)_0",
             "The two scores as probabilities.", logits.softmax(-1), cls, labels,
             "nsp_logits=self.cls.seq_relationship(self.bert.pooler(sequence_output))"),
    ]


@cache
def _model_source() -> tuple[str, ...]:
    return tuple(inspect.getsource(model_module).splitlines())


def source_line(fragment: str) -> tuple[int, str]:
    """The line of bert_demo/model.py that holds `fragment` (the first, where several do), numbered from 1."""
    lines = _model_source()
    for number, line in enumerate(lines, start=1):
        if fragment in line:
            return number, line.strip()
    raise ValueError(f"model.py has no line with {fragment!r}")
