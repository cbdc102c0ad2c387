"""LAMB: Adam's step where a tensor is not decayed, and each decayed matrix moved by the learning rate times its own
norm; saved and resumed as AdamW is."""
from __future__ import annotations

import torch

from bert_demo.config import PRESETS
from bert_demo.model import BertForPreTraining
from bert_demo.training.lamb import Lamb, trust_ratio
from bert_demo.training.recipe import load_optimizer_tensors, make_optimizer, optimizer_tensors
from bert_demo.training.settings import TrainConfig


def grads(*weights: torch.Tensor, seed: int) -> None:
    """A gradient for each weight, drawn in turn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    for weight in weights:
        weight.grad = torch.randn(weight.shape, generator=generator)


def test_a_tensor_without_weight_decay_takes_adams_step_exactly():
    start = torch.randn(5, generator=torch.Generator().manual_seed(0))
    ours, theirs = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    lamb = Lamb([{"params": [ours], "weight_decay": 0.0}], lr=0.01, betas=(0.9, 0.98), eps=1e-8)
    adam = torch.optim.Adam([theirs], lr=0.01, betas=(0.9, 0.98), eps=1e-8)
    for seed in range(4):
        grads(ours, seed=seed)
        theirs.grad = ours.grad.clone()
        lamb.step()
        adam.step()
        torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=0)


def test_each_decayed_matrix_moves_by_the_learning_rate_times_its_own_norm():
    big = torch.nn.Parameter(torch.randn(8, 4, generator=torch.Generator().manual_seed(1)) * 10)
    small = torch.nn.Parameter(torch.randn(8, 4, generator=torch.Generator().manual_seed(2)) * 0.1)
    lamb = Lamb([{"params": [big, small], "weight_decay": 0.01}], lr=0.05)
    for seed in range(3):
        before = [big.detach().clone(), small.detach().clone()]
        grads(big, small, seed=seed)
        lamb.step()
        for weight, old in zip((big, small), before):
            assert abs(float((weight - old).norm() / old.norm()) - 0.05) < 1e-5


def test_a_zero_weight_or_a_zero_step_keeps_a_trust_ratio_of_one():
    assert float(trust_ratio(torch.zeros(3), torch.ones(3))) == 1.0
    assert float(trust_ratio(torch.ones(3), torch.zeros(3))) == 1.0
    assert float(trust_ratio(torch.full((4,), 2.0), torch.ones(4))) == 2.0


def test_a_run_told_lamb_makes_lamb_and_its_saved_state_resumes_the_same_next_step():
    torch.manual_seed(0)
    model = BertForPreTraining(PRESETS["tiny"])
    config = TrainConfig(optimizer="lamb", lr=1e-2)
    first = make_optimizer(model, config)
    assert isinstance(first, Lamb) and isinstance(make_optimizer(model, TrainConfig()), torch.optim.AdamW)
    weights = list(model.parameters())
    grads(*weights, seed=0)
    first.step()
    resumed = make_optimizer(model, config)
    load_optimizer_tensors(resumed, {name: value.clone() for name, value in optimizer_tensors(first).items()})
    copy = [w.detach().clone() for w in weights]
    grads(*weights, seed=1)
    first.step()
    after_first = [w.detach().clone() for w in weights]
    with torch.no_grad():
        for weight, old in zip(weights, copy):
            weight.copy_(old)
    resumed.step()
    for weight, expected in zip(weights, after_first):
        torch.testing.assert_close(weight.detach(), expected, atol=0, rtol=0)
