"""Looking inside: guesses at every layer, heads switched off and their importance, and embedding neighbours."""
from __future__ import annotations

import pytest
import torch

from bert_demo import inference
from bert_demo.inference import (
    attention,
    embedding_projection,
    fill_mask,
    head_importance,
    layer_predictions,
    neighbours,
    next_sentence,
)

TEXT = "the cat sat on the [MASK]. paris is the [MASK] of france."


def all_heads(model, value=1.0):
    return torch.full((model.config.num_hidden_layers, model.config.num_attention_heads), value)


def test_last_layer_of_the_logit_lens_is_fill_mask(trained_tiny, tokenizer):
    lens = layer_predictions(trained_tiny, tokenizer, TEXT, top_k=4)
    assert len(lens) == 2 and all(len(layers) == trained_tiny.config.num_hidden_layers for layers in lens)
    last, answer = [layers[-1] for layers in lens], fill_mask(trained_tiny, tokenizer, TEXT, top_k=4)
    assert [[token for token, _ in guesses] for guesses in last] == [[token for token, _ in g] for g in answer]
    # the lens runs the head once on every layer's rows together: the same sums, added in another order
    assert [[p for _, p in guesses] for guesses in last] == [[pytest.approx(p, abs=1e-5) for _, p in g]
                                                            for g in answer]
    assert lens[0][0] != lens[0][-1]  # earlier layers guess differently: the lens shows something


def test_logit_lens_layer_equals_the_mlm_head_on_that_hidden_state(trained_tiny, tokenizer):
    batch = tokenizer(TEXT.replace("[MASK]", tokenizer.mask_token), return_tensors="pt")
    with torch.no_grad():
        hidden = trained_tiny(**batch, output_hidden_states=True).hidden_states
        masked = batch["input_ids"][0] == tokenizer.mask_token_id
        probs = trained_tiny.cls.predictions(hidden[1][0, masked]).softmax(-1)
    token, prob = layer_predictions(trained_tiny, tokenizer, TEXT, top_k=1)[1][0][0]
    assert token == tokenizer.convert_ids_to_tokens(int(probs[1].argmax()))
    assert prob == pytest.approx(float(probs[1].max()), abs=1e-5)  # the lens runs all layers in one matmul


def test_a_head_mask_of_ones_changes_nothing_and_zeros_change_the_answer(trained_tiny, tokenizer):
    assert fill_mask(trained_tiny, tokenizer, TEXT, head_mask=all_heads(trained_tiny)) == fill_mask(
        trained_tiny, tokenizer, TEXT)
    silenced = fill_mask(trained_tiny, tokenizer, TEXT, head_mask=all_heads(trained_tiny, 0.0))
    assert silenced != fill_mask(trained_tiny, tokenizer, TEXT)
    pair = ("the cat sat on the mat.", "the dog sat on the rug.")
    assert next_sentence(trained_tiny, tokenizer, *pair, head_mask=all_heads(trained_tiny, 0.0)) != next_sentence(
        trained_tiny, tokenizer, *pair)


def test_a_switched_off_head_shows_no_attention_and_the_others_still_sum_to_one(trained_tiny, tokenizer):
    mask = all_heads(trained_tiny)
    mask[1, 0] = 0
    _, weights = attention(trained_tiny, tokenizer, "the cat sat on the mat.", head_mask=mask)
    assert weights[1, 0].abs().max() == 0
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(weights.shape[1], weights.shape[2]))


@pytest.mark.parametrize("make_mask, message", [
    (lambda model: [[1, 1]], r"head_mask must be \[layers, heads\]"),
    (lambda model: all_heads(model, 0.5), "only 1 .* and 0"),
    (lambda model: "all of them", "grid of 0 and 1"),
])
def test_bad_head_masks_are_refused_with_a_clear_message(trained_tiny, tokenizer, make_mask, message):
    with pytest.raises(ValueError, match=message):
        fill_mask(trained_tiny, tokenizer, TEXT, head_mask=make_mask(trained_tiny))


def test_head_importance_equals_switching_each_head_off_by_hand(trained_tiny, tokenizer):
    labels, drops = head_importance(trained_tiny, tokenizer, TEXT)
    layers, heads = trained_tiny.config.num_hidden_layers, trained_tiny.config.num_attention_heads
    assert drops.shape == (2, layers, heads)
    best = fill_mask(trained_tiny, tokenizer, TEXT, top_k=1)
    assert labels == [f"[MASK] {i + 1}: {guess[0][0]}" for i, guess in enumerate(best)]
    for layer, head in [(0, 0), (layers - 1, heads - 1)]:
        mask = all_heads(trained_tiny)
        mask[layer, head] = 0
        after = fill_mask(trained_tiny, tokenizer, TEXT, top_k=50, head_mask=mask)
        for target in range(2):
            prob_after = dict(after[target]).get(best[target][0][0], 0.0)
            assert drops[target, layer, head] == pytest.approx(best[target][0][1] - prob_after, abs=1e-5)


def test_head_importance_of_a_pair_is_the_drop_in_the_is_next_probability(trained_tiny, tokenizer):
    pair = ("the cat sat on the mat.", "the dog sat on the rug.")
    labels, drops = head_importance(trained_tiny, tokenizer, *pair)
    mask = all_heads(trained_tiny)
    mask[0, 1] = 0
    expected = next_sentence(trained_tiny, tokenizer, *pair) - next_sentence(trained_tiny, tokenizer, *pair,
                                                                             head_mask=mask)
    assert labels == ["B follows A"] and drops[0, 0, 1] == pytest.approx(expected, abs=1e-5)


def test_neighbours_are_the_cosine_nearest_rows_of_the_embedding_table(trained_tiny, tokenizer):
    found = neighbours(trained_tiny, tokenizer, "cat", k=5)
    table = trained_tiny.bert.embeddings.word_embeddings.weight.detach()
    cosine = torch.nn.functional.cosine_similarity(table, table[tokenizer.convert_tokens_to_ids("cat")][None])
    cosine[tokenizer.all_special_ids + [tokenizer.convert_tokens_to_ids("cat")]] = -2
    assert [token for token, _ in found] == tokenizer.convert_ids_to_tokens(cosine.topk(5).indices.tolist())
    assert "cat" not in dict(found)


def test_neighbours_in_context_start_near_the_word_and_move_with_depth(trained_tiny, tokenizer):
    sentence = "the cat sat on the mat."
    at_input = neighbours(trained_tiny, tokenizer, "cat", k=3, text=sentence, layer=0)
    last = trained_tiny.config.num_hidden_layers
    at_last = neighbours(trained_tiny, tokenizer, "cat", k=3, text=sentence, layer=last)
    assert at_input[0][0] == "cat" and at_input != at_last
    with pytest.raises(ValueError, match="does not occur in the sentence"):
        neighbours(trained_tiny, tokenizer, "dog", text=sentence)
    with pytest.raises(ValueError, match="layer must be a whole number from 0 to"):
        neighbours(trained_tiny, tokenizer, "cat", text=sentence, layer=99)


def test_a_word_that_is_not_one_token_is_refused_with_its_pieces(trained_tiny, tokenizer):
    with pytest.raises(ValueError, match="not one token .*becomes"):
        neighbours(trained_tiny, tokenizer, "xylophonist")


def test_projection_is_centred_and_never_stretches_distances(trained_tiny, tokenizer):
    words = ["cat", "dog", "paris", "berlin", "sun", "water"]
    points = embedding_projection(trained_tiny, tokenizer, words)
    assert [w for w, _, _ in points] == words and points == embedding_projection(trained_tiny, tokenizer, words)
    xy = torch.tensor([[x, y] for _, x, y in points])
    torch.testing.assert_close(xy.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    vectors = trained_tiny.bert.embeddings.word_embeddings.weight.detach()[tokenizer.convert_tokens_to_ids(words)]
    assert (torch.cdist(xy, xy) <= torch.cdist(vectors, vectors) + 1e-4).all()  # a projection only shrinks
    with pytest.raises(ValueError, match="from 3 to"):
        embedding_projection(trained_tiny, tokenizer, ["cat", "dog"])


def test_head_importance_refuses_inputs_that_would_hold_the_cpu_too_long(trained_tiny, tokenizer, monkeypatch):
    heads = trained_tiny.config.num_hidden_layers * trained_tiny.config.num_attention_heads
    monkeypatch.setattr(inference, "MAX_IMPORTANCE_WORK", heads * 10)  # at most 10 tokens here
    head_importance(trained_tiny, tokenizer, "the [MASK] sat.")  # 5 tokens with [CLS] and [SEP]: answered
    with pytest.raises(ValueError, match=f"once per head \\({heads} here\\): give at most 10 tokens"):
        head_importance(trained_tiny, tokenizer, "the cat sat on the [MASK] and the dog sat on the rug.")
