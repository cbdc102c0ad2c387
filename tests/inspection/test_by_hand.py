"""A gradient worked by hand is autograd's: dW = δᵀx for each kind of linear layer (the decoder's own use of the tied
table apart from the lookup's), a softmax row by diag(p) − ppᵀ, a LayerNorm row by its formula; each checked against
a backward pass of the test's own, and the model handed in never written to."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bert_demo.inspection import pretraining_example
from bert_demo.inspection.by_hand import DECODER_PART, LINEAR_PARTS, module_name, work

SEED = 3


@pytest.fixture(scope="module")
def example(lesson):
    return pretraining_example.draw(lesson.documents, lesson.tokenizer, lesson.recipe, SEED)


def _backward(model, batch, recipe):
    out = model(**batch)
    (out.mlm_loss + recipe.nsp_weight * out.nsp_loss).backward()


@pytest.mark.parametrize("part", [*LINEAR_PARTS, DECODER_PART])
def test_a_linear_layers_weight_gradient_by_hand_is_autograds(lesson, example, part):
    layer = 2
    result = work(lesson.model, example.batch, lesson.recipe, part, layer, 3)
    own = copy.deepcopy(lesson.model)
    if part == DECODER_PART:  # the decoder's own weight, untied: its gradient is the decoder's use alone
        own.cls.predictions.decoder.weight = nn.Parameter(own.cls.predictions.decoder.weight.detach().clone())
    _backward(own, example.batch, lesson.recipe)
    name = module_name(part, layer, own.config.num_hidden_layers)
    expected = own.get_submodule(name).weight.grad
    i, j = result.linear.index
    assert (i, j) == tuple(int(k) for k in torch.unravel_index(expected.abs().argmax(), expected.shape))
    assert result.linear.autograd == pytest.approx(float(expected[i, j]), rel=1e-5, abs=1e-12)
    assert result.linear.by_hand == pytest.approx(float(expected[i, j]), rel=1e-4, abs=1e-10)
    rows = len(example.picked) if part == DECODER_PART else len(example.input_ids)
    assert len(result.linear.x) == len(result.linear.delta) == len(result.linear.tokens) == rows
    assert all(p.grad is None for p in lesson.model.parameters())


def test_a_softmax_rows_gradient_by_hand_is_autograds_through_softmax(lesson, example):
    result = work(lesson.model, example.batch, lesson.recipe, "attention V", 2, 3).softmax
    p, dp = torch.tensor(result.p, dtype=torch.float64), torch.tensor(result.dp, dtype=torch.float64)
    scores = p.clamp_min(1e-300).log().requires_grad_()  # any scores whose softmax is p
    (expected,) = torch.autograd.grad(scores.softmax(-1), scores, dp)
    assert result.by_hand == pytest.approx(expected.tolist(), abs=1e-6 * float(expected.abs().max()))  # float32 p
    assert result.autograd == pytest.approx(expected.tolist(), rel=1e-4, abs=1e-9)
    assert result.p_dot_dp == pytest.approx(float(p @ dp))
    assert (result.layer, result.head) == (2, 3)
    own = copy.deepcopy(lesson.model)
    probs = own(**example.batch, output_attentions=True).attentions[1][0, 2, result.query]
    assert result.p == pytest.approx(probs.tolist(), abs=1e-6)


def test_a_layer_norm_rows_gradient_by_hand_is_autograds_through_layer_norm(lesson, example):
    result = work(lesson.model, example.batch, lesson.recipe, "attention Q", 1, 1).layer_norm
    module = lesson.model.get_submodule(result.module)
    assert result.module == "bert.encoder.layer.0.attention.output.LayerNorm"
    seen = {}
    own = copy.deepcopy(lesson.model)
    own_handle = own.get_submodule(result.module).register_forward_hook(
        lambda m, inputs, output: seen.update(x=inputs[0][0, result.token].detach()))
    own(**example.batch)
    own_handle.remove()
    x = seen["x"].double().requires_grad_()
    y = F.layer_norm(x, x.shape, module.weight.detach().double(), module.bias.detach().double(), module.eps)
    (expected,) = torch.autograd.grad(y, x, torch.tensor(result.dy, dtype=torch.float64))
    assert result.by_hand == pytest.approx(expected.tolist(), abs=1e-9)
    assert result.autograd == pytest.approx(expected.tolist(), rel=1e-4, abs=1e-9)
    assert sum(result.by_hand) == pytest.approx(0, abs=1e-9)  # its mean removed
    assert result.sigma == pytest.approx(float((x.detach().var(unbiased=False) + module.eps).sqrt()), rel=1e-6)


@pytest.mark.parametrize("part, layer, head, message", [
    ("attention Z", 1, 1, "attention Q"), ("attention Q", 4, 1, "1 to 3"), ("attention Q", 0, 1, "1 to 3"),
    ("attention Q", 1, 5, "1 to 4")])
def test_a_layer_part_or_head_out_of_the_model_is_refused_with_what_it_has(lesson, example, part, layer, head,
                                                                           message):
    with pytest.raises(ValueError, match=message):
        work(lesson.model, example.batch, lesson.recipe, part, layer, head)
