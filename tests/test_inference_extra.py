"""Attention rollout and the display helpers added to the inference backend."""
from __future__ import annotations

import pytest
import torch

from bert_demo.config import PRESETS
from bert_demo.inference import attention, attention_rollout, drop_tokens, fill_in_masks, fill_mask
from bert_demo.model import BertForPreTraining


@pytest.fixture(scope="module")
def tiny(tokenizer):
    """An untrained tiny BERT: these properties hold for any weights."""
    torch.manual_seed(0)
    return BertForPreTraining(PRESETS["tiny"].with_vocab(len(tokenizer))).eval()


def random_attention(layers=3, heads=2, tokens=5, seed=0):
    torch.manual_seed(seed)
    return torch.randn(layers, heads, tokens, tokens).softmax(dim=-1)


def test_rollout_rows_sum_to_one_at_every_depth():
    rollout = attention_rollout(random_attention())
    assert rollout.shape == (3, 5, 5)
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(3, 5))
    assert (rollout >= 0).all()


def test_rollout_matches_the_definition():
    weights = random_attention()
    eye = torch.eye(5)
    a = [(w.mean(0) + eye) / (w.mean(0) + eye).sum(-1, keepdim=True) for w in weights]
    rollout = attention_rollout(weights)
    torch.testing.assert_close(rollout[0], a[0])
    torch.testing.assert_close(rollout[1], a[1] @ a[0])
    torch.testing.assert_close(rollout[2], a[2] @ a[1] @ a[0])


def test_rollout_of_self_attention_is_identity_and_of_uniform_is_uniform():
    eye = torch.eye(4).expand(2, 3, 4, 4)
    torch.testing.assert_close(attention_rollout(eye)[-1], torch.eye(4))
    uniform = torch.full((1, 2, 4, 4), 0.25)
    torch.testing.assert_close(attention_rollout(uniform)[0], 0.5 * torch.eye(4) + 0.125)


def test_rollout_refuses_wrong_shapes():
    with pytest.raises(ValueError, match="layers, heads"):
        attention_rollout(torch.rand(2, 3, 4))


def test_rollout_of_a_real_model(tiny, tokenizer):
    tokens, weights = attention(tiny, tokenizer, "the cat sat on the mat.", "the dog sat on the rug.")
    rollout = attention_rollout(weights)
    assert rollout.shape == (weights.shape[0], len(tokens), len(tokens))
    torch.testing.assert_close(rollout.sum(-1), torch.ones(weights.shape[0], len(tokens)))


def test_drop_tokens_removes_cls_sep_and_renormalises():
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    weights = random_attention(2, 2, 4)
    kept_tokens, kept = drop_tokens(tokens, weights)
    assert kept_tokens == ["a", "b"]
    assert kept.shape == (2, 2, 2, 2)
    torch.testing.assert_close(kept.sum(-1), torch.ones(2, 2, 2))
    raw = drop_tokens(tokens, weights, renormalise=False)[1]
    torch.testing.assert_close(raw, weights[..., 1:3, 1:3])
    with pytest.raises(ValueError, match="no tokens"):
        drop_tokens(["[CLS]", "[SEP]"], random_attention(1, 1, 2))


def test_fill_in_masks_replaces_each_mask_with_its_best_guess():
    spans = fill_in_masks("paris is the [MASK] of [mask].", [[("capital", 0.61), ("city", 0.1)], [("france", 0.9)]])
    assert spans == [("paris is the ", None), ("capital", "61%"), (" of ", None), ("france", "90%"), (".", None)]
    with pytest.raises(ValueError, match="predictions"):
        fill_in_masks("no mask here", [[("x", 1.0)]])


def test_fill_in_masks_agrees_with_fill_mask(tiny, tokenizer):
    text = "the [MASK] sat on the [MASK]."
    spans = fill_in_masks(text, fill_mask(tiny, tokenizer, text, top_k=3))
    assert [label is not None for _, label in spans] == [False, True, False, True, False]
