"""bert_demo/inspection/attribution.py: integrated gradients are complete (they add up to F(input) - F(baseline), within
1% at the default step count), say which word carried a memorised fact, and refuse what they cannot explain."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bert_demo.checkpoint import load_pretrained
from bert_demo.inspection.attribution import (
    MAX_WORK,
    STEPS,
    classification,
    masked_word,
)
from bert_demo.model import BertForSequenceClassification
from tests.conftest import TEST_SHAPE

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "mini-english"


@pytest.fixture(scope="module")
def shipped():
    return load_pretrained(SHIPPED)


def test_attributions_for_a_masked_word_add_up_to_the_change_in_its_probability(shipped):
    model, tokenizer = shipped
    result = masked_word(model, tokenizer, "he was born in new [MASK] city.")
    assert result.target == "york" and result.gap < 0.01, (sum(result.scores), result.output - result.baseline)
    assert result.output - result.baseline > 0.5  # a change worth explaining
    words = dict(zip(result.tokens, result.scores))
    assert words["new"] == max(words.values())  # "new ... city" says "york"
    assert len(result.scores) == len(result.tokens) and result.tokens[0] == "[CLS]"
    assert result.scores[result.tokens.index("[MASK]")] == 0.0  # the frame is the baseline's too: nothing moved


def test_the_model_others_are_asking_at_the_same_time_still_sees_their_words(shipped, monkeypatch):
    """The app answers every visitor with one model object: while an attribution runs, another thread's forward
    pass on that object must get its own words, not the attribution's path between blank and real words."""
    model, tokenizer = shipped
    ids = tokenizer("paris is the capital of france.", return_tensors="pt")["input_ids"]
    expected = model.bert.embeddings.word_embeddings(ids)
    seen = []
    grad = torch.autograd.grad

    def grad_while_someone_else_asks(*args, **kwargs):  # the moment the path is in place
        seen.append(torch.equal(model.bert.embeddings.word_embeddings(ids), expected))
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", grad_while_someone_else_asks)
    masked_word(model, tokenizer, "he was born in new [MASK] city.")
    assert seen and all(seen)
    assert all(p.requires_grad for p in model.parameters())  # and the shared model is left as it was


def test_attributions_for_a_class_add_up_to_the_change_in_its_probability(tokenizer):
    torch.manual_seed(0)
    model = BertForSequenceClassification(replace(TEST_SHAPE.with_vocab(len(tokenizer)),
                                                  labels=("negative", "positive"))).eval()
    torch.nn.init.normal_(model.classifier.weight, std=0.5)
    result = classification(model, tokenizer, "the sun rises in the east.", "the sun sets in the west.")
    assert result.target in ("negative", "positive") and result.gap < 0.01
    chosen = classification(model, tokenizer, "the sun rises in the east.", label="negative")
    assert chosen.target == "negative" and chosen.gap < 0.01


def test_fewer_steps_leave_a_larger_gap_so_the_gap_measures_the_sum_not_a_constant(shipped):
    model, tokenizer = shipped
    coarse = masked_word(model, tokenizer, "she poured the [MASK] into a cup.", steps=2)
    fine = masked_word(model, tokenizer, "she poured the [MASK] into a cup.", steps=STEPS)
    assert fine.gap < coarse.gap


def test_what_attribution_cannot_explain_is_refused_with_a_message(shipped, tokenizer):
    model, tok = shipped
    with pytest.raises(ValueError, match="'zzqx' is not one token of this model's vocabulary"):
        masked_word(model, tok, "the capital of france is [MASK].", word="zzqx")
    with pytest.raises(ValueError, match="this model has no classifier"):
        classification(model, tok, "a sentence.")
    with pytest.raises(ValueError, match="steps must be a whole number between 1 and 512"):
        masked_word(model, tok, "the capital of france is [MASK].", steps=0)
    with pytest.raises(ValueError, match="the text has no \\[MASK\\]"):
        masked_word(model, tok, "no mask here.")


def test_an_attribution_costing_more_than_the_cap_is_refused_before_any_work(shipped, monkeypatch):
    """Its cost is tokens x steps x layers x hidden^2: the shipped mini takes 128 tokens at 64 steps, and twice
    as many at half the steps. Two 505-token requests once held both cores for 25 s."""
    model, tokenizer = shipped
    allowed = MAX_WORK // (STEPS * 4 * 256**2)
    assert allowed == 128

    def sentence(tokens: int) -> str:  # [CLS] + words + [MASK] + "." + [SEP]
        return " ".join(["river"] * (tokens - 4)) + " [MASK]."

    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: pytest.fail("worked on a refused input"))
    with pytest.raises(ValueError, match=f"forward and back {STEPS} times: give at most 128 tokens, not 129"):
        masked_word(model, tokenizer, sentence(allowed + 1))
    with pytest.raises(ValueError, match="give at most 256 tokens, not 257"):
        masked_word(model, tokenizer, sentence(2 * allowed + 1), steps=STEPS // 2)
    monkeypatch.undo()
    assert len(masked_word(model, tokenizer, sentence(allowed)).tokens) == allowed
