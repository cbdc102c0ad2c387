"""A step on a batch is the trainer's: the batch is the drawn example and the next ones of the trainer's stream; its
gradient is autograd's of the trainer's loss, and the examples' parts add up to it; each loss after a step is a fresh
forward pass after torch's AdamW stepped on that gradient; accumulating micro-batches gives the whole batch's
gradient; dropout's draws are what they say; and the model handed in is never written to."""
from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from bert_demo.inspection import pretraining_example
from bert_demo.inspection.batch_step import check_size, draw_batch, dropout_noise, gradient, step_on_batch
from bert_demo.model import IGNORE_INDEX
from bert_demo.training.recipe import set_dropout
from bert_demo.training.settings import LESSON_BATCH

SIZE, SEED = 4, 3


@pytest.fixture(scope="module")
def batch(lesson):
    return draw_batch(lesson.documents, lesson.tokenizer, lesson.recipe, SEED, SIZE)


@pytest.fixture(scope="module")
def stepped(lesson, batch):
    before = {name: t.clone() for name, t in lesson.model.state_dict().items()}
    step = step_on_batch(lesson.model, batch, lesson.recipe)
    assert all(torch.equal(t, before[name]) for name, t in lesson.model.state_dict().items())
    assert all(p.grad is None for p in lesson.model.parameters())
    return step


def _loss(model, batch, recipe, weights=None):
    """The trainer's loss written out: the mean over every picked position of the batch, plus the NSP weight times
    the mean NSP loss over its pairs; or, with `weights` (mlm, nsp), those two weights."""
    out = model(**batch)
    mlm, nsp = weights or (1.0, recipe.nsp_weight)
    return mlm * out.mlm_loss + nsp * out.nsp_loss


def _row(batch, i):
    length = int(batch["attention_mask"][i].sum())
    return {k: v[i:i + 1, :length] if v.dim() == 2 else v[i:i + 1] for k, v in batch.items()}


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_batch_is_the_drawn_example_then_the_next_ones_padded_as_the_collator_pads(lesson, batch):
    example = pretraining_example.draw(lesson.documents, lesson.tokenizer, lesson.recipe, SEED)
    first = _row(batch, 0)
    for name, tensor in example.batch.items():
        assert torch.equal(first[name], tensor), name
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1 or not torch.equal(batch["input_ids"][0], batch["input_ids"][1])
    for i, length in enumerate(lengths.tolist()):
        assert (batch["input_ids"][i, length:] == lesson.tokenizer.pad_token_id).all()
        assert (batch["mlm_labels"][i, length:] == IGNORE_INDEX).all()
        assert (batch["mlm_labels"][i, :length] != IGNORE_INDEX).any()


def test_the_batchs_gradient_is_autograds_of_the_trainers_loss_and_the_parts_add_up_to_it(lesson, batch, stepped):
    own = copy.deepcopy(lesson.model)
    whole = _grads(own, _loss(own, batch, lesson.recipe))
    targets = [int((_row(batch, i)["mlm_labels"] != IGNORE_INDEX).sum()) for i in range(SIZE)]
    assert [e.targets for e in stepped.examples] == targets
    for weight in stepped.weights:
        assert weight.batch == pytest.approx(float(whole[weight.name][weight.index]), rel=1e-4, abs=1e-9)
        assert sum(weight.parts) == pytest.approx(weight.batch, rel=1e-4, abs=1e-9)
    for i in range(SIZE):  # example i's part: its share of the picked positions, and 1/B of the NSP loss
        part = _grads(own, _loss(own, _row(batch, i), lesson.recipe,
                                 (targets[i] / sum(targets), lesson.recipe.nsp_weight / SIZE)))
        for weight in stepped.weights:
            assert weight.parts[i] == pytest.approx(float(part[weight.name][weight.index]), rel=1e-4, abs=1e-9)
    largest = max(float(g.abs().max()) for g in whole.values())
    assert stepped.accumulation.difference < 1e-6 * largest and stepped.accumulation.largest == pytest.approx(largest)
    flat = torch.cat([g.flatten() for g in whole.values()])
    assert stepped.batch_norm == pytest.approx(float(flat.norm()), rel=1e-5)
    for i, example in enumerate(stepped.examples):
        alone = _grads(own, _loss(own, _row(batch, i), lesson.recipe))
        mine = torch.cat([alone[name].flatten() for name in whole])
        assert example.cosine == pytest.approx(float(mine @ flat / (mine.norm() * flat.norm())), abs=1e-5)
        assert example.share == pytest.approx(targets[i] / sum(targets))
        if i == 0:
            assert stepped.alone_norm == pytest.approx(float(mine.norm()), rel=1e-5)


def _after_adamw(model, grads, recipe, rows):
    """Each row's loss after torch's AdamW's first step on `grads`, clipped to the recipe's norm, decay on matrices."""
    own = copy.deepcopy(model)
    for name, p in own.named_parameters():
        p.grad = grads[name].clone()
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    for p in own.parameters():
        p.grad *= min(1.0, recipe.grad_clip / (norm + 1e-6))
    groups = [{"params": [p for p in own.parameters() if p.dim() >= 2], "weight_decay": recipe.weight_decay},
              {"params": [p for p in own.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, recipe.beta2), eps=recipe.adam_eps).step()
    with torch.no_grad():
        return [float(_loss(own, row, recipe)) for row in rows]


def test_each_loss_after_a_step_is_a_fresh_pass_after_torchs_adamw_stepped_on_that_gradient(lesson, batch, stepped):
    own = copy.deepcopy(lesson.model)
    rows = [_row(batch, i) for i in range(SIZE)]
    whole = _grads(own, _loss(own, batch, lesson.recipe))
    first = _grads(own, _loss(own, rows[0], lesson.recipe))
    with torch.no_grad():
        before = [float(_loss(own, row, lesson.recipe)) for row in rows]
    by_batch = _after_adamw(lesson.model, whole, lesson.recipe, rows)
    alone = _after_adamw(lesson.model, first, lesson.recipe, rows)
    for i, example in enumerate(stepped.examples):
        assert example.loss_before == pytest.approx(before[i], abs=1e-5)
        assert example.loss_after_batch == pytest.approx(by_batch[i], abs=1e-5)
        assert example.loss_after_alone == pytest.approx(alone[i], abs=1e-5)
    assert by_batch != alone


def test_micro_batches_of_one_example_weighted_as_the_trainer_weights_them_give_the_batchs_gradient(lesson, batch,
                                                                                                    stepped):
    whole = gradient(lesson.model, batch, lesson.recipe)
    assert stepped.accumulation.micro_batches == SIZE
    assert stepped.accumulation.difference < 1e-6 * stepped.accumulation.largest
    own = copy.deepcopy(lesson.model)  # each micro-batch's own mean loss, summed: not the batch's
    naive = _grads(own, sum(_loss(own, _row(batch, i), lesson.recipe) for i in range(SIZE)) / SIZE)
    assert max(float((naive[n] - whole[n]).abs().max()) for n in whole) > 1e-3 * stepped.accumulation.largest


def test_dropouts_draws_are_the_gradients_under_fresh_masks_against_none(lesson, batch):
    whole = gradient(lesson.model, batch, lesson.recipe)
    torch.manual_seed(11)
    result = dropout_noise(lesson.model, batch, lesson.recipe, whole)
    own = copy.deepcopy(lesson.model)
    set_dropout(own, 0.1)
    own.train()
    torch.manual_seed(11)
    draws = [_grads(own, _loss(own, batch, lesson.recipe)) for _ in result.change]
    flat = [torch.cat([g[name].flatten() for name in whole]) for g in draws]
    none = torch.cat([g.flatten() for g in whole.values()])
    for i, draw in enumerate(flat):
        assert result.change[i] == pytest.approx(float((draw - none).norm() / none.norm()), rel=1e-4)
        assert result.cosine[i] == pytest.approx(float(draw @ none / (draw.norm() * none.norm())), abs=1e-5)
    assert result.between == pytest.approx(float(flat[0] @ flat[1] / (flat[0].norm() * flat[1].norm())), abs=1e-5)
    assert 0 < result.change[0] < 1


@pytest.mark.parametrize("size", [1, LESSON_BATCH + 1, 2.5, True])
def test_a_batch_size_out_of_bounds_is_refused_with_the_bounds(size):
    with pytest.raises(ValueError, match=f"2 to {LESSON_BATCH}"):
        check_size(size)


def test_the_model_handed_in_writes_no_gradient(lesson, batch):
    gradient(lesson.model, batch, lesson.recipe)
    assert all(p.grad is None for p in lesson.model.parameters())
    assert not any(isinstance(m, nn.Dropout) and m.training for m in lesson.model.modules())
