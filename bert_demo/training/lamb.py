"""LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2):
Adam's step with decoupled weight decay, rescaled tensor by tensor so that it moves each weight matrix by the
learning rate times the matrix's own norm (the "trust ratio"). GPT-BERT (Charpentier & Samuel 2024), a BabyLM winner
at our scale, pre-trained with it at a peak rate of 1.4e-2."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


class Lamb(torch.optim.Optimizer):
    """LAMB with AdamW's hyper-parameters and state (`step`, `exp_avg`, `exp_avg_sq`), so that a run saves and
    resumes it as it does AdamW (`recipe.optimizer_tensors`). The trust ratio rescales the tensors that are decayed
    (the matrices, as in timm's LAMB); biases and LayerNorm weights take Adam's step as it is. A tensor or a step of
    norm zero (a bias at its start) keeps a ratio of 1."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for weight in group["params"]:
                if weight.grad is not None:
                    update = self._adam_step(weight, beta1, beta2, group["eps"])
                    if group["weight_decay"]:
                        update.add_(weight, alpha=group["weight_decay"])
                        update.mul_(trust_ratio(weight, update))
                    weight.sub_(update, alpha=group["lr"])

    def _adam_step(self, weight: Tensor, beta1: float, beta2: float, eps: float) -> Tensor:
        """Adam's bias-corrected step for `weight` (its moments updated in place), before the learning rate."""
        state = self.state[weight]
        if not state:
            state.update(step=torch.zeros(()), exp_avg=torch.zeros_like(weight), exp_avg_sq=torch.zeros_like(weight))
        state["step"] += 1
        steps = float(state["step"])
        grad, mean, square = weight.grad, state["exp_avg"], state["exp_avg_sq"]
        mean.lerp_(grad, 1 - beta1)
        square.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        return (mean / (1 - beta1 ** steps)) / (square / (1 - beta2 ** steps)).sqrt_().add_(eps)


def trust_ratio(weight: Tensor, update: Tensor) -> Tensor:
    """‖weight‖ / ‖update‖, or 1 where either is zero."""
    weights, updates = weight.norm(), update.norm()
    return torch.where((weights > 0) & (updates > 0), weights / updates, torch.ones_like(weights))
