"""The training readout: the frequency baseline, the held-out sentences it shows, and whether a guess is right.
(Held-out metrics through ours and transformers are checked on real runs in test_pretraining.py.)"""
from __future__ import annotations

from array import array

import pytest
import torch

import bert_demo.training.evaluate as evaluate_module
from bert_demo.data.pairs import token_counts
from bert_demo.training.evaluate import frequency_baseline, readout, readout_items


def test_the_frequency_baseline_is_the_most_frequent_token_and_how_often_it_is_the_answer():
    train_ids = [[array("i", [5, 6, 5, 1]), array("i", [5, 7])], [array("i", [1, 1, 1, 1, 6])]]  # 1 is special
    labels = torch.tensor([[5, -100, 6, 5], [7, 5, -100, -100]])
    top, accuracy = frequency_baseline(token_counts(train_ids, 8), [{"mlm_labels": labels}], special_ids=[0, 1])
    assert top == 5 and accuracy == pytest.approx(3 / 5)  # 5 targets, three of them token 5


def test_the_readout_hides_one_long_whole_word_in_one_sentence_per_held_out_document(tokenizer):
    documents = [["too short.", "the cat sat on the mat by the water today."],
                 ["the sun rises in the east over the water.", "a second sentence of the same document here."],
                 ["paris is the capital of france and of its water."]]
    items = readout_items(documents, tokenizer, n=3)
    assert [answer for _, answer in items] == ["water", "rises", "capital"]  # "water." has its full stop
    assert [text.count("[MASK]") for text, _ in items] == [1, 1, 1]
    assert items[0][0] == "the cat sat on the mat by the [MASK] today."


def test_a_readout_guess_is_right_only_when_the_first_guess_is_the_hidden_word(trained_tiny, tokenizer, monkeypatch):
    [memorised] = readout(trained_tiny, tokenizer, [("paris is the [MASK] of france.", "capital")], top_k=3)
    assert memorised["guesses"][0][0] == "capital" and len(memorised["guesses"]) == 3 and memorised["right"]
    ranked = [("east", 0.6), ("west", 0.3), ("mat", 0.1)]  # a model's guesses, made up so that they are known
    monkeypatch.setattr(evaluate_module, "fill_mask", lambda *args, **kwargs: [ranked])
    items = [("the sun rises in the [MASK].", answer) for answer in ("east", "west", "rug")]
    assert [r["right"] for r in readout(trained_tiny, tokenizer, items)] == [True, False, False]  # second: wrong
