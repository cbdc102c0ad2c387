"""How a model is started and driven, as opposed to what it is: initial values, the optimizer and its schedule.

None of this changes the architecture, so checkpoints stay `BertForPreTraining`. These are the levers measured by
`benchmarks/learning_speed.py` against BERT's early plateau, where a model predicts the frequent tokens
(`the , of and .`) for every [MASK] until its attention learns to use context (Chen et al. 2024, "Sudden Drops in
the Loss"; Gopalani & Hu 2025: the plateau is slow learning of the attention map).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from bert_demo.config import OPTIMIZER_NAME
from bert_demo.model import BertForPreTraining
from bert_demo.training.lamb import Lamb
from bert_demo.training.settings import BETA1, SCHEDULES, RunConfig


@torch.no_grad()
def initialise(model: BertForPreTraining, qk_scale: float = 1.0, mimetic: bool = False,
               sinusoid_positions: bool = False, position_scale: float = 1.0, local_heads: int = 0,
               output_bias: torch.Tensor | None = None, global_cls: bool = False) -> None:
    """Re-initialise a freshly built model's attention and positions (after BERT's normal(0, 0.02) init).

    - qk_scale multiplies the std of every query and key weight: larger scores make the softmax less uniform, so the
      query/key gradients do not vanish (Hoffmann et al. 2023, "Eureka-Moments").
    - mimetic sets each layer's key weights equal to its query weights, so Q·Kᵀ starts as a positive semi-definite
      form: a token attends to tokens whose hidden states resemble its own (Trockman & Kolter 2023).
    - sinusoid_positions writes Vaswani et al.'s sinusoids into the learned position table, so neighbouring
      positions start similar, at `position_scale` times BERT's embedding scale. With mimetic attention and positions
      that outweigh the words (position_scale 8, qk_scale 4 on BERT-mini), the first layer's heads start out local:
      about a third of each token's attention on its two neighbours instead of 1.6%, and little on other [MASK]s.
    - local_heads > 0 starts that many heads of every layer as previous-token and next-token heads (alternately),
      the pattern BERT's own heads settle into (Clark et al. 2019, "What Does BERT Look At?"): see `_local_heads`.
      global_cls then leaves [CLS] (position 0) out of the position code, and the segment embeddings out of the
      code's dimensions, so in those heads [CLS] reads the whole pair, as the next-sentence head needs; measured in
      benchmarks/README.md, it does not make tiny learn NSP sooner.
    - output_bias (V,) starts the masked-LM head's bias there: with the log unigram probabilities of the training
      tokens, the model predicts word frequencies from step 0 instead of learning them first (Karpathy 2019,
      "A Recipe for Training Neural Networks": "init well").
    """
    std = model.config.initializer_range
    for layer in model.bert.encoder.layer:
        attention = layer.attention.self
        nn.init.normal_(attention.query.weight, std=std * qk_scale)
        if mimetic:
            attention.key.weight.copy_(attention.query.weight)
        else:
            nn.init.normal_(attention.key.weight, std=std * qk_scale)
    if output_bias is not None:
        model.cls.predictions.bias.copy_(output_bias)
    if local_heads:
        _local_heads(model, local_heads, position_scale, global_cls)
    if sinusoid_positions:
        table = model.bert.embeddings.position_embeddings.weight
        table.copy_(sinusoids(*table.shape) * std * math.sqrt(2) * position_scale)  # sin/cos have RMS 1/sqrt(2)


LOCAL_BASE = 100.0  # the slowest position code turns once per 2*pi*100^((D-2)/D) positions; fast ones tell i from i+1
LOCAL_SHARPNESS = 2.0  # query/key weight of a local head: at BERT-mini's init, 86% of its attention on the neighbour


@torch.no_grad()
def _local_heads(model: BertForPreTraining, heads: int, position_scale: float, global_cls: bool = False) -> None:
    """Heads that attend to the previous or the next token from step 0, with nothing but initial values.

    The first D dimensions of the position table (D = head size) get a sinusoid code with D/2 frequencies, and the
    word embeddings are zero there, so those dimensions of the embedding output say where a token is and nothing
    else. A local head's query reads them as they are; its key reads them rotated by each frequency's angle, which
    turns the code of position j into the code of j + 1 (or j - 1): the query at i matches the key at i - 1 (or
    i + 1). On BERT-mini (position_scale 4), 86% of such a head's attention goes to its neighbour at step 0, against
    1.6% for BERT's normal(0, 0.02) init; the words keep about the share of the embedding they have there.
    """
    config = model.config
    d = config.hidden_size // config.num_attention_heads
    if not 0 < heads <= config.num_attention_heads or d % 2:
        raise ValueError(f"local_heads must be between 1 and {config.num_attention_heads} (heads per layer)")
    rates = LOCAL_BASE ** (-torch.arange(d // 2, dtype=torch.float32) / (d // 2))  # (D/2,) radians per position
    angles = torch.arange(config.max_position_embeddings, dtype=torch.float32)[:, None] * rates  # (P, D/2)
    embeddings = model.bert.embeddings
    embeddings.position_embeddings.weight.zero_()
    embeddings.position_embeddings.weight[:, 0:d:2] = torch.sin(angles) * config.initializer_range * position_scale
    embeddings.position_embeddings.weight[:, 1:d:2] = torch.cos(angles) * config.initializer_range * position_scale
    embeddings.word_embeddings.weight[:, :d] = 0.0
    if global_cls:  # [CLS] (position 0) gets no code and segments stay out of it: its query matches every key alike
        embeddings.position_embeddings.weight[0, :d] = 0.0
        embeddings.token_type_embeddings.weight[:, :d] = 0.0
    read = torch.zeros(d, config.hidden_size)
    read[:, :d] = torch.eye(d) * LOCAL_SHARPNESS  # (D, H): the position code, nothing else
    for layer in model.bert.encoder.layer:
        attention = layer.attention.self
        for head in range(heads):
            rows = slice(head * d, (head + 1) * d)
            shift = 1 if head % 2 == 0 else -1  # key j looks like position j + shift: the query at j + shift finds it
            attention.query.weight[rows] = read
            attention.key.weight[rows] = _rotation(rates * shift) @ read
            attention.query.bias[rows] = 0.0
            attention.key.bias[rows] = 0.0


def _rotation(angles: torch.Tensor) -> torch.Tensor:
    """Block-diagonal (2K, 2K): maps (sin a, cos a) to (sin(a + t), cos(a + t)) for each pair k and angle t_k."""
    c, s = torch.cos(angles), torch.sin(angles)
    blocks = [torch.tensor([[ck, sk], [-sk, ck]]) for ck, sk in zip(c.tolist(), s.tolist())]
    return torch.block_diag(*blocks)


def set_dropout(model: BertForPreTraining, p: float) -> None:
    """Change a built model's hidden and attention dropout (a run continuing a checkpoint with its own recipe)."""
    model.config = replace(model.config, hidden_dropout_prob=p, attention_probs_dropout_prob=p)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
        if hasattr(module, "dropout_prob"):  # the fused attention path reads its rate from here
            module.dropout_prob = p


def unigram_log_probs(counts: torch.Tensor) -> torch.Tensor:
    """log p(token) from the training text's token counts (`pairs.token_counts`), with add-one
    smoothing: a token never seen is rare, not impossible. Shape (vocab_size,)."""
    smoothed = counts.double() + 1
    return (smoothed / smoothed.sum()).log().float()


def sinusoids(positions: int, width: int) -> torch.Tensor:
    """Vaswani et al. 2017 §3.5: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...). Shape (positions, width)."""
    position = torch.arange(positions, dtype=torch.float32)[:, None]  # (P, 1)
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))  # (W/2,)
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: width // 2])
    return table


def lr_multiplier(step: int, warmup: int, total: int, shape: str = "linear") -> float:
    """Multiplier of the peak learning rate at `step` (0-based) of a `total`-step run.

    - linear: BERT's schedule, a linear warm-up to 1 over `warmup` steps, then a linear decay to 0.
    - triangle: a one-cycle schedule (Smith 2018; cramming's "budget-triangle"): from 0.25 up to 1 at `warmup`,
      then down to 0 at the end. It spends more of a short budget near the peak than a short warm-up would.
    """
    if shape == "linear":
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))
    if shape == "triangle":
        if step < warmup:
            return 0.25 + 0.75 * step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    raise ValueError(f"unknown learning-rate schedule {shape!r}: choose one of {', '.join(SCHEDULES)}")


def optimizer_and_schedule(model: torch.nn.Module, cfg: RunConfig, total: Callable[[], int], done: int = 0,
                           resume: Path | None = None,
                           ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW or LAMB (`make_optimizer`), carrying on with the moments a resumed run saved in `resume`, and the schedule
    (`lr_multiplier` over `total()` steps, the run's length, which a time budget sets once it knows its pace;
    warm-up 10% of them unless given) picked up at step `done`, not restarted.

    A resumed run whose folder holds no moments (a checkpoint sent back from a GPU without them, where they would not
    fit) starts AdamW afresh, and warms up again over the run's warm-up steps: the first steps of a fresh AdamW move
    every weight by about the learning rate whatever its gradient, which at the schedule's rate would undo some of
    what the run learned."""
    optimizer = make_optimizer(model, cfg)
    restarted = False
    if resume is not None:
        if (resume / OPTIMIZER_NAME).is_file():
            device = str(next(model.parameters()).device)
            load_optimizer_tensors(optimizer, load_file(str(resume / OPTIMIZER_NAME), device=device))
        else:
            restarted = done > 0
    warmup = lambda: cfg.warmup_steps if cfg.warmup_steps is not None else total() // 10  # noqa: E731
    rewarm = warmup() if restarted else 0
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step + done, warmup(), total(), cfg.schedule)
        * min(1.0, (step + 1) / (rewarm + 1)))
    return optimizer, schedule


def make_optimizer(model: BertForPreTraining, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW (or LAMB, `cfg.optimizer`) with weight decay on matrices only: LayerNorm weights, biases (1-D tensors)
    are not decayed.

    With a `layer_decay` below 1 (fine-tuning's setting), each depth is a group of its own with a smaller peak rate
    the lower it sits (Howard & Ruder 2018; ELECTRA, Clark et al. 2020): the heads (pooler, classifier) at `lr`,
    encoder layer l of L (0 the lowest) at lr * decay^(L - l), the embeddings at lr * decay^(L + 1). The schedule
    (LambdaLR) multiplies each group's own peak, and the first group is the heads', whose rate the run logs."""
    decay_rate = getattr(cfg, "layer_decay", 1.0)
    layers = model.config.num_hidden_layers
    groups: dict[tuple[int, bool], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            depth = _depth(name, layers) if decay_rate != 1.0 else 0  # steps below the heads
            groups.setdefault((depth, param.dim() >= 2), []).append(param)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0], not item[0][1]))  # the heads' matrices first
    param_groups = [{"params": params, "weight_decay": cfg.weight_decay if matrix else 0.0,
                     "lr": cfg.lr * decay_rate ** depth} for (depth, matrix), params in ordered]
    if cfg.optimizer == "lamb":
        return Lamb(param_groups, lr=cfg.lr, betas=(BETA1, cfg.beta2), eps=cfg.adam_eps)
    return torch.optim.AdamW(param_groups, lr=cfg.lr, betas=(BETA1, cfg.beta2), eps=cfg.adam_eps,
                             fused=True)  # one kernel per step


def _depth(name: str, layers: int) -> int:
    """How many steps of layer-wise decay a parameter sits below the heads: 0 for the pooler, the classifier and
    the pre-training heads, L - l for encoder layer l, L + 1 for the embeddings."""
    if ".embeddings." in f".{name}":
        return layers + 1
    marker = "encoder.layer."
    if marker in name:
        return layers - int(name.split(marker)[1].split(".")[0])
    return 0


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, Tensor]:
    """AdamW's per-parameter state as flat named tensors, storable in safetensors (no pickle)."""
    return {f"{index}.{name}": torch.as_tensor(value).detach().cpu().contiguous()
            for index, state in optimizer.state_dict()["state"].items() for name, value in state.items()}


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor]) -> None:
    """Inverse of `optimizer_tensors`; the hyper-parameters stay those of the current run."""
    state: dict[int, dict[str, Tensor]] = defaultdict(dict)
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state[int(index)][name] = value
    saved = optimizer.state_dict()
    optimizer.load_state_dict({"state": dict(state), "param_groups": saved["param_groups"]})
