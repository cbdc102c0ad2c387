"""bert_demo/training/divergence.py: a step whose gradients are not finite is skipped on the device and read late, so
that no step waits for the GPU, and the weights stay those of the step before it."""
from __future__ import annotations

import torch

from bert_demo.training.divergence import Divergence


def _steps_with_a_bad_one(divergence: Divergence, optimizer: torch.optim.Optimizer, weight: torch.nn.Parameter,
                          bad: int, steps: int) -> list:
    """`steps` optimizer steps of a one-weight model whose gradient at step `bad` is NaN; what `found` said after
    each, and the weight after each."""
    said, weights = [], []
    for step in range(1, steps + 1):
        weight.grad = torch.full_like(weight, float("nan") if step == bad else 1.0)
        norm = torch.nn.utils.clip_grad_norm_([weight], 1.0)
        if divergence.guard(optimizer, norm, torch.tensor(float(step)), step):
            optimizer.step()
        said.append(divergence.found(step))
        weights.append(weight.detach().clone())
    return said, weights


def test_a_bad_step_read_late_leaves_fused_adamw_weights_as_before_it_so_no_step_waits_for_the_gpu():
    weight = torch.nn.Parameter(torch.ones(4))
    optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
    said, weights = _steps_with_a_bad_one(Divergence(torch.device("cpu"), every=5), optimizer, weight, bad=3,
                                          steps=5)
    assert said == [None, None, None, None, (3, 3.0)]  # read on the 5th step only, as a GPU run reads it
    assert all(torch.equal(w, weights[1]) for w in weights[2:])  # steps 3-5 skipped on the device
    assert torch.isfinite(weight).all() and int(optimizer.state[weight]["step"]) == 2


def test_an_optimizer_that_cannot_skip_on_the_device_is_asked_at_once_and_not_stepped():
    weight = torch.nn.Parameter(torch.ones(4))
    said, weights = _steps_with_a_bad_one(Divergence(torch.device("cpu"), every=5),
                                          torch.optim.SGD([weight], lr=0.1), weight, bad=3, steps=3)
    assert said == [None, None, (3, 3.0)] and torch.equal(weights[2], weights[1])
