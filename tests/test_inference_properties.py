"""Whatever text arrives, the backend answers with a well-formed result or a ValueError, quickly (hypothesis)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_demo.config import PRESETS
from bert_demo.inference import attention, fill_mask, next_sentence
from bert_demo.model import BertForPreTraining

FAST = settings(max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
# any unicode (emoji, right-to-left scripts, control characters, NUL), with [MASK]s and BERT's other specials mixed in
TEXT = st.lists(st.one_of(st.text(max_size=40), st.sampled_from(["[MASK]", "[mask]", "[ MASK ]", "[CLS]", "[SEP]",
                                                                 "[PAD]", "\x00", "مرحبا", "🙂", " "])),
                max_size=12).map("".join)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return BertForPreTraining(PRESETS["tiny"].with_vocab(len(tokenizer))).eval()


@FAST
@given(text=TEXT, top_k=st.integers(min_value=-3, max_value=60))
def test_fill_mask_returns_ranked_probabilities_or_a_value_error(model, tokenizer, text, top_k):
    try:
        result = fill_mask(model, tokenizer, text, top_k=top_k)
    except ValueError as exc:
        assert str(exc)
        return
    assert 1 <= len(result) <= 20
    for guesses in result:
        probabilities = [p for _, p in guesses]
        assert len(guesses) == top_k and probabilities == sorted(probabilities, reverse=True)
        assert all(0.0 <= p <= 1.0 for p in probabilities) and all(isinstance(t, str) for t, _ in guesses)


@FAST
@given(text_a=TEXT, text_b=TEXT)
def test_next_sentence_returns_a_probability_or_a_value_error(model, tokenizer, text_a, text_b):
    try:
        p = next_sentence(model, tokenizer, text_a, text_b)
    except ValueError as exc:
        assert str(exc)
        return
    assert 0.0 <= p <= 1.0


@FAST
@given(text_a=TEXT, text_b=st.one_of(st.none(), TEXT))
def test_attention_rows_sum_to_one_or_a_value_error(model, tokenizer, text_a, text_b):
    try:
        tokens, weights = attention(model, tokenizer, text_a, text_b)
    except ValueError as exc:
        assert str(exc)
        return
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert weights.shape == (layers, heads, len(tokens), len(tokens))
    assert torch.allclose(weights.sum(-1), torch.ones(layers, heads, len(tokens)), atol=1e-5)


ANSWERED = ["the [MASK] sat.", "[mask] 🙂", "مرحبا [MASK] مرحبا", "a\x00[MASK]", "[CLS] [MASK] [SEP]",
            "x" * 300 + " [MASK]"]


@pytest.mark.parametrize("text", ANSWERED)
def test_inputs_with_a_mask_within_the_limits_are_answered_not_refused(model, tokenizer, text):
    """The properties above accept a ValueError for any input; these must get an answer from all three."""
    assert len(fill_mask(model, tokenizer, text, top_k=3)) == 1
    assert 0.0 <= next_sentence(model, tokenizer, text, text) <= 1.0
    tokens, _ = attention(model, tokenizer, text)
    assert "[MASK]" in tokens
