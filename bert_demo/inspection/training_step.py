"""One training step on one pre-training example, with the model's own numbers: what `loss.backward()` and
`optimizer.step()` do in every seed's loop (Devlin et al. 2019, §3.1 and Appendix A.2).

`take` runs the training loop's own step (`training.step`: `backward`, then `update`) on a private copy of the model
(the one handed in, which other callers may be asking, is never touched), in fp32 whatever a run computes in: the
forward pass on the example's batch, the loss training minimises (`pretraining.micro_batch_loss`: masked-LM loss +
`nsp_weight` x next-sentence loss), autograd's backward pass, the recipe's gradient clipping, then the optimizer
`recipe.make_optimizer` makes (AdamW, Loshchilov & Hutter 2019; or LAMB for a model trained with `--optimizer lamb`)
at the recipe's peak learning rate, betas, epsilon and weight decay. What it keeps:

- where the gradient starts: softmax minus the one-hot label, at each picked position and at the NSP head;
- the gradient at every step of the forward pass (`forward_steps.SPECS`, in every layer), kept under the same names as
  `forward_steps.capture` keeps the values, so that each step can show its gradient beside its values;
- each parameter's gradient, and the tied word embeddings' two parts: from the input (the lookup) and from the
  masked-LM decoder, each measured by autograd on an alias of the one tensor, and their sum, the tensor's gradient;
- the optimizer's update of every weight, with m, v and the bias corrections for a few weights worked through;
- the example's loss and guesses before and after, and those of an unrelated sentence: one step moves everything.

Dropout is off unless asked for, so that a step can be repeated and checked number by number.
"""
from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bert_demo.config import whole_number
from bert_demo.inspection.forward_steps import CLS_ROW, ENCODER_PARTS, IN, OUT, SPECS, Captured, Pass, Spec, Site, read
from bert_demo.model import IGNORE_INDEX, BertForPreTraining, in_eval_mode, private_view
from bert_demo.training.pretraining import micro_batch_loss
from bert_demo.training.recipe import make_optimizer, set_dropout
from bert_demo.training.settings import EXAMPLE_STEPS, TrainConfig
from bert_demo.training.step import Loss, backward, update

MAX_DROPOUT = 0.5
MAX_PARAMETERS = 60_000_000  # a step holds the model about five times over (copy, gradients, the optimizer's moments)
PROBE_TOP = 5  # the unrelated sentence's guesses shown
WORD_TABLE, DECODER = "bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"


@dataclass(frozen=True, kw_only=True)
class Guess:
    """What the model believes at one picked position: its label and its top guess, each with its probability."""

    position: int
    label: int
    label_prob: float
    top: int
    top_prob: float


@dataclass(frozen=True, kw_only=True)
class Beliefs:
    """The example's loss and guesses under one set of weights (eval mode: no dropout)."""

    loss: float  # mlm_loss + nsp_weight * nsp_loss
    mlm_loss: float
    nsp_loss: float
    guesses: list[Guess]  # at each picked position, in order
    nsp_prob: float  # the probability of the example's own NSP label
    probe: list[tuple[int, float]]  # at the unrelated sentence's first [MASK]: the top ids and probabilities
    probe_logits: Tensor | None  # (V,) there: to read any word's probability


@dataclass(frozen=True, kw_only=True)
class Worked:
    """The optimizer's update of one weight, every number the real optimizer's. AdamW's (Kingma & Ba 2015, Algorithm 1,
    with decoupled weight decay): m = β1 m + (1-β1) g, v = β2 v + (1-β2) g², m̂ = m / (1-β1^t), v̂ = v / (1-β2^t),
    w ← w - lr·wd·w - lr·m̂ / (√v̂ + ε); LAMB's is the same step, rescaled in a matrix by its trust ratio."""

    name: str
    index: tuple[int, ...]
    weight_before: float
    gradient: float  # after clipping: what the optimizer reads
    m: float
    v: float
    m_hat: float
    v_hat: float
    weight_decay: float  # this weight's (0 for biases and LayerNorms)
    update: float  # the weight after minus before
    weight_after: float


@dataclass(frozen=True, kw_only=True)
class PartMoves:
    """How far the first step moved the weights of one part of the model, counted weight by weight."""

    part: str  # as `coarse_part` names it
    weights: int
    over_half: int  # moved by more than half the learning rate
    no_gradient: int  # no gradient reached them (g = 0): a position past the example's length, say
    under_eps: int  # 0 < |g| ≤ ε after clipping: Adam's first step, lr·g/(|g|+ε), is then at most half the rate
    under_eps_by_clipping: int  # of those, the ones whose gradient was above ε before clipping


@dataclass(frozen=True, kw_only=True)
class Moves:
    """What the first step did to every weight, measured: Adam's first step is lr·g/(|g|+ε) (m̂ = g, v̂ = g²), about
    the learning rate where |g| ≫ ε whatever its size, and less than half of it where |g| < ε."""

    lr: float
    eps: float
    clipped: float  # the factor clipping multiplied every gradient by (1: none)
    median: float  # over every weight: the median move as a share of the learning rate
    parts: list[PartMoves]  # in the order of the forward pass

    @property
    def weights(self) -> int:
        return sum(part.weights for part in self.parts)

    @property
    def over_half(self) -> int:
        return sum(part.over_half for part in self.parts)

    @property
    def no_gradient(self) -> int:
        return sum(part.no_gradient for part in self.parts)

    @property
    def under_eps(self) -> int:
        return sum(part.under_eps for part in self.parts)

    @property
    def under_eps_by_clipping(self) -> int:
        return sum(part.under_eps_by_clipping for part in self.parts)


@dataclass(frozen=True, kw_only=True)
class Gradients:
    """The gradient of the loss at every module's output and input (`flow`) and at each layer's attention
    probabilities (`attention_flow`): what a step of the forward pass shows of a training step, kept without the
    rest."""

    flow: Captured
    attention_flow: Tensor  # (L, A, T, T)

    @property
    def nbytes(self) -> int:
        return sum(value.nbytes for value in (*self.flow.values(), self.attention_flow))


@dataclass(frozen=True, kw_only=True)
class TrainingStep:
    """One step (or a few) on one example: the loss and guesses before and after, the gradient everywhere, and the
    update. `gradients` and `updates` are by parameter name as `model.named_parameters()` gives them."""

    optimizer: str  # the optimizer's class, as the recipe made it: AdamW, or LAMB
    nsp_weight: float
    lr: float
    betas: tuple[float, float]  # (β1, β2)
    eps: float
    weight_decay: float
    grad_clip: float
    dropout: float
    before: Beliefs
    after: Beliefs  # after the last step taken
    losses: list[float]  # the loss before, then after each step (eval mode)
    mlm_start: Tensor  # (N, V): softmax minus one-hot at each picked position, the gradient of each one's loss
    nsp_start: Tensor  # (2,): the same at the NSP head
    gradients: dict[str, Tensor]  # the first step's, as autograd gave them (before clipping)
    tied_parts: tuple[Tensor, Tensor]  # the word table's gradient from the input lookup, and from the decoder
    grad_norm: float  # the norm of all gradients together, before clipping
    clipped: float  # the factor clipping multiplied them by (1: none)
    flow: Captured  # the gradient of the loss at every module's output and input
    attention_flow: Tensor  # (L, A, T, T): the gradient at each layer's attention probabilities
    updates: dict[str, Tensor]  # the weights after the first step minus before
    moves: Moves  # how far the first step moved every weight, counted
    worked: list[Worked]  # the first step, worked through for a few weights
    trail: list[list[float]]  # trail[i][s]: worked weight i's move at step s + 1 (its value after minus before)

    @property
    def at_steps(self) -> Gradients:
        """The gradient at every step of the forward pass, apart from the rest."""
        return Gradients(flow=self.flow, attention_flow=self.attention_flow)

    @property
    def loss_before(self) -> float:
        return self.before.loss

    @property
    def loss_after(self) -> float:
        return self.after.loss


def take(model: BertForPreTraining, example: Any, recipe: TrainConfig, *, steps: int = 1, dropout: float = 0.0,
         probe: dict[str, Tensor] | None = None) -> TrainingStep:
    """`steps` training steps on the example (a `pretraining_example.PretrainingExample`, or anything with its
    `batch`) under `recipe`, on a private copy of `model`; `dropout` the hidden and attention dropout of the steps
    (0: none, so that a step repeats exactly); `probe`, an unrelated sentence's batch with a [MASK], whose guesses
    are compared before and after ("input_ids", "token_type_ids" and "mlm_positions": its [MASK]s, the first read).
    The model handed in is left as it was."""
    _check(model, steps, dropout)
    own = copy.deepcopy(model)  # its weights change: never a view of the shared ones
    set_dropout(own, dropout)
    device = next(own.parameters()).device
    given = {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}  # on the CPU, as a run's
    batch = {name: tensor.to(device) for name, tensor in given.items()}
    probe = None if probe is None else {name: tensor.to(device) for name, tensor in probe.items()}
    before = _beliefs(own, batch, recipe.nsp_weight, probe)
    optimizer = make_optimizer(own, recipe)  # at the recipe's peak learning rate: a run's schedule warms up to it
    flow, attention_flow, parts, out = _backward(own.train(dropout > 0), given, recipe)
    gradients = {name: p.grad.detach().clone() for name, p in own.named_parameters()}
    grad_norm = float(update(own, optimizer, recipe.grad_clip))
    clipped = min(1.0, recipe.grad_clip / (grad_norm + 1e-6))  # the factor clip_grad_norm_ multiplied them by
    picked = pick_weights(own, recipe.adam_eps)  # from the clipped gradients, which the optimizer's step leaves
    weights = dict(model.named_parameters())  # the copy's weights before the step: the model's own, untouched
    updates = {name: p.detach() - weights[name].detach() for name, p in own.named_parameters()}
    moves = _moves(own, gradients, updates, recipe, clipped)
    worked = [_worked(own, optimizer, name, index, weights[name].detach()) for name, index in picked]
    trail, losses = [[w.update] for w in worked], [before.loss, _beliefs(own, batch, recipe.nsp_weight).loss]
    for _ in range(steps - 1):
        was = [_value(own, name, index) for name, index in picked]
        optimizer.zero_grad(set_to_none=True)
        backward(own.train(dropout > 0), given, _loss(recipe), device=device)
        update(own, optimizer, recipe.grad_clip)
        for moved, (name, index), value in zip(trail, picked, was):
            moved.append(_value(own, name, index) - value)
        losses.append(_beliefs(own, batch, recipe.nsp_weight).loss)
    after = _beliefs(own, batch, recipe.nsp_weight, probe)
    probs = out.mlm_logits.detach().float().softmax(-1)
    one_hot = F.one_hot(out.mlm_targets, probs.shape[-1]).float()
    nsp = out.nsp_logits.detach().float().softmax(-1)[0] - F.one_hot(batch["nsp_labels"][0], 2).float()
    return TrainingStep(
        optimizer=OPTIMIZER_NAMES.get(type(optimizer).__name__, type(optimizer).__name__),
        nsp_weight=recipe.nsp_weight, lr=recipe.lr, betas=tuple(optimizer.param_groups[0]["betas"]),
        eps=recipe.adam_eps, weight_decay=recipe.weight_decay, grad_clip=recipe.grad_clip, dropout=dropout,
        before=before, after=after, losses=losses, mlm_start=(probs - one_hot).cpu(), nsp_start=nsp.cpu(),
        gradients=gradients, tied_parts=parts, grad_norm=grad_norm, clipped=clipped, flow=flow,
        attention_flow=attention_flow, updates=updates, moves=moves, worked=worked, trail=trail)


OPTIMIZER_NAMES = {"AdamW": "AdamW", "Lamb": "LAMB"}


def _value(model: nn.Module, name: str, index: tuple[int, ...]) -> float:
    """One weight's value now."""
    return float(model.get_parameter(name).detach()[index])


def _check(model: BertForPreTraining, steps: int, dropout: float) -> None:
    whole_number(steps, "the number of steps to take", 1, EXAMPLE_STEPS)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= MAX_DROPOUT:
        raise ValueError(f"dropout is a number from 0 to {MAX_DROPOUT}, got {str(dropout)[:40]}")
    if model.num_parameters() > MAX_PARAMETERS:
        raise ValueError(f"a training step here holds the model five times over: it takes models of up to "
                         f"{MAX_PARAMETERS // 10**6} M parameters, and this one has "
                         f"{model.num_parameters() / 10**6:.0f} M")


def _loss(recipe: TrainConfig) -> Loss:
    """The loss training minimises, the loop's own (`pretraining.micro_batch_loss`), for the batch in one pass:
    masked-LM + nsp_weight x NSP."""
    return functools.partial(micro_batch_loss, replace(recipe, grad_accum=1))


def gradients_at_steps(model: BertForPreTraining, example: Any, recipe: TrainConfig) -> Gradients:
    """The gradient of the loss at every step of the example's forward pass, as the first training step's backward
    pass computes it (no dropout), and nothing else of a step: no optimizer, no copy of the model. The pass runs on a
    private view of the model whose weights are this call's own leaves over the shared ones, so that nothing is
    written to the model's `.grad` (what the forward pass's gradient view shows: a fifth of a step's work)."""
    own = private_view(model).eval()
    batch = {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}
    leaves = {name: p.detach().requires_grad_() for name, p in own.named_parameters()}
    flow, attention_flow, _, _ = _backward(own, batch, recipe, leaves)
    return Gradients(flow=flow, attention_flow=attention_flow)


def _backward(model: BertForPreTraining, batch: dict[str, Tensor], recipe: TrainConfig,
              leaves: dict[str, Tensor] | None = None) -> tuple[Captured, Tensor, tuple[Tensor, Tensor], Any]:
    """The training loop's forward and backward passes (`step.backward`) on the CPU `batch`: every parameter's `.grad`
    (or, with `leaves`, the weights by name to use instead, theirs), and what hooks keep of the passes: the gradient
    at every module's output and input, at each layer's attention probabilities, and the word table's two parts. The
    table enters the pass twice, through an alias each (the lookup, the decoder), so that autograd measures each
    use's gradient while it sums both into the table's own."""
    seen: Captured = {}

    def keep(name: str) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            for site, tensor in ((IN, inputs[0] if inputs else None), (OUT, output)):
                if isinstance(tensor, Tensor) and tensor.requires_grad:
                    tensor.retain_grad()
                    seen[Site(name, site)] = tensor
        return hook

    weights = leaves or dict(model.named_parameters())
    table = weights[WORD_TABLE]
    aliases = (table.view_as(table), table.view_as(table))  # the lookup's, the decoder's
    for alias in aliases:
        alias.retain_grad()
    weights = {**weights, WORD_TABLE: aliases[0], DECODER: aliases[1]}

    def forward(**inputs: Tensor) -> Any:
        out = torch.func.functional_call(
            model, weights, (), {**inputs, "output_attentions": True}, tie_weights=False, strict=False)
        for probs in out.attentions:
            probs.retain_grad()
        return out

    handles = [module.register_forward_hook(keep(name)) for name, module in model.named_modules() if name]
    try:
        out, _ = backward(forward, batch, _loss(recipe), device=table.device)
    finally:
        for handle in handles:
            handle.remove()
    flow = {name: tensor.grad.detach().float().cpu() for name, tensor in read(seen).items() if tensor.grad is not None}
    attention = torch.stack([out.attentions[i].grad[0] for i in range(len(out.attentions))]).float().cpu()
    return flow, attention, (aliases[0].grad.detach().clone(), aliases[1].grad.detach().clone()), out


def _beliefs(model: BertForPreTraining, batch: dict[str, Tensor], nsp_weight: float,
             probe: dict[str, Tensor] | None = None) -> Beliefs:
    """The example's loss and guesses under the model's weights now, in eval mode (no dropout)."""
    with torch.inference_mode():
        ask = in_eval_mode(model)
        out = ask(**batch)
        probs = out.mlm_logits.float().softmax(-1)  # (N, V) at the picked positions, in order
        positions = (batch["mlm_labels"][0] != IGNORE_INDEX).nonzero().squeeze(1).tolist()
        label_probs = probs.gather(1, out.mlm_targets[:, None])[:, 0]
        top_probs, tops = probs.max(-1)
        guesses = [Guess(position=p, label=int(label), label_prob=float(lp), top=int(top), top_prob=float(tp))
                   for p, label, lp, top, tp in zip(positions, out.mlm_targets.tolist(), label_probs.tolist(),
                                                    tops.tolist(), top_probs.tolist())]
        nsp_loss = F.cross_entropy(out.nsp_logits.float(), batch["nsp_labels"].view(-1))
        nsp_prob = float(out.nsp_logits.float().softmax(-1)[0, int(batch["nsp_labels"][0])])
        probe_logits, probe_top = None, []
        if probe is not None:  # its "mlm_positions" are its [MASK]s: the first is read
            probe_logits = ask(**probe).mlm_logits[0].float().cpu()
            values, ids = probe_logits.softmax(-1).topk(PROBE_TOP)
            probe_top = list(zip(ids.tolist(), values.tolist()))
    return Beliefs(loss=float(out.mlm_loss + nsp_weight * nsp_loss), mlm_loss=float(out.mlm_loss),
                   nsp_loss=float(nsp_loss), guesses=guesses, nsp_prob=nsp_prob, probe=probe_top,
                   probe_logits=probe_logits)


def pick_weights(model: BertForPreTraining, eps: float) -> list[tuple[str, tuple[int, ...]]]:
    """The weights worked through, from their gradients after clipping: the one with the largest gradient; the one of
    the same tensor whose gradient is nearest a thousandth of it while well above ε (Adam's first step moves both by
    about the learning rate); and, where clipping left some gradients under ε, one of those (its step is a fraction
    of the rate), from the same tensor where it has one."""
    named = [(name, p.grad.abs()) for name, p in model.named_parameters() if p.grad is not None]
    name, grads = max(named, key=lambda item: float(item[1].max()))
    top = float(grads.max())
    picks = [(name, _unravel(int(grads.argmax()), grads.shape))]
    above = grads > 4 * eps
    if bool(above.sum() > 1):
        distance = (grads.clamp_min(1e-30).log() - math.log(top / 1000)).abs().masked_fill(~above, math.inf)
        distance.view(-1)[int(grads.argmax())] = math.inf
        picks.append((name, _unravel(int(distance.argmin()), grads.shape)))
    for tensor_name, tensor in sorted(named, key=lambda item: item[0] != name):  # the same tensor first
        under = (tensor > 0) & (tensor < eps / 4)
        if bool(under.any()):  # the nearest a tenth of ε: its step is about a tenth of the rate
            distance = (tensor.clamp_min(1e-30).log() - math.log(eps / 10)).abs().masked_fill(~under, math.inf)
            picks.append((tensor_name, _unravel(int(distance.argmin()), tensor.shape)))
            break
    return picks


def _unravel(flat: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))


def _worked(model: BertForPreTraining, optimizer: torch.optim.Optimizer, name: str, index: tuple[int, ...],
            before: Tensor) -> Worked:
    """One weight's update, from the optimizer's own state after its first step."""
    p = model.get_parameter(name)
    state, group = optimizer.state[p], next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
    beta1, beta2 = group["betas"]
    t = float(state["step"])
    m, v = float(state["exp_avg"][index]), float(state["exp_avg_sq"][index])
    return Worked(name=name, index=index, weight_before=float(before[index]), gradient=float(p.grad[index]), m=m,
                  v=v, m_hat=m / (1 - beta1 ** t), v_hat=v / (1 - beta2 ** t), weight_decay=group["weight_decay"],
                  update=float(p.detach()[index] - before[index]), weight_after=float(p.detach()[index]))



def _moves(model: BertForPreTraining, gradients: dict[str, Tensor], updates: dict[str, Tensor], recipe: TrainConfig,
           clipped: float) -> Moves:
    """Every weight's move in the first step, counted by part against half the learning rate, with the gradient the
    optimizer read (after clipping) against ε; and the median move of them all."""
    counts: dict[str, list[int]] = {}
    moves = []
    eps = recipe.adam_eps
    for name, p in model.named_parameters():
        move = updates[name].detach().flatten().float().abs()  # |Δw|
        read = p.grad.detach().flatten().abs()  # what the optimizer read: the clipped gradient
        none, at_most = int(torch.count_nonzero(read == 0)), int(torch.count_nonzero(read <= eps))
        by_clipping = int(torch.count_nonzero((read <= eps) & (gradients[name].flatten().abs() > eps)))
        counted = [move.numel(), int(torch.count_nonzero(move > recipe.lr / 2)), none, at_most - none, by_clipping]
        part = coarse_part(name)
        counts[part] = [a + b for a, b in zip(counts.get(part, [0] * 5), counted)]
        moves.append(move)
    rows = [PartMoves(part=part, weights=weights, over_half=over, no_gradient=none, under_eps=under,
                      under_eps_by_clipping=by_clipping)
            for part, (weights, over, none, under, by_clipping) in counts.items()]
    return Moves(lr=recipe.lr, eps=eps, clipped=clipped, median=float(torch.cat(moves).median()) / recipe.lr,
                 parts=rows)


PART = re.compile(r"bert\.encoder\.layer\.(\d+)\.(.*)")
PART_NAMES = {"attention.self.query": "attention Q", "attention.self.key": "attention K",
              "attention.self.value": "attention V", "attention.output.dense": "attention output",
              "attention.output.LayerNorm": "attention LayerNorm", "intermediate.dense": "feed-forward 1",
              "output.dense": "feed-forward 2", "output.LayerNorm": "feed-forward LayerNorm"}


def where(name: str) -> tuple[str, str]:
    """A parameter's group (the embeddings, layer l, a head) and part, as the gradient table lists them."""
    layer = PART.fullmatch(name)
    if layer:
        module = layer[2].rsplit(".", 1)[0]
        return f"layer {int(layer[1]) + 1}", PART_NAMES.get(module, module)
    if name.startswith("bert.embeddings."):
        return "embeddings", name.removeprefix("bert.embeddings.").rsplit(".", 1)[0].replace("_", " ")
    if name.startswith(("bert.pooler", "cls.seq_relationship")):
        return "next-sentence head", name.split(".")[1] if name.startswith("bert.") else "classifier"
    return "masked-LM head", name.removeprefix("cls.predictions.").rsplit(".", 1)[0] or "bias"



def coarse_part(name: str) -> str:
    """A parameter's part as the table of moves lists it: each embedding table apart, each layer whole, each head."""
    group, part = where(name)
    return f"{group} · {part}" if group == "embeddings" else group

def gradient_norms(gradients: dict[str, Tensor]) -> list[tuple[str, str, float]]:
    """(group, part, norm) for every part of the model, in the order of the forward pass: a part's weight and bias
    together."""
    norms: dict[tuple[str, str], float] = {}
    for name, gradient in gradients.items():
        key = where(name)
        norms[key] = norms.get(key, 0.0) + float(gradient.float().pow(2).sum())
    return [(group, part, total ** 0.5) for (group, part), total in norms.items()]


def gradient_pass(step: TrainingStep | Gradients, values: Pass) -> Pass:
    """The gradient of the loss at every step of the example's forward pass `values` (`forward_steps.example_pass`:
    the same batch, its rows, layer and head), kept where the values were, so that a step's `Spec.values` reads its
    gradient as it reads its values. The decoder's is read at each position's label first, the one score the loss
    pushes up, then at the top guesses beside it."""
    scores = step.flow[Site("cls.predictions")]  # (N, V): the gradient at every score of each picked position
    ids, guesses = values.top_ids, values.guesses
    if values.label_ids is not None:
        k = ids.shape[-1]
        others = [[(i, g) for i, g in zip(row.tolist(), words) if i != label][:k - 1]
                  for row, words, label in zip(ids, guesses, values.label_ids)]
        ids = torch.tensor([[label, *(i for i, _ in row)] for label, row in zip(values.label_ids, others)])
        guesses = [[label, *(g for _, g in row)] for label, row in zip(values.labels, others)]
    return replace(values, kept=step.flow, probs=step.attention_flow[None], top_logits=scores.gather(1, ids),
                   top_ids=ids, guesses=guesses, label_first=values.label_ids is not None)


@dataclass(frozen=True, kw_only=True)
class Gain:
    """How the gradient changes through the embeddings' LayerNorm on its way down into the three tables: LayerNorm
    divides its input by σ and multiplies by γ, so its backward pass scales the gradient by about γ/σ (and removes
    its mean and its part along the normalised input)."""

    ratio: float  # the size of the gradient below it over the size above it, over every token
    sigma: float  # its input's standard deviation, averaged over the tokens
    gamma: float  # the mean |γ|


def embedding_gain(model: BertForPreTraining, step: TrainingStep | Gradients, values: Pass) -> Gain:
    """The gradient's gain through the embeddings' LayerNorm in this step, and what sets it."""
    name = "bert.embeddings.LayerNorm"
    above, below = step.flow[Site(name, OUT)], step.flow[Site(name, IN)]
    layer_norm = model.get_submodule(name)
    sigma = float((values.into(name).var(-1, unbiased=False) + layer_norm.eps).sqrt().mean())
    return Gain(ratio=float(below.norm() / above.norm()), sigma=sigma,
                gamma=float(layer_norm.weight.detach().abs().mean()))


def flow(step: TrainingStep, values: Pass) -> tuple[list[str], Tensor]:
    """How strong the gradient is at each token, at every step of the forward pass in order, from the embeddings
    through each layer in turn to the heads: the step's labels, and the size (L2 norm) of the gradient at each
    (steps, tokens); NaN where a step computes nothing for a token (the masked-LM head runs at the picked positions,
    the NSP head at [CLS] only). A head's step counts every head."""
    grads, tokens = gradient_pass(step, values), len(values.tokens)
    encoder = [spec for spec in SPECS if spec.gradient and spec.part in ENCODER_PARTS]
    order = [(spec, values.layer, "") for spec in SPECS if spec.gradient and spec.part == SPECS[0].part]
    order += [(spec, layer, f"L{layer + 1} ") for layer in range(step.attention_flow.shape[0]) for spec in encoder]
    order += [(spec, values.layer, "") for spec in SPECS
              if spec.gradient and spec.part not in (SPECS[0].part, *ENCODER_PARTS)]
    labels, columns = [], []
    for spec, layer, prefix in order:
        at = replace(grads, layer=layer)
        squares = sum(spec.values(replace(at, head=head)).float().pow(2).sum(-1)
                      for head in (range(at.heads) if spec.per_head else [at.head]))
        column = torch.full((tokens,), math.nan)
        column[_positions(spec, at)] = squares.sqrt()
        columns.append(column)
        labels.append(prefix + spec.title)
    return labels, torch.stack(columns)


def head_flow(step: TrainingStep, values: Pass) -> Tensor:
    """(layers, heads): the size of the gradient at each head's output, its weighted sum of V, over every token: how
    much of the learning signal reaches each head."""
    grads = gradient_pass(step, values)
    spec = next(spec for spec in SPECS if spec.title == "Weighted sum of V")
    layers, heads = step.attention_flow.shape[:2]
    return torch.tensor([[float(spec.values(replace(grads, layer=layer, head=head)).norm()) for head in range(heads)]
                         for layer in range(layers)])


def _positions(spec: Spec, p: Pass) -> list[int]:
    """The token positions a step's rows stand for."""
    rows = spec.rows(p)
    if rows == CLS_ROW:
        return [0]
    return p.guessed if rows == p.guessed_rows and len(rows) < len(p.tokens) else list(range(len(p.tokens)))
