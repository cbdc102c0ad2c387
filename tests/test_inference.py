"""fill_mask, next_sentence and attention give well-formed answers and clear errors for bad input; attention rollout
and the display helpers (masks filled in, special tokens dropped) keep what they promise."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from bert_demo.inference import (
    MAX_MASKS,
    attention,
    fill_in_masks,
    fill_mask,
    next_sentence,
    segments,
)
from bert_demo.inspection.heads import attention_rollout, drop_tokens, query_key


def test_fill_mask_returns_one_ranked_list_per_mask_left_to_right(trained_tiny, tokenizer):
    result = fill_mask(trained_tiny, tokenizer, "the [MASK] sat on the [MASK].", top_k=3)
    assert len(result) == 2 and all(len(r) == 3 for r in result)
    for ranked in result:
        probs = [p for _, p in ranked]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    alone = fill_mask(trained_tiny, tokenizer, "the [MASK] sat on the mat.", top_k=3)[0]
    assert [t for t, _ in alone][0] in {"cat", "dog"}


def test_fill_mask_accepts_lower_case_and_glued_masks(trained_tiny, tokenizer):
    upper = fill_mask(trained_tiny, tokenizer, "paris is the [MASK] of france.")
    assert fill_mask(trained_tiny, tokenizer, "paris is the [mask] of france.") == upper
    assert fill_mask(trained_tiny, tokenizer, "paris is the[MASK]of france.") == upper


def test_asking_a_model_in_training_mode_never_switches_its_mode_and_answers_without_dropout(trained_tiny,
                                                                                               tokenizer):
    """Another thread reading the model's mode while it is asked 20 times sees training mode every time (a switch
    to eval and back would reach every other pass through a shared model), and the answers are eval mode's."""
    text, modes, done = "the [MASK] sat on the mat.", set(), threading.Event()
    in_eval = fill_mask(trained_tiny, tokenizer, text)
    trained_tiny.train()

    def watch() -> None:
        while not done.is_set():
            modes.update(module.training for module in trained_tiny.modules())
            time.sleep(0.0002)  # a switch would last a whole pass (milliseconds): the asks need the lock too

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        answers = [fill_mask(trained_tiny, tokenizer, text) for _ in range(20)]
    finally:
        done.set()
        watcher.join()
        trained_tiny.eval()
    assert modes == {True}
    assert all(answer == in_eval for answer in answers)


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("   \n", "empty"),
    ("the cat sat on the mat.", "no \\[MASK\\]"),
    ("[CLS] [SEP]", "no \\[MASK\\]"),
    (" ".join(["[MASK]"] * (MAX_MASKS + 1)), f"at most {MAX_MASKS}"),
    ("word " * 600 + "[MASK]", "takes at most 512"),
    ("x" * 10_000 + "[MASK]", "characters"),
    (None, "must be text"),
])
def test_fill_mask_bad_input_raises_clear_value_error(trained_tiny, tokenizer, text, message):
    with pytest.raises(ValueError, match=message):
        fill_mask(trained_tiny, tokenizer, text)


@pytest.mark.parametrize("text", [
    "the 🐈 sat on the [MASK]. 🎉",
    "שלום [MASK] مرحبا بالعالم",
    "the\x00 cat\x07 sat\t on the [MASK]\r\n",
    "[CLS] [SEP] [MASK] [PAD]",
    "[MASK]",
])
def test_fill_mask_answers_emoji_right_to_left_control_characters_and_special_tokens(trained_tiny, tokenizer, text):
    result = fill_mask(trained_tiny, tokenizer, text, top_k=3)
    assert len(result) == 1 and len(result[0]) == 3 and 0 < sum(p for _, p in result[0]) <= 1 + 1e-6


def test_fifty_masks_are_refused_with_the_limit(trained_tiny, tokenizer):
    with pytest.raises(ValueError, match=f"50 \\[MASK\\] tokens; at most {MAX_MASKS}"):
        fill_mask(trained_tiny, tokenizer, "word [MASK] " * 50)


@pytest.mark.parametrize("top_k", [0, -1, 51, 2.5, True])
def test_fill_mask_rejects_bad_top_k(trained_tiny, tokenizer, top_k):
    with pytest.raises(ValueError, match="top_k"):
        fill_mask(trained_tiny, tokenizer, "the [MASK] sat.", top_k=top_k)


def test_next_sentence_is_a_probability_matching_the_nsp_logits(trained_tiny, tokenizer):
    p = next_sentence(trained_tiny, tokenizer, "the cat sat on the mat.", "the dog sat on the rug.")
    batch = tokenizer("the cat sat on the mat.", "the dog sat on the rug.", return_tensors="pt")
    with torch.no_grad():
        expected = trained_tiny(**batch).nsp_logits.softmax(-1)[0, 0].item()
    assert 0.0 <= p <= 1.0 and p == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("a, b", [("", "text"), ("text", ""), ("text", "  ")])
def test_next_sentence_with_an_empty_side_is_refused(trained_tiny, tokenizer, a, b):
    with pytest.raises(ValueError, match="empty"):
        next_sentence(trained_tiny, tokenizer, a, b)


def test_attention_returns_tokens_and_weights_per_layer_and_head(trained_tiny, tokenizer):
    """(Rows summing to one, on any text: test_inference_properties.py.)"""
    tokens, weights = attention(trained_tiny, tokenizer, "the cat sat.", "the dog sat.")
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    config = trained_tiny.config
    assert weights.shape == (config.num_hidden_layers, config.num_attention_heads, len(tokens), len(tokens))


def test_query_key_weights_are_the_heads_attention_row_made_from_query_and_keys(trained_tiny, tokenizer):
    tokens, weights = attention(trained_tiny, tokenizer, "the cat sat.", "it purred.")
    made = query_key(trained_tiny, tokenizer, "the cat sat.", "it purred.", layer=2, head=2, position=3)
    assert made.tokens == tokens and made.keys.shape == (len(tokens), made.query.shape[0])
    assert torch.allclose(made.weights, weights[1, 1, 3], atol=1e-5)
    assert torch.allclose(made.scores, made.keys @ made.query / made.query.shape[0] ** 0.5)


@pytest.mark.parametrize("layer, head, position, message", [
    (0, 1, 1, "layer must be a whole number from 1 to 3"), (4, 1, 1, "layer must be a whole number from 1 to 3"),
    (1, 5, 1, "head must be a whole number from 1 to 4"),
    (1, 1, 99, "one of the 6 tokens"), (1.5, 1, 1, "layer must be"), (1, 1, -1, "one of the 6 tokens")])
def test_query_key_refuses_a_layer_head_or_token_that_is_not_there(trained_tiny, tokenizer, layer, head, position,
                                                                    message):
    with pytest.raises(ValueError, match=message):
        query_key(trained_tiny, tokenizer, "the cat sat.", None, layer, head, position)


def test_segments_follow_the_models_segment_ids_even_with_a_sep_typed_inside_sentence_a(trained_tiny, tokenizer):
    tokens, _ = attention(trained_tiny, tokenizer, "the cat [SEP] sat.", "the dog sat.")
    assert tokens.count("[SEP]") == 3  # the typed one is a real [SEP] token
    assert segments(tokenizer, "the cat [SEP] sat.", "the dog sat.") == ["A"] * 7 + ["B"] * 5
    assert len(segments(tokenizer, "the cat [SEP] sat.", "the dog sat.")) == len(tokens)
    assert set(segments(tokenizer, "paris is the capital of france.")) == {"A"}


def test_attention_of_a_single_sentence_and_too_long_input(trained_tiny, tokenizer):
    tokens, _ = attention(trained_tiny, tokenizer, "paris is the capital of france.")
    assert tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 1
    with pytest.raises(ValueError, match="shorten it"):
        attention(trained_tiny, tokenizer, "word " * 600)


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


def test_fill_in_masks_agrees_with_fill_mask(trained_tiny, tokenizer):
    text = "the [MASK] sat on the [MASK]."
    spans = fill_in_masks(text, fill_mask(trained_tiny, tokenizer, text, top_k=3))
    assert [label is not None for _, label in spans] == [False, True, False, True, False]

