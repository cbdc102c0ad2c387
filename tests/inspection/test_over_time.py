"""A short run is the trainer's: its rates are BERT's schedule written out, its moves and moments torch's AdamW's on
the trainer's batches, and SGD's moves beside them torch.optim.SGD's on the same gradients and rates."""
from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from bert_demo.data.pairs import SpecialIds
from bert_demo.inspection import over_time
from bert_demo.inspection.pretraining_example import tokenized
from bert_demo.training.pretraining import sentence_pairs
from bert_demo.training.settings import LESSON_RUN_EXAMPLES

STEPS, BATCH, SEED = 6, 3, 5


@pytest.fixture(scope="module")
def run(lesson):
    before = {name: t.clone() for name, t in lesson.model.state_dict().items()}
    result = over_time.run(lesson.model, lesson.documents, lesson.tokenizer, lesson.recipe, SEED, STEPS, BATCH)
    assert all(torch.equal(t, before[name]) for name, t in lesson.model.state_dict().items())
    return result


def _schedule(step: int, warmup: int, total: int) -> float:
    """BERT's: a linear warm-up to the peak, then a linear decay to 0 (step from 0)."""
    return (step + 1) / (warmup + 1) if step < warmup else (total - step) / (total - warmup)


def test_the_moves_and_moments_are_torchs_adamw_on_the_trainers_batches_under_berts_schedule(lesson, run):
    recipe = replace(lesson.recipe, batch_size=BATCH)
    data = sentence_pairs(recipe, tokenized(lesson.documents, lesson.tokenizer),
                          SpecialIds.from_tokenizer(lesson.tokenizer), SEED, BATCH, first_step=0)
    own = copy.deepcopy(lesson.model)
    groups = [{"params": [p for p in own.parameters() if p.dim() >= 2], "weight_decay": recipe.weight_decay},
              {"params": [p for p in own.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    adamw = torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, recipe.beta2), eps=recipe.adam_eps)
    warmup = max(1, STEPS // 5)
    assert run.warmup == warmup
    for t, batch in zip(range(STEPS), data.shard_batches(0, 1)):
        rate = recipe.lr * _schedule(t, warmup, STEPS)
        assert run.rates[t] == pytest.approx(rate, rel=1e-9)
        for group in adamw.param_groups:
            group["lr"] = rate
        adamw.zero_grad()
        out = own(**batch)
        loss = out.mlm_loss + recipe.nsp_weight * out.nsp_loss
        loss.backward()
        assert run.losses[t] == pytest.approx(float(loss.detach()), abs=1e-5)
        norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in own.parameters()))
        assert run.grad_norms[t] == pytest.approx(norm, rel=1e-5)
        for p in own.parameters():
            p.grad *= min(1.0, recipe.grad_clip / (norm + 1e-6))
        before = {trace.name: own.get_parameter(trace.name).detach().clone() for trace in run.traces}
        adamw.step()
        for trace in run.traces:
            p = own.get_parameter(trace.name)
            state = adamw.state[p]
            assert trace.gradient[t] == pytest.approx(float(p.grad[trace.index]), rel=1e-4, abs=1e-12)
            assert trace.m[t] == pytest.approx(float(state["exp_avg"][trace.index]), rel=1e-4, abs=1e-12)
            assert trace.v[t] == pytest.approx(float(state["exp_avg_sq"][trace.index]), rel=1e-4, abs=1e-20)
            assert trace.m_hat[t] == pytest.approx(trace.m[t] / (1 - 0.9 ** (t + 1)), rel=1e-9)
            move = float(p.detach()[trace.index] - before[trace.name][trace.index])
            assert trace.move[t] == pytest.approx(move, rel=1e-3, abs=1e-9)


@pytest.mark.parametrize("momentum", [0.0, over_time.MOMENTUM])
def test_sgds_moves_are_torchs_sgd_on_the_same_gradients_and_rates(run, momentum):
    for trace in run.traces:
        weight = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        sgd = torch.optim.SGD([weight], lr=1.0, momentum=momentum)
        shown = trace.sgd_momentum if momentum else trace.sgd
        for t, (gradient, rate) in enumerate(zip(trace.gradient, run.rates)):
            sgd.param_groups[0]["lr"] = rate
            was = float(weight)
            weight.grad = torch.tensor([gradient], dtype=torch.float64)
            sgd.step()
            assert shown[t] == pytest.approx(float(weight) - was, rel=1e-9, abs=1e-30), (trace.name, t)


def test_the_traced_weights_include_a_large_gradient_and_one_clipping_put_under_epsilon(lesson):
    papers = replace(lesson.recipe, adam_eps=1e-6, grad_clip=0.01)
    run = over_time.run(lesson.model, lesson.documents, lesson.tokenizer, papers, SEED, 2, BATCH)
    first = [abs(trace.gradient[0]) for trace in run.traces]
    assert first[0] > 4e-6 and min(first) < 1e-6
    assert abs(run.traces[0].move[0]) > abs(run.traces[-1].move[0])  # Adam's first step: lr·g/(|g| + ε)


@pytest.mark.parametrize("steps, batch, message", [(0, 2, "steps"), (21, 1, "steps"), (2, 9, "examples"),
                                                   (20, 8, f"at most {LESSON_RUN_EXAMPLES}")])
def test_a_run_past_its_bounds_is_refused_with_them(lesson, steps, batch, message):
    with pytest.raises(ValueError, match=message):
        over_time.run(lesson.model, lesson.documents, lesson.tokenizer, lesson.recipe, SEED, steps, batch)
