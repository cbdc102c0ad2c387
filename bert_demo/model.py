"""BERT for pre-training, written from the paper (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding") on top of Vaswani et al. 2017's Transformer encoder.

Module and parameter names follow Hugging Face's `modeling_bert.py`, so a `state_dict` here is a
`BertForPreTraining` state_dict there: checkpoints move both ways without a renaming table.

Shapes: B batch, T tokens, H hidden size, A heads, D = H / A head size, V vocabulary, L layers, N masked tokens.
"""
from __future__ import annotations

import copy
import functools
import itertools
import math
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from bert_demo.config import BertConfig

IGNORE_INDEX = -100  # label value that the losses skip, as in PyTorch and Hugging Face
M = TypeVar("M", bound=nn.Module)


@dataclass(kw_only=True)
class BertPreTrainingOutput:
    """What one forward pass returns; fields stay None when not asked for."""

    loss: Tensor | None = None  # mlm_loss + nsp_loss (whichever labels were given)
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    mlm_logits: Tensor | None = None  # [B, T, V], or [N, V] at the labelled positions when mlm_labels are given
    mlm_targets: Tensor | None = None  # [N]: the labels at those positions, in the same order
    nsp_logits: Tensor | None = None  # [B, 2], by class: IS_NEXT ("B follows A"), NOT_NEXT
    hidden_states: tuple[Tensor, ...] | None = None  # L + 1 tensors [B, T, H]: embeddings, then each layer
    attentions: tuple[Tensor, ...] | None = None  # L tensors [B, A, T, T], rows sum to 1


@dataclass(kw_only=True)
class SequenceClassifierOutput:
    """What a classifier's forward pass returns; fields stay None when not asked for."""

    loss: Tensor | None = None  # cross-entropy against the labels, when given
    logits: Tensor | None = None  # [B, C], C = number of classes
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


class Tap(nn.Identity):
    """A named point where a look-inside view reads the value passing through (TransformerLens's hook points): it
    computes nothing, holds no weights, and leaves the state_dict as it is."""


class BertEmbeddings(nn.Module):
    """Token + learned position + segment embeddings, then LayerNorm and dropout (§3, Figure 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (T,)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)  # (B, T, H)
        x = x + self.position_embeddings(positions)  # (T, H) broadcast over B
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017, §3.2).

    Two paths with the same numbers: PyTorch's fused `scaled_dot_product_attention` for speed, and the
    explicit softmax(QK^T / sqrt(D)) V when the attention probabilities are wanted (visualisation).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.attention_scores = Tap()  # QK^T / sqrt(D) before the padding mask, on the explicit path

    def forward(self, x: Tensor, key_mask: Tensor | None, output_attentions: bool, head_mask: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, H); key_mask (B, 1, 1, T) bool, True where a key may be attended to; None: no padding.

        head_mask (A,) or (B, A), 1 keeps a head and 0 switches it off: its context vector is zeroed before the
        output projection (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"), and so are its probs.
        """
        q, k, v = (
            rearrange(proj(x), "b t (a d) -> b a t d", a=self.num_heads) for proj in (self.query, self.key, self.value)
        )  # (B, A, T, D) each
        if output_attentions:
            scores = self.attention_scores(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))  # (B, A, T, T)
            if key_mask is not None:
                scores = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
            probs = scores.softmax(dim=-1)
            context = self.dropout(probs) @ v  # (B, A, T, D)
        else:
            probs = None
            dropout_p = self.dropout_prob if self.training else 0.0
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout_p)
        if head_mask is not None:
            keep = rearrange(head_mask.to(context.dtype), "... a -> ... a 1 1")  # (A, 1, 1) or (B, A, 1, 1)
            context = context * keep
            probs = None if probs is None else probs * keep
        return rearrange(context, "b a t d -> b t (a d)"), probs


class BertResidualOutput(nn.Module):
    """Project, dropout, add the residual, then LayerNorm: the post-LN "Add & Norm" after each sub-layer."""

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class BertAttention(nn.Module):
    """Self-attention sub-layer with its output projection and Add & Norm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidualOutput(config.hidden_size, config)

    def forward(self, x: Tensor, key_mask: Tensor | None, output_attentions: bool, head_mask: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        context, probs = self.self(x, key_mask, output_attentions, head_mask)
        return self.output(context, x), probs


class BertIntermediate(nn.Module):
    """First half of the position-wise feed-forward network: H -> FF with the exact (erf) GELU."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    """One post-LN encoder layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, x: Tensor, key_mask: Tensor | None, output_attentions: bool, head_mask: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        x, probs = self.attention(x, key_mask, output_attentions, head_mask)
        return self.output(self.intermediate(x), x), probs


class BertEncoder(nn.Module):
    """A stack of L identical layers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: Tensor, key_mask: Tensor | None, output_attentions: bool, head_mask: Tensor | None = None
                ) -> tuple[list[Tensor], list[Tensor | None]]:
        """Every layer's output (after the input x, (B, T, H)) and its attention probabilities (None on the fused
        path). head_mask (L, A) or (B, L, A): 1 keeps a head, 0 switches it off (see BertSelfAttention)."""
        hidden, attentions = [x], []
        for i, layer in enumerate(self.layer):
            layer_mask = None if head_mask is None else head_mask[..., i, :]  # (A,) or (B, A)
            x, probs = layer(x, key_mask, output_attentions, layer_mask)
            hidden.append(x)
            attentions.append(probs)
        return hidden, attentions


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level summary that feeds next-sentence prediction (§3.1)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H)


class BertModel(nn.Module):
    """Embeddings, encoder and pooler: BERT without its pre-training heads."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor | None, output_attentions: bool,
        head_mask: Tensor | None = None,
    ) -> tuple[list[Tensor], list[Tensor]]:
        """Return the hidden states after the embeddings and after every layer, and each layer's attention.

        attention_mask None means no padding: attention then runs unmasked, which lets SDPA pick its fastest kernel.
        head_mask (L, A) or (B, L, A): 1 keeps a head, 0 switches it off (see BertSelfAttention).
        """
        key_mask = None if attention_mask is None else rearrange(attention_mask.bool(), "b t -> b 1 1 t")
        return self.encoder(self.embeddings(input_ids, token_type_ids), key_mask, output_attentions, head_mask)


class BertPredictionHeadTransform(nn.Module):
    """Dense, GELU, LayerNorm: applied to a hidden state before it is scored against the vocabulary."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Masked-LM head: transform, then a decoder whose weight is the word-embedding matrix, plus its own bias."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied, as in the paper's released code
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self.transform(x), self.decoder.weight, self.bias)  # (..., V); bias added inside the matmul


class BertPreTrainingHeads(nn.Module):
    """The two pre-training tasks' heads (§3.1): masked LM and next-sentence prediction."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, word_embeddings)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertPreTrainedModel(nn.Module):
    """What every BERT with a head shares (as in `transformers`): the encoder `bert`, its size, and the checked
    pass through it that each head starts from."""

    config: BertConfig
    bert: BertModel

    def num_parameters(self) -> int:
        """Trainable parameters, counting a tied embedding/decoder matrix once."""
        return sum(p.numel() for p in self.parameters())

    def _encode(self, input_ids: Tensor, token_type_ids: Tensor | None, attention_mask: Tensor | None,
                output_attentions: bool, head_mask: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
        """Every layer's hidden states and attentions, after checking the input's shape and length."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, tokens], got shape {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise ValueError(
                f"{input_ids.shape[1]} tokens is more than this model's {self.config.max_position_embeddings}"
            )
        token_type_ids = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        return self.bert(input_ids, token_type_ids, attention_mask, output_attentions, head_mask)


class BertForPreTraining(BertPreTrainedModel):
    """BERT with its masked-LM and next-sentence heads: what pre-training optimises."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config, self.bert.embeddings.word_embeddings)
        self.apply(functools.partial(init_weights, std=config.initializer_range))

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        mlm_labels: Tensor | None = None,
        nsp_labels: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        mlm_positions: Tensor | None = None,
        head_mask: Tensor | None = None,
        mlm_count: int | None = None,
    ) -> BertPreTrainingOutput:
        """Score every token (or only the labelled ones, or only `mlm_positions`) and the sentence pair.

        With mlm_labels the vocabulary projection runs only at positions whose label is not -100
        ("sparse prediction", as in cramming and MosaicBERT): the loss is unchanged and the largest matmul
        of the model shrinks by about 1/0.15. `mlm_positions` (bool [B, T]) does the same at inference,
        e.g. at the [MASK] tokens only. `head_mask` (L, A) or (B, L, A) switches heads off (1 keeps, 0 drops).
        `mlm_count`, the number of those positions where the caller knows it on the CPU (a training step counts
        its labels there), lets the GPU find them without telling the host how many there are: a boolean index
        would make the host wait for the GPU mid-step, every step.
        """
        hidden, attentions = self._encode(input_ids, token_type_ids, attention_mask, output_attentions, head_mask)
        sequence_output = hidden[-1]  # (B, T, H)
        out = BertPreTrainingOutput(
            nsp_logits=self.cls.seq_relationship(self.bert.pooler(sequence_output)),  # (B, 2)
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )
        if mlm_labels is not None:
            mlm_positions = mlm_labels != IGNORE_INDEX  # (B, T)
        if mlm_positions is None:
            out.mlm_logits = self.cls.predictions(sequence_output)  # (B, T, V)
        else:
            index = _flat_positions(mlm_positions, mlm_count)  # (N,)
            out.mlm_logits = self.cls.predictions(sequence_output.flatten(0, 1)[index])  # (N, V)
        if mlm_labels is not None:
            # a mean over the targets that is zero, not the NaN of an empty mean, when the batch has none; written
            # as sum / count so that no step waits on the GPU to ask whether there are any
            out.mlm_targets = mlm_labels.flatten()[index]
            out.mlm_loss = F.cross_entropy(out.mlm_logits.float(), out.mlm_targets, reduction="sum") / max(
                out.mlm_targets.numel(), 1)
        if nsp_labels is not None:
            out.nsp_loss = F.cross_entropy(out.nsp_logits.float(), nsp_labels.view(-1))
        losses = [loss for loss in (out.mlm_loss, out.nsp_loss) if loss is not None]
        out.loss = sum(losses) if losses else None
        return out


def _flat_positions(mask: Tensor, count: int | None) -> Tensor:
    """The flat indices (into B x T) of a [B, T] mask's True positions, in row-major order, as a boolean index takes
    them. Given their `count`, found by a stable sort on the device, whose output size the host already knows."""
    flat = mask.flatten()
    if count is None:
        return flat.nonzero().squeeze(1)
    return torch.argsort((~flat).to(torch.uint8), stable=True)[:count]


class BertForSequenceClassification(BertPreTrainedModel):
    """BERT fine-tuned to classify a sentence or a sentence pair (§4.1, Figure 4 (a) and (b)): the pooled [CLS]
    summary, dropout, then one linear layer over the classes. Names as in `transformers`, so the state_dict and
    config.json move both ways and `pipeline("text-classification")` reads our folders."""

    def __init__(self, config: BertConfig):
        super().__init__()
        if not config.labels:
            raise ValueError("a classifier needs its classes: give the config labels")
        self.config = config
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, len(config.labels))
        self.apply(functools.partial(init_weights, std=config.initializer_range))

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        head_mask: Tensor | None = None,
    ) -> SequenceClassifierOutput:
        """Class logits for each sequence; with `labels` ([B] class indices) also the cross-entropy loss."""
        hidden, attentions = self._encode(input_ids, token_type_ids, attention_mask, output_attentions, head_mask)
        logits = self.classifier(self.dropout(self.bert.pooler(hidden[-1])))  # (B, C)
        return SequenceClassifierOutput(
            loss=F.cross_entropy(logits.float(), labels.view(-1)) if labels is not None else None,
            logits=logits,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )


def init_weights(module: nn.Module, std: float) -> None:
    """Truncation-free normal(0, 0.02) for weights, zeros for biases, identity LayerNorms (BERT's init)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        with torch.no_grad():
            module.weight[module.padding_idx].zero_()
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def private_view(model: M) -> M:
    """A module tree of the caller's own over the same weights, none of them copied (about 9 ms for BERT-Small,
    against 44 ms for a deep copy).

    One model answers many callers at once (the app's visitors, each on a thread of their own). A forward hook, a
    switch between train and eval mode, or any attribute set on that model reaches every pass through it, another
    caller's included: a hook would record their text. What a caller sets on its view reaches no one else. The
    weights stay shared, so the view must not write to them (inference only); tied weights stay tied.
    """
    shared = {id(tensor): tensor for tensor in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, shared)


def in_eval_mode(model: M) -> M:
    """`model` itself where it is in eval mode throughout (the app's models are), else a private view of it in eval
    mode: dropout off, and the model handed in never switched."""
    if not any(module.training for module in model.modules()):
        return model
    return private_view(model).eval()
