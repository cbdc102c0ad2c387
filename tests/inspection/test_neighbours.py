"""bert_demo/inspection/neighbours.py: what lies near a word is found among vectors of its own space: rows of the
embedding table (without the tokens training hardly showed), or, in a sentence, the reference sentences' words at the
same layer."""
from __future__ import annotations

import pytest

from bert_demo.inspection.neighbours import REFERENCE, neighbours, rare_tokens


def test_neighbours_are_the_cosine_nearest_rows_never_the_word_or_a_special_token(trained_tiny, tokenizer,
                                                                                  with_embeddings):
    rows = {"cat": [1, 0], "mat": [5, 0], "dog": [1, 1], "sun": [2, 6], "[CLS]": [2, 0], "[MASK]": [1, 0]}
    others = {token: [0, 0, 1] for token in tokenizer.get_vocab() if token not in rows}  # at 90 degrees: cosine 0
    model = with_embeddings(trained_tiny, tokenizer, {**others, **rows})
    model.cls.predictions.bias.data.fill_(0.0)  # every token equally common: none left out as rare
    found = neighbours(model, tokenizer, "cat", k=3)  # by dot product: mat, sun, dog; by distance: dog first
    assert [n.token for n in found] == ["mat", "dog", "sun"] and {n.sentence for n in found} == {""}
    assert [n.similarity for n in found] == pytest.approx([1, 0.5 ** 0.5, 0.1 ** 0.5], abs=1e-6)


def test_a_word_in_context_is_compared_with_the_reference_sentences_words_at_the_same_layer(trained_tiny, tokenizer):
    sentence = "the cat sat on the mat."
    at_input = neighbours(trained_tiny, tokenizer, "cat", k=3, text=sentence, layer=0)
    # after the embedding layer a word is its word, position and segment: the same word at the same place in a
    # reference sentence is the same vector
    assert at_input[0] == ("cat", "the cat slept on the warm windowsill all afternoon.", pytest.approx(1.0, abs=1e-5))
    assert all(n.sentence in REFERENCE for n in at_input)
    last = trained_tiny.config.num_hidden_layers
    assert neighbours(trained_tiny, tokenizer, "cat", k=3, text=sentence, layer=last) != at_input
    with pytest.raises(ValueError, match="does not occur in the sentence"):
        neighbours(trained_tiny, tokenizer, "dog", text=sentence)
    with pytest.raises(ValueError, match="layer must be a whole number from 0 to"):
        neighbours(trained_tiny, tokenizer, "cat", text=sentence, layer=99)


def test_a_word_that_is_not_one_token_is_refused_with_its_pieces(trained_tiny, tokenizer):
    with pytest.raises(ValueError, match="not one token .*becomes"):
        neighbours(trained_tiny, tokenizer, "xylophonist")


def test_the_tokens_training_hardly_showed_are_never_offered_as_neighbours(trained_tiny, tokenizer, with_embeddings):
    rows = {"cat": [1, 0], "mat": [5, 0], "dog": [1, 1]}
    model = with_embeddings(trained_tiny, tokenizer, rows)
    model.cls.predictions.bias.data.fill_(0.0)
    model.cls.predictions.bias.data[tokenizer.convert_tokens_to_ids("mat")] = -20.0  # as if never in training
    assert "mat" not in [n.token for n in neighbours(model, tokenizer, "cat", k=3)]
    assert rare_tokens(model).tolist() == [tokenizer.convert_tokens_to_ids("mat")]  # the others tie: all kept
    spread = trained_tiny.cls.predictions.bias.detach()
    assert len(rare_tokens(trained_tiny)) == pytest.approx(len(spread) / 4, abs=1)  # a quarter of a real model
