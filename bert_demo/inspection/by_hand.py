"""Where a weight's gradient comes from, worked by hand beside autograd's, in one training step's backward pass on the
drawn example (the trainer's loss, no dropout):

- a linear layer y = x Wᵀ + b: ∂loss/∂W[i, j] = Σ over tokens t of δ[t, i] · x[t, j], the gradient arriving at its
  output times its input (dW = δᵀx), so a weight learns only from tokens whose input j and output gradient i are both
  non-zero;
- a row of softmax p = softmax(s): ∂loss/∂s = (diag(p) − p pᵀ) ∂loss/∂p = p ⊙ (∂loss/∂p − p·∂loss/∂p);
- a row of LayerNorm y = γ ⊙ x̂ + β, x̂ = (x − μ)/σ: with g = γ ⊙ ∂loss/∂y, ∂loss/∂x = (g − mean(g) − x̂ ·
  mean(g ⊙ x̂)) / σ: scaled by about γ/σ, with its mean and its part along x̂ removed.

Autograd's numbers are read from the same backward pass (hooks on a private view of the model, weights that are this
call's own leaves): the model handed in is never written to.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from bert_demo.config import whole_number
from bert_demo.model import BertForPreTraining, private_view
from bert_demo.training.pretraining import micro_batch_loss
from bert_demo.training.settings import TrainConfig

LINEAR_PARTS = {"attention Q": "attention.self.query", "attention K": "attention.self.key",
                "attention V": "attention.self.value", "attention output": "attention.output.dense",
                "feed-forward 1": "intermediate.dense", "feed-forward 2": "output.dense"}
DECODER_PART = "masked-LM decoder"
DECODER = "cls.predictions.decoder"  # its weight is the word table; it runs inside cls.predictions, not as a module
DECODER_IN, DECODER_OUT = "cls.predictions.transform", "cls.predictions"  # its input, and its output (+ the bias)
SHOWN_TOKENS = 8  # the tokens listed one by one in a sum: those that add the most


@dataclass(frozen=True, kw_only=True)
class LinearByHand:
    """One weight W[i, j] of a linear layer: each token's x[t, j] and δ[t, i], their products' sum, autograd's."""

    module: str
    index: tuple[int, int]  # (i: the output unit, j: the input unit)
    tokens: list[int]  # the rows of x and δ: token positions (the decoder's: the picked positions)
    x: list[float]  # x[t, j], the layer's input
    delta: list[float]  # δ[t, i], the gradient of the loss at the layer's output
    by_hand: float  # Σ_t δ[t, i] x[t, j]
    autograd: float  # W.grad[i, j] (the decoder's: its own use of the tied table, not the lookup's)


@dataclass(frozen=True, kw_only=True)
class SoftmaxByHand:
    """One row of one head's attention softmax: query `query` over every key."""

    layer: int
    head: int
    query: int
    p: list[float]  # the probabilities
    dp: list[float]  # ∂loss/∂p
    p_dot_dp: float  # p·∂loss/∂p
    by_hand: list[float]  # p ⊙ (dp − p·dp)
    autograd: list[float]  # ∂loss/∂s, read at the scores


@dataclass(frozen=True, kw_only=True)
class LayerNormByHand:
    """One token's row through a LayerNorm."""

    module: str
    token: int
    sigma: float  # √(var(x) + eps)
    gamma: float  # mean |γ|
    mean_g: float  # mean(γ ⊙ dy)
    mean_gx: float  # mean(γ ⊙ dy ⊙ x̂)
    dy: list[float]  # ∂loss/∂y
    by_hand: list[float]  # ∂loss/∂x by the formula
    autograd: list[float]  # ∂loss/∂x, read at the input

    @property
    def gain(self) -> float:
        """|∂loss/∂x| / |∂loss/∂y| in this row."""
        return float(torch.tensor(self.autograd).norm() / torch.tensor(self.dy).norm().clamp_min(1e-30))


@dataclass(frozen=True, kw_only=True)
class ByHand:
    linear: LinearByHand
    softmax: SoftmaxByHand
    layer_norm: LayerNormByHand


def module_name(part: str, layer: int, layers: int) -> str:
    """The module of a part (one of LINEAR_PARTS, or the decoder) in encoder layer `layer` (from 1)."""
    if part == DECODER_PART:
        return DECODER
    if part not in LINEAR_PARTS:
        raise ValueError(f"the layer is one of {', '.join([*LINEAR_PARTS, DECODER_PART])}, not {str(part)[:40]!r}")
    layer = whole_number(layer, "the layer", 1, layers)
    return f"bert.encoder.layer.{layer - 1}.{LINEAR_PARTS[part]}"


def work(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig, part: str, layer: int,
         head: int = 1) -> ByHand:
    """The backward pass of the trainer's loss on `batch` (a drawn example's batch of one), worked by hand at the
    weight of `part` in `layer` with the largest gradient, at the row of head `head`'s softmax in that layer whose
    gradient is largest, and at the token whose gradient through that layer's attention LayerNorm is largest."""
    config = model.config
    linear = module_name(part, layer, config.num_hidden_layers)
    head = whole_number(head, "the head", 1, config.num_attention_heads)
    norm = f"bert.encoder.layer.{layer - 1}.attention.output.LayerNorm"
    scores = f"bert.encoder.layer.{layer - 1}.attention.self.attention_scores"
    modules = [DECODER_IN, DECODER_OUT] if linear == DECODER else [linear]
    kept, weight_grad, probs = _backward(model, batch, recipe, [*modules, norm, scores])
    x_and_delta = (kept[DECODER_IN][2], kept[DECODER_OUT][3]) if linear == DECODER else kept[linear][::3]
    return ByHand(linear=_linear(*x_and_delta, weight_grad, linear),
                  softmax=_softmax(probs[layer - 1], kept[scores][3], layer, head),
                  layer_norm=_layer_norm(kept[norm], model.get_submodule(norm), norm))


def _backward(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig, names: list[str]
              ) -> tuple[dict[str, tuple[Tensor, Tensor, Tensor, Tensor]], Tensor, tuple[Tensor, ...]]:
    """One forward and backward pass: for each module named, (input, ∂loss/∂input, output, ∂loss/∂output) of the
    batch's first row; the first module's weight gradient (the decoder's: its own use of the tied table); each
    layer's attention probabilities with their gradient."""
    own = private_view(model).eval()
    leaves = {name: p.detach().requires_grad_() for name, p in own.named_parameters()}
    table = "bert.embeddings.word_embeddings.weight"
    decoder = leaves[table].view_as(leaves[table])  # the decoder's use of the tied table, apart from the lookup's
    weights = {**leaves, f"{DECODER}.weight": decoder}
    seen: dict[str, tuple[Tensor, Tensor]] = {}

    def keep(name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Tensor) -> None:
            seen[name] = (inputs[0], output)
            for tensor in seen[name]:
                tensor.retain_grad()
        return hook

    handles = [own.get_submodule(name).register_forward_hook(keep(name)) for name in names]
    try:
        out = torch.func.functional_call(own, weights, (), {**batch, "output_attentions": True}, tie_weights=False,
                                         strict=False)
    finally:
        for handle in handles:
            handle.remove()
    for probs in out.attentions:
        probs.retain_grad()
    decoder.retain_grad()
    loss, _ = micro_batch_loss(replace(recipe, grad_accum=1), out, batch, batch)
    loss.backward()
    grad = decoder.grad if names[0] == DECODER_IN else leaves[f"{names[0]}.weight"].grad
    kept = {name: tuple(_first_row(t) for t in (x.detach(), x.grad, y.detach(), y.grad))
            for name, (x, y) in seen.items()}
    return kept, grad.detach(), tuple((p[0].detach(), p.grad[0]) for p in out.attentions)


def _first_row(tensor: Tensor) -> Tensor:
    """A batch of one's first row: (T, ...) from (1, T, ...); the decoder's (N, ...), a row a picked position, as it
    is."""
    return tensor if tensor.dim() == 2 else tensor[0]


def _linear(x: Tensor, delta: Tensor, weight_grad: Tensor, name: str) -> LinearByHand:
    """`x` the layer's input (rows, in), `delta` the gradient at its output (rows, out)."""
    i, j = (int(k) for k in torch.unravel_index(weight_grad.abs().argmax(), weight_grad.shape))
    return LinearByHand(module=name, index=(i, j), tokens=list(range(x.shape[0])), x=x[:, j].tolist(),
                        delta=delta[:, i].tolist(), by_hand=float((delta[:, i].double() * x[:, j].double()).sum()),
                        autograd=float(weight_grad[i, j]))


def _softmax(probs: tuple[Tensor, Tensor], ds: Tensor, layer: int, head: int) -> SoftmaxByHand:
    """`probs`: a layer's probabilities and their gradient, `ds` the gradient at its scores, (A, T, T) each."""
    p, dp = probs
    p, dp, ds = p[head - 1].double(), dp[head - 1].double(), ds[head - 1].double()
    query = int(ds.norm(dim=-1).argmax())
    row, grad = p[query], dp[query]
    dot = float(row @ grad)
    return SoftmaxByHand(layer=layer, head=head, query=query, p=row.tolist(), dp=grad.tolist(), p_dot_dp=dot,
                         by_hand=(row * (grad - dot)).tolist(), autograd=ds[query].tolist())


def _layer_norm(kept: tuple[Tensor, Tensor, Tensor, Tensor], module: nn.LayerNorm, name: str) -> LayerNormByHand:
    x, dx, _, dy = (t.double() for t in kept)  # (T, H)
    token = int(dx.norm(dim=-1).argmax())
    x, dx, dy = x[token], dx[token], dy[token]
    sigma = float((x.var(unbiased=False) + module.eps).sqrt())
    x_hat = (x - x.mean()) / sigma
    g = module.weight.detach().double() * dy
    by_hand = (g - g.mean() - x_hat * (g * x_hat).mean()) / sigma
    return LayerNormByHand(module=name, token=token, sigma=sigma, gamma=float(module.weight.detach().abs().mean()),
                           mean_g=float(g.mean()), mean_gx=float((g * x_hat).mean()), dy=dy.tolist(),
                           by_hand=by_hand.tolist(), autograd=dx.tolist())


def shown_terms(products: list[float], count: int = SHOWN_TOKENS) -> list[int]:
    """The indices of the largest |terms| of a sum, largest first: the ones a table lists one by one."""
    return sorted(range(len(products)), key=lambda t: -abs(products[t]))[:count]

