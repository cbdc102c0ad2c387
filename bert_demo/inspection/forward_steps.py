"""What BERT computes between the input and its guesses, one step at a time, with the model's own numbers.

`capture` runs the model once, in eval mode on the explicit attention path, and keeps what its modules received and
returned (forward hooks on a private view of the shared model, so that no other caller's pass is recorded; the
attention scores through the `Tap` that `model.BertSelfAttention` passes them through).
`forward_steps` lays those values out as the paper's steps (Devlin et al. 2019, §3 and Figure 2; Vaswani et al.
2017, §3.2-3.3): the three embeddings and their sum, LayerNorm; in one layer and head, Q, K and V, the scaled
scores, the padding mask, the softmax, the weighted sum of V; every head joined, the output projection, the
residual and LayerNorm; the feed-forward network, its residual and LayerNorm; then the two pre-training heads. Each
step has its equation, its shape, its values and the line of `bert_demo/model.py` that computes it. Nothing here
computes a step a second time.
"""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import NamedTuple

import torch
from torch import Tensor, nn
from transformers import BertTokenizerFast

from bert_demo import model as model_module
from bert_demo.data.masking import MARKED
from bert_demo.inference import check_layer_head, encode_input
from bert_demo.config import IS_NEXT, NOT_NEXT, NSP_CLASSES
from bert_demo.model import IGNORE_INDEX, BertForPreTraining, private_view

TOP_GUESSES = 10  # guesses shown at each position by the decoder and softmax steps
PARTS = ("Embeddings", "Attention", "Feed-forward", "Masked-LM head", "Next-sentence head")
ENCODER_PARTS = PARTS[1:3]  # the steps each layer repeats
NSP_LABELS = [f"{NSP_CLASSES[label]}: {meaning}"  # the NSP head's classes, in its order
              for label, meaning in sorted({IS_NEXT: "B follows A", NOT_NEXT: "B is random"}.items())]

OUT, IN, MASK = "output", "input", "mask"  # what of a module a hook keeps: what it returned, read, or was handed


class Site(NamedTuple):
    """Where a captured value was read: what module `module` returned (OUT), read (IN: its first input) or was
    handed as its second input (MASK: the attention's key mask)."""

    module: str
    port: str = OUT


Captured = dict[Site, Tensor]  # a pass's values by where they were read, float32 on the CPU
LAYER = re.compile(r"bert\.encoder\.layer\.\d+\.")
READ = frozenset({  # what the steps read of a pass (a layer's modules named "L."): a pass keeps these alone
    *(Site(module, OUT) for module in (
        "bert.embeddings.word_embeddings", "bert.embeddings.position_embeddings",
        "bert.embeddings.token_type_embeddings", "bert.embeddings.LayerNorm", "L.attention.self.query",
        "L.attention.self.key", "L.attention.self.value",
        "L.attention.self.attention_scores", "L.attention.output.dense", "L.attention.output.LayerNorm",
        "L.intermediate.dense", "L.intermediate", "L.output.dense", "L.output.LayerNorm",
        "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions",
        "bert.pooler.dense", "bert.pooler", "cls.seq_relationship")),
    *(Site(module, IN) for module in (
        "bert.embeddings.LayerNorm", "L.attention.output.dense", "L.attention.output.LayerNorm", "L.output.LayerNorm",
        "cls.predictions.transform.LayerNorm", "bert.pooler.dense")),
    Site("L.attention.self", MASK)})


def read(kept: Captured) -> Captured:
    """Of a pass's captured values, those its steps read: the rest (dropouts' copies, the modules that only pass
    their parts' values on) is more than half its bytes."""
    return {tap: value for tap, value in kept.items() if Site(LAYER.sub("L.", tap.module), tap.port) in READ}


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of the forward pass: what it computes, and its values for the input."""

    part: str  # one of PARTS
    title: str
    where: str  # the layer and head whose values these are ("layer 2, head 3"), or "" outside the encoder
    equation: str  # LaTeX
    about: str  # what the step does and why, in a sentence or two
    values: Tensor  # (rows, columns), float32 on the CPU
    rows: list[str]  # a label for each row: the tokens, or the positions a head reads
    columns: str | list[str]  # what the columns are: a name ("dimension"), or a label each
    code: str  # a fragment of one line of model.py (`source_line` finds it)
    cells: list[list[str]] | None = None  # a label for each value, where each row's columns differ (the guesses)
    probabilities: bool = False  # the values are probabilities (a softmax's), not scores or coordinates
    whole: tuple[int, ...] | None = None  # the shape of what the step computes, where only part of it is shown
    label_first: bool = False  # its first column is each picked position's label (the decoder's gradient)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


def capture(model: BertForPreTraining, batch: dict[str, Tensor], mlm_positions: Tensor | None = None
            ) -> tuple[Captured, Tensor]:
    """Run the model once on a batch of one (eval mode, attention probabilities asked for, so the explicit path
    computes them) and keep every module's output and first input, with the [B, L, A, T, T] stack of attention
    probabilities. The hooks are on a private view of the model (`model.private_view`): they see this pass only,
    whoever else runs the model meanwhile. `mlm_positions` (bool [1, T]) runs the masked-LM head at those positions
    only, as training does: its values are then [N, ...], a row a position."""
    kept: Captured = {}

    def keep(name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            for port, value in zip((IN, MASK), inputs[:2]):  # what a module reads, and a mask it is handed
                if isinstance(value, Tensor):
                    kept[Site(name, port)] = value.detach().float().cpu()
            if isinstance(output, Tensor):
                kept[Site(name, OUT)] = output.detach().float().cpu()
        return hook

    own = private_view(model).eval()  # hooks on the shared model would also record other callers' passes
    for name, module in own.named_modules():
        if name:
            module.register_forward_hook(keep(name))
    with torch.inference_mode():
        out = own(**batch, attention_mask=torch.ones_like(batch["input_ids"]), output_attentions=True,
                  mlm_positions=mlm_positions)
    return kept, torch.stack(out.attentions, dim=1).float().cpu()


@dataclass(frozen=True, kw_only=True)
class Pass:
    """One forward pass's values, as the steps read them: the layer and head shown (from 0), and where the masked-LM
    head's guesses are shown."""

    kept: Captured
    probs: Tensor  # (1, L, A, T, T)
    tokens: list[str]
    segments: list[int]
    layer: int
    head: int
    heads: int
    guessed: list[int]  # the positions of the [MASK]s, or every position where there is none
    guesses: list[list[str]]  # the top word pieces at each of them
    top_logits: Tensor  # (len(guessed), k)
    top_probs: Tensor  # (len(guessed), k): their probabilities over the whole vocabulary
    top_ids: Tensor  # (len(guessed), k): their ids
    vocab_size: int  # the decoder's width: a score for every word piece
    labels: list[str] | None = None  # a drawn example's: the label at each guessed (picked) position
    label_ids: list[int] | None = None  # and their ids
    fates: list[int] | None = None  # a drawn example's: what masking did at each position (a masking.Fate)
    label_first: bool = False  # the decoder's first column is each position's label, then the top guesses beside it

    @property
    def nbytes(self) -> int:
        """The memory its values hold: what a cache of passes counts."""
        return sum(value.nbytes for value in (*self.kept.values(), self.probs, self.top_logits, self.top_probs,
                                              self.top_ids))

    def out(self, name: str) -> Tensor:
        """What module `name` returned (the batch's one row)."""
        return self.kept[Site(name, OUT)][0]

    def into(self, name: str) -> Tensor:
        """What module `name` read."""
        return self.kept[Site(name, IN)][0]

    def at_guesses(self, name: str, reads: bool = False) -> Tensor:
        """What a module of the masked-LM head returned (or read), a row a guessed position: the head runs there
        only."""
        return self.kept[Site(name, IN if reads else OUT)]

    @property
    def guessed_rows(self) -> list[str]:
        return [self.rows[i] for i in self.guessed]

    @property
    def rows(self) -> list[str]:
        """A label a position: its index and the piece the model reads, and, at a picked position masking left as it
        was or gave a random word, which (what the model reads there is then the label itself, or not the label)."""
        fates = self.fates or [0] * len(self.tokens)
        return [f"{i} {token}" + MARKED.get(fate, "") for i, (token, fate) in enumerate(zip(self.tokens, fates))]

    @property
    def layer_name(self) -> str:
        return f"bert.encoder.layer.{self.layer}"

    @property
    def own(self) -> slice:
        """Head `head`'s columns of Q, K, V and of the joined heads."""
        width = self.out(f"{self.layer_name}.attention.self.query").shape[-1] // self.heads
        return slice(self.head * width, (self.head + 1) * width)

    @property
    def words(self) -> dict[str, object]:
        """What a step's `about` may name."""
        own = self.own
        return {"layer": self.layer + 1, "head": self.head + 1, "heads": self.heads, "width": own.stop - own.start,
                "first": own.start, "last": own.stop - 1, "a_tokens": self.segments.count(0),
                "b_tokens": self.segments.count(1), "k": self.top_logits.shape[-1],
                "top": (f"each position's label and the {self.top_logits.shape[-1] - 1} highest beside it"
                        if self.label_first else f"the {self.top_logits.shape[-1]} highest"),
                "where": "each picked position" if self.labels is not None else
                         "each [MASK]" if len(self.guessed) < len(self.tokens) else "each token",
                "no_b": "" if 1 in self.segments else " There is no sentence B here: the head answers all the same, "
                                                      "for [CLS] A [SEP] alone."}


@dataclass(frozen=True)
class Spec:
    """A step as the paper writes it, and where its values are in a forward pass. `about` may name any of
    `Pass.words` in braces."""

    part: str
    title: str
    equation: str
    about: str
    code: str  # a fragment of the line of model.py that computes it
    values: Callable[[Pass], Tensor]
    rows: Callable[[Pass], list[str]] = lambda p: p.rows
    columns: Callable[[Pass], str | list[str]] = lambda p: "dimension"
    cells: Callable[[Pass], list[list[str]] | None] = lambda p: None
    per_head: bool = False  # the values are one head's (else the whole layer's)
    probabilities: bool = False  # the values are probabilities (a softmax's), not scores or coordinates
    vocabulary: bool = False  # the step scores every word piece, and only its top guesses are shown
    no_gradient: str = ""  # why the loss has no gradient here, where it has none (a mask; a softmax it never reads)

    @property
    def gradient(self) -> bool:
        """Whether the loss has a gradient at this step's output."""
        return not self.no_gradient


E, RESIDUAL = "bert.embeddings", "return self.LayerNorm(residual + self.dropout(self.dense(h)))"
QKV, TRANSFORM, DECODER = "for proj in (self.query, self.key, self.value)", \
    "return self.LayerNorm(F.gelu(self.dense(x)))", "return F.linear(self.transform(x), self.decoder.weight, self.bias)"
POOLER, NSP = "return torch.tanh(self.dense(hidden[:, 0]))", \
    "nsp_logits=self.cls.seq_relationship(self.bert.pooler(sequence_output))"
CLS_ROW = ["[CLS]"]
SCORES_READ = ("the loss reads the scores, through log-softmax (cross-entropy): its gradient starts at the scores, "
               "the step before, as softmax minus the one-hot label.")


def _att(p: Pass, name: str) -> str:
    return f"{p.layer_name}.attention.{name}"


SPECS: tuple[Spec, ...] = (
    Spec("Embeddings", "Word rows", r"E_{\text{word}}[x_t]",
         "Each word piece's id picks its row of the word-embedding table (one row a piece of the vocabulary).",
         "x = self.word_embeddings(input_ids) +", lambda p: p.out(f"{E}.word_embeddings")),
    Spec("Embeddings", "Position rows", r"E_{\text{pos}}[t]",
         "Position t picks row t of a learned position table: without it, attention could not tell the order.",
         "x = x + self.position_embeddings(positions)", lambda p: p.kept[Site(f"{E}.position_embeddings")]),
    Spec("Embeddings", "Segment rows", r"E_{\text{seg}}[s_t]",
         "Segment A ([CLS] A [SEP]) picks row 0 of the segment table, segment B (B [SEP]) row 1: here {a_tokens} "
         "tokens of A and {b_tokens} of B.", "self.token_type_embeddings(token_type_ids)",
         lambda p: p.out(f"{E}.token_type_embeddings")),
    Spec("Embeddings", "Their sum", r"e_t = E_{\text{word}}[x_t] + E_{\text{pos}}[t] + E_{\text{seg}}[s_t]",
         "The three rows are added: one vector a token, holding what it is, where it is and which sentence it is in.",
         "x = x + self.position_embeddings(positions)", lambda p: p.into(f"{E}.LayerNorm")),
    Spec("Embeddings", "LayerNorm", r"h^0_t = \gamma \odot \frac{e_t - \mu_t}{\sigma_t} + \beta",
         "Each token's vector is normalised to mean 0 and variance 1, then scaled and shifted by learned weights: "
         "the input of layer 1.", "return self.dropout(self.LayerNorm(x))", lambda p: p.out(f"{E}.LayerNorm")),
    Spec("Attention", "Queries Q", r"Q = h^{l-1} W_Q + b_Q",
         "A linear map of the layer's input; head {head} keeps its own {width} columns. A token's query says what "
         "it looks for.", QKV, lambda p: p.out(_att(p, "self.query"))[:, p.own], per_head=True),
    Spec("Attention", "Keys K", r"K = h^{l-1} W_K + b_K",
         "A token's key says what it offers: a query matches the keys that point its way.", QKV,
         lambda p: p.out(_att(p, "self.key"))[:, p.own], per_head=True),
    Spec("Attention", "Values V", r"V = h^{l-1} W_V + b_V",
         "A token's value is what it hands on to the tokens that attend to it.", QKV,
         lambda p: p.out(_att(p, "self.value"))[:, p.own], per_head=True),
    Spec("Attention", "Scores", r"S = \frac{Q K^\top}{\sqrt{d}}",
         "Every query against every key (rows: the token asking; columns: the token asked), divided by the square "
         "root of the head's width, d = {width}, so that the softmax stays soft.", "scores = self.attention_scores(",
         lambda p: p.out(_att(p, "self.attention_scores"))[p.head], columns=lambda p: p.rows, per_head=True),
    Spec("Attention", "Padding mask", r"S_{ij} \leftarrow -\infty \text{ where key } j \text{ is [PAD]}",
         "In a batch, shorter inputs are padded to the longest, and their [PAD] keys get minus infinity: no token "
         "attends to them. One input has no padding: every key may be attended (1).",
         "scores = scores.masked_fill(~key_mask", lambda p: p.kept[Site(_att(p, "self"), MASK)][0].reshape(1, -1),
         rows=lambda p: ["may be attended"], columns=lambda p: p.rows,
         no_gradient="the mask is made from the input, not computed from any weight: nothing to learn here."),
    Spec("Attention", "Softmax", r"A_{ij} = \operatorname{softmax}_j(S_{ij})",
         "Each row of scores becomes weights that sum to 1: how much each token attends to every other.",
         "probs = scores.softmax(dim=-1)", lambda p: p.probs[0, p.layer, p.head], columns=lambda p: p.rows,
         per_head=True, probabilities=True),
    Spec("Attention", "Weighted sum of V", r"Z_h = A V",
         "Each token's output is the average of the values, weighted by its row of attention.",
         "context = self.dropout(probs) @ v", lambda p: p.into(_att(p, "output.dense"))[:, p.own], per_head=True),
    Spec("Attention", "Every head joined", r"Z = [Z_1; Z_2; \dots; Z_A]",
         "The {heads} heads' outputs side by side: head {head}'s are columns {first} to {last}.",
         'return rearrange(context, "b a t d -> b t (a d)")', lambda p: p.into(_att(p, "output.dense"))),
    Spec("Attention", "Output projection", r"Z W_O + b_O",
         "One linear map mixes the heads' outputs back into the hidden size.", RESIDUAL,
         lambda p: p.out(_att(p, "output.dense"))),
    Spec("Attention", "Residual", r"h^{l-1} + Z W_O + b_O",
         "The sub-layer's input is added back (a residual connection): attention adds to what a token was.",
         RESIDUAL, lambda p: p.into(_att(p, "output.LayerNorm"))),
    Spec("Attention", "LayerNorm (post-LN)", r"a^l = \operatorname{LN}(h^{l-1} + Z W_O + b_O)",
         "Normalised after the residual, as in the paper (post-LN): the feed-forward network's input.", RESIDUAL,
         lambda p: p.out(_att(p, "output.LayerNorm"))),
    Spec("Feed-forward", "First linear map", r"u = a^l W_1 + b_1",
         "Each token on its own (no mixing between tokens here) is mapped to a wider vector, four times the "
         "hidden size.", "return F.gelu(self.dense(x))", lambda p: p.out(f"{p.layer_name}.intermediate.dense")),
    Spec("Feed-forward", "GELU", r"\operatorname{GELU}(u) = u\,\Phi(u)",
         "Each number is kept in proportion to how likely a standard normal falls below it: negatives shrink "
         "towards 0.", "return F.gelu(self.dense(x))", lambda p: p.out(f"{p.layer_name}.intermediate")),
    Spec("Feed-forward", "Second linear map", r"\operatorname{FFN}(a^l) = \operatorname{GELU}(u) W_2 + b_2",
         "Back down to the hidden size.", RESIDUAL, lambda p: p.out(f"{p.layer_name}.output.dense")),
    Spec("Feed-forward", "Residual", r"a^l + \operatorname{FFN}(a^l)", "The sub-layer's input is added back.",
         RESIDUAL, lambda p: p.into(f"{p.layer_name}.output.LayerNorm")),
    Spec("Feed-forward", "The layer's output (LayerNorm)", r"h^l = \operatorname{LN}(a^l + \operatorname{FFN}(a^l))",
         "Layer {layer}'s output: the next layer's input; the last layer's feeds the two heads.",
         "return self.output(self.intermediate(x), x), probs", lambda p: p.out(f"{p.layer_name}.output.LayerNorm")),
    Spec("Masked-LM head", "Transform: dense", r"t = h^L W_T + b_T",
         "The last layer's output at {where}, mapped once more before it is compared with the vocabulary. The head "
         "runs only where it must guess: at the [MASK]s (here, with none typed, at every token), as training runs it "
         "at the picked positions only.",
         TRANSFORM, lambda p: p.at_guesses("cls.predictions.transform.dense"), rows=lambda p: p.guessed_rows),
    Spec("Masked-LM head", "Transform: GELU", r"\operatorname{GELU}(t)", "The same GELU as the feed-forward's.",
         TRANSFORM, lambda p: p.at_guesses("cls.predictions.transform.LayerNorm", reads=True),
         rows=lambda p: p.guessed_rows),
    Spec("Masked-LM head", "Transform: LayerNorm", r"g = \operatorname{LN}(\operatorname{GELU}(t))",
         "Normalised, ready to be scored against every word piece.", TRANSFORM,
         lambda p: p.at_guesses("cls.predictions.transform.LayerNorm"), rows=lambda p: p.guessed_rows),
    Spec("Masked-LM head", "Decoder, tied to the word embeddings", r"z = g\, E_{\text{word}}^\top + b",
         "A score for every word piece of the vocabulary: the dot product with its own row of the word-embedding "
         "table (the decoder shares the input's), plus a bias a piece. Shown: {top} at {where}.", DECODER,
         lambda p: p.top_logits, rows=lambda p: p.guessed_rows, columns=lambda p: _ranks(p),
         cells=lambda p: p.guesses, vocabulary=True),
    Spec("Masked-LM head", "Softmax: the guesses", r"p = \operatorname{softmax}(z)",
         "The scores become probabilities over the whole vocabulary; the highest is the guess at {where}.", DECODER,
         lambda p: p.top_probs,
         rows=lambda p: p.guessed_rows, columns=lambda p: _ranks(p), cells=lambda p: p.guesses, probabilities=True,
         vocabulary=True, no_gradient=SCORES_READ),
    Spec("Next-sentence head", "The [CLS] vector", r"h^L_{[\mathrm{CLS}]}",
         "Only the first token's final vector is read: [CLS] has attended to the whole input in every layer.{no_b}",
         POOLER, lambda p: p.into("bert.pooler.dense")[None], rows=lambda p: CLS_ROW),
    Spec("Next-sentence head", "Pooler: dense", r"W_P h^L_{[\mathrm{CLS}]} + b_P", "A linear map of it.", POOLER,
         lambda p: p.out("bert.pooler.dense")[None], rows=lambda p: CLS_ROW),
    Spec("Next-sentence head", "Pooler: tanh", r"c = \tanh(W_P h^L_{[\mathrm{CLS}]} + b_P)",
         "Squashed into (-1, 1): the pooled summary of the pair.", POOLER, lambda p: p.out("bert.pooler")[None],
         rows=lambda p: CLS_ROW),
    Spec("Next-sentence head", "Classifier", r"y = c\, W_{\text{NSP}} + b_{\text{NSP}}",
         f"Two scores: B follows A ({NSP_CLASSES[IS_NEXT]}), or B is a random passage ({NSP_CLASSES[NOT_NEXT]})."
         "{no_b}", NSP,
         lambda p: p.out("cls.seq_relationship")[None], rows=lambda p: CLS_ROW, columns=lambda p: NSP_LABELS),
    Spec("Next-sentence head", "Softmax",
         rf"P(\text{{{NSP_CLASSES[IS_NEXT]}}}) = \operatorname{{softmax}}(y)_{IS_NEXT}",
         "The two scores as probabilities.{no_b}", NSP, lambda p: p.out("cls.seq_relationship")[None].softmax(-1),
         rows=lambda p: CLS_ROW, columns=lambda p: NSP_LABELS, probabilities=True, no_gradient=SCORES_READ),
)
STEP_NAMES = tuple(f"{spec.part} · {spec.title}" for spec in SPECS)  # the steps in order, as a picker lists them


def _ranks(p: Pass) -> list[str]:
    if p.label_first:
        return ["the label", *(f"guess {i + 1}" for i in range(p.top_logits.shape[-1] - 1))]
    return [f"guess {i + 1}" for i in range(p.top_logits.shape[-1])]


def forward_pass(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None,
                 layer: int = 1, head: int = 1) -> Pass:
    """The model's forward pass on a sentence (or a pair), kept for its steps: layer `layer` and head `head` (both
    from 1) are the ones shown inside the encoder; the masked-LM head guesses at each [MASK], or at every token where
    there is none."""
    check_layer_head(model.config, layer, head)
    batch = encode_input(model, tokenizer, text_a, text_b)
    ids = batch["input_ids"][0].tolist()
    guessed = [i for i, id_ in enumerate(ids) if id_ == tokenizer.mask_token_id] or list(range(len(ids)))
    return _pass(model, tokenizer, batch, guessed, layer, head)


def example_pass(model: BertForPreTraining, tokenizer: BertTokenizerFast, batch: dict[str, Tensor], layer: int = 1,
                 head: int = 1, fates: list[int] | None = None) -> Pass:
    """The forward pass of a drawn pre-training example's batch of one (`pretraining_example.draw`), as training reads
    it: every piece, its [MASK]s, random and kept words (`fates`, each position's, where given); the masked-LM head at
    the picked positions, as training runs it there, with each one's label."""
    check_layer_head(model.config, layer, head)
    guessed = (batch["mlm_labels"][0] != IGNORE_INDEX).nonzero().squeeze(1).tolist()
    device = next(model.parameters()).device
    values = _pass(model, tokenizer, {name: batch[name].to(device) for name in ("input_ids", "token_type_ids")},
                   guessed, layer, head)
    label_ids = batch["mlm_labels"][0, guessed].tolist()
    return replace(values, labels=tokenizer.convert_ids_to_tokens(label_ids), label_ids=label_ids, fates=fates)


def _pass(model: BertForPreTraining, tokenizer: BertTokenizerFast, batch: dict[str, Tensor], guessed: list[int],
          layer: int, head: int) -> Pass:
    """A batch of one run once, its values kept in every layer (`Pass.layer` says which one a step shows)."""
    ids = batch["input_ids"][0].tolist()
    at = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    at[0, guessed] = True
    kept, probs = capture(model, batch, at)
    kept = read(kept)
    logits = kept.pop(Site("cls.predictions"))  # (guessed, V): the largest value, and only its top few are shown
    top = logits.topk(min(TOP_GUESSES, model.config.vocab_size), dim=-1)
    return Pass(kept=kept, probs=probs, tokens=tokenizer.convert_ids_to_tokens(ids),
                segments=batch["token_type_ids"][0].tolist(), layer=layer - 1, head=head - 1,
                heads=model.config.num_attention_heads, guessed=guessed,
                guesses=[tokenizer.convert_ids_to_tokens(row.tolist()) for row in top.indices],
                top_logits=top.values, top_probs=logits.softmax(-1).gather(1, top.indices), top_ids=top.indices,
                vocab_size=model.config.vocab_size)


def forward_steps(model: BertForPreTraining, tokenizer: BertTokenizerFast, text_a: str, text_b: str | None = None,
                  layer: int = 1, head: int = 1) -> list[Step]:
    """Every step of the forward pass (SPECS, in order) for a sentence or a pair, the encoder's inside shown for
    layer `layer` and head `head` (both from 1); the masked-LM head's guesses at each [MASK], or at every token
    where there is none."""
    values = forward_pass(model, tokenizer, text_a, text_b, layer, head)
    return [step(spec, values) for spec in SPECS]


def step(spec: Spec, p: Pass) -> Step:
    """One step's values in a forward pass."""
    where = "" if spec.part not in ("Attention", "Feed-forward") else f"layer {p.layer + 1}" + (
        f", head {p.head + 1}" if spec.per_head else "")
    return Step(part=spec.part, title=spec.title, where=where, equation=spec.equation,
                about=spec.about.format(**p.words), values=spec.values(p), rows=spec.rows(p), columns=spec.columns(p),
                code=spec.code, cells=spec.cells(p), probabilities=spec.probabilities,
                whole=(len(p.guessed), p.vocab_size) if spec.vocabulary else None,
                label_first=spec.vocabulary and p.label_first)


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
