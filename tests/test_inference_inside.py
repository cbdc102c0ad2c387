"""Looking inside: guesses at every layer, heads switched off and their importance, and the embedding projection.
References: `transformers` on the same weights (heads switched off by a hook), and small hand-built tables."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch
import transformers

from bert_demo.checkpoint import save_pretrained
from bert_demo.inference import attention, fill_mask, layer_predictions, next_sentence
from bert_demo.inspection import heads
from bert_demo.inspection.heads import head_importance
from bert_demo.inspection.neighbours import embedding_projection

TEXT = "the cat sat on the [MASK]. paris is the [MASK] of france."


def all_heads(model, value=1.0):
    return torch.full((model.config.num_hidden_layers, model.config.num_attention_heads), value)


@pytest.fixture(scope="module")
def reference(trained_tiny, tokenizer, tmp_path_factory):
    """The same weights in `transformers`' BertForPreTraining: an implementation that shares no code with ours."""
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path_factory.mktemp("reference") / "tiny")
    return transformers.BertForPreTraining.from_pretrained(folder).eval()


@contextmanager
def switched_off(reference, layer, head):
    """One head of the reference silenced: its slice of the context vector zeroed where it enters the attention's
    output projection (transformers 5.x has no head_mask argument)."""
    size = reference.config.hidden_size // reference.config.num_attention_heads
    keep = torch.ones(reference.config.hidden_size)
    keep[head * size:(head + 1) * size] = 0
    dense = reference.bert.encoder.layer[layer].attention.output.dense
    hook = dense.register_forward_pre_hook(lambda module, args: (args[0] * keep,))
    try:
        yield
    finally:
        hook.remove()


def reference_mask_probs(reference, tokenizer, text):
    """The reference's probabilities over the vocabulary at each [MASK] of `text`, (masks, V)."""
    batch = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = reference(**batch).prediction_logits[0]
    return logits[batch["input_ids"][0] == tokenizer.mask_token_id].softmax(-1)


def reference_is_next(reference, tokenizer, text_a, text_b):
    with torch.no_grad():
        return float(reference(**tokenizer(text_a, text_b, return_tensors="pt")).seq_relationship_logits[0].softmax(
            -1)[0])


def test_last_layer_of_the_logit_lens_is_fill_mask(trained_tiny, tokenizer):
    lens = layer_predictions(trained_tiny, tokenizer, TEXT, top_k=4)
    assert len(lens) == 2 and all(len(layers) == trained_tiny.config.num_hidden_layers for layers in lens)
    last, answer = [layers[-1] for layers in lens], fill_mask(trained_tiny, tokenizer, TEXT, top_k=4)
    assert [[token for token, _ in guesses] for guesses in last] == [[token for token, _ in g] for g in answer]
    # the lens runs the head once on every layer's rows together: the same sums, added in another order
    assert [[p for _, p in guesses] for guesses in last] == [[pytest.approx(p, abs=1e-5) for _, p in g]
                                                            for g in answer]
    assert lens[0][0] != lens[0][-1]  # earlier layers guess differently: the lens shows something


def test_logit_lens_layer_equals_the_mlm_head_on_that_hidden_state(trained_tiny, tokenizer, reference):
    batch = tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        hidden = reference(**batch, output_hidden_states=True).hidden_states
        masked = batch["input_ids"][0] == tokenizer.mask_token_id
        probs = reference.cls.predictions(hidden[1][0, masked]).softmax(-1)
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
    others = weights.sum(-1)[mask.bool()]  # every other head of every layer, its own layer's included: (L*A-1, T)
    torch.testing.assert_close(others, torch.ones_like(others))


@pytest.mark.parametrize("make_mask, message", [
    (lambda model: [[1, 1]], r"head_mask must be \[layers, heads\]"),
    (lambda model: all_heads(model, 0.5), "only 1 .* and 0"),
    (lambda model: "all of them", "grid of 0 and 1"),
])
def test_bad_head_masks_are_refused_with_a_clear_message(trained_tiny, tokenizer, make_mask, message):
    with pytest.raises(ValueError, match=message):
        fill_mask(trained_tiny, tokenizer, TEXT, head_mask=make_mask(trained_tiny))


def test_head_importance_is_the_drop_that_transformers_shows_with_that_head_switched_off(trained_tiny, tokenizer,
                                                                                         reference):
    labels, drops = head_importance(trained_tiny, tokenizer, TEXT)
    layers, heads = trained_tiny.config.num_hidden_layers, trained_tiny.config.num_attention_heads
    before, best = reference_mask_probs(reference, tokenizer, TEXT).max(-1)
    assert labels == [f"[MASK] {i + 1}: {token}" for i, token in enumerate(tokenizer.convert_ids_to_tokens(best))]
    expected = torch.zeros(2, layers, heads)
    for layer in range(layers):
        for head in range(heads):
            with switched_off(reference, layer, head):
                after = reference_mask_probs(reference, tokenizer, TEXT)[torch.arange(2), best]
            expected[:, layer, head] = before - after
    assert expected.abs().max() > 1e-3  # the heads matter, so a drop of 0 everywhere would fail
    torch.testing.assert_close(drops, expected, atol=1e-5, rtol=0)


def test_head_importance_of_a_pair_is_the_drop_in_the_is_next_probability(trained_tiny, tokenizer, reference):
    pair = ("the cat sat on the mat.", "the dog sat on the rug.")
    labels, drops = head_importance(trained_tiny, tokenizer, *pair)
    before = reference_is_next(reference, tokenizer, *pair)
    with switched_off(reference, 0, 1):
        expected = before - reference_is_next(reference, tokenizer, *pair)
    assert labels == ["B follows A"] and drops[0, 0, 1] == pytest.approx(expected, abs=1e-5)


def test_projection_is_centred_never_stretches_distances_and_keeps_the_most_spread(trained_tiny, tokenizer):
    words = ["cat", "dog", "paris", "berlin", "sun", "water"]
    points = embedding_projection(trained_tiny, tokenizer, words)
    assert [w for w, _, _ in points] == words and points == embedding_projection(trained_tiny, tokenizer, words)
    xy = torch.tensor([[x, y] for _, x, y in points])
    torch.testing.assert_close(xy.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    vectors = trained_tiny.bert.embeddings.word_embeddings.weight.detach()[tokenizer.convert_tokens_to_ids(words)]
    assert (torch.cdist(xy, xy) <= torch.cdist(vectors, vectors) + 1e-4).all()  # a projection only shrinks
    centred = vectors.double().numpy() - vectors.double().numpy().mean(0)
    most = np.linalg.eigvalsh(centred @ centred.T)[-2:].sum()  # the spread the best plane keeps (PCA, by eigenvalues)
    assert float((xy.double() ** 2).sum()) == pytest.approx(most, rel=1e-4)
    with pytest.raises(ValueError, match="from 3 to"):
        embedding_projection(trained_tiny, tokenizer, ["cat", "dog"])


def test_points_on_a_plane_project_to_their_own_centred_coordinates(trained_tiny, tokenizer, with_embeddings):
    plane = {"cat": (3, 0), "dog": (-3, 0), "sun": (0, 1), "water": (0, -1)}  # wider along the first axis
    rows = {word: [2 + x, 2 + y, 2, 2, 2] for word, (x, y) in plane.items()}  # an offset that centring removes
    points = embedding_projection(with_embeddings(trained_tiny, tokenizer, rows), tokenizer, list(plane))
    assert [(x, y) for _, x, y in points] == [pytest.approx(xy, abs=1e-5) for xy in plane.values()]


def test_head_importance_refuses_inputs_that_would_hold_the_cpu_too_long(trained_tiny, tokenizer, monkeypatch):
    count = trained_tiny.config.num_hidden_layers * trained_tiny.config.num_attention_heads
    monkeypatch.setattr(heads, "MAX_IMPORTANCE_WORK", count * 10)  # at most 10 tokens here
    head_importance(trained_tiny, tokenizer, "the [MASK] sat.")  # 5 tokens with [CLS] and [SEP]: answered
    with pytest.raises(ValueError, match=f"once per head \\({count} here\\): give at most 10 tokens"):
        head_importance(trained_tiny, tokenizer, "the cat sat on the [MASK] and the dog sat on the rug.")


def _views(model, tokenizer) -> dict:
    """Every look inside the model the app answers with, on one input each."""
    from bert_demo.inspection.attribution import masked_word
    from bert_demo.inspection.neighbours import neighbours

    return {
        "attention": lambda: attention(model, tokenizer, "the cat sat.", "it purred.", head_mask=all_heads(model))[1],
        "logit lens": lambda: layer_predictions(model, tokenizer, TEXT),
        "head importance": lambda: head_importance(model, tokenizer, "the cat sat on the [MASK].")[1],
        "neuron view": lambda: heads.query_key(model, tokenizer, "the cat sat.", None, 1, 1, 2).weights,
        "neighbours": lambda: neighbours(model, tokenizer, "cat", text="the cat sat on the mat.", layer=1),
        "attribution": lambda: masked_word(model, tokenizer, "the cat sat on the [MASK].", steps=8).scores,
    }


def test_no_look_inside_sets_padding_or_truncation_on_the_tokenizer_every_visitor_shares(trained_tiny, tokenizer,
                                                                                           monkeypatch):
    """A fast tokenizer keeps its padding and truncation on itself while it encodes: one visitor's call that sets
    them turns another's batch, encoded at the same moment, padded or ragged (a Next sentence answer failed with
    "Unable to create tensor" under Embeddings' neighbours in a sentence)."""
    from transformers.tokenization_utils_base import TruncationStrategy
    from transformers.utils import PaddingStrategy

    asked = []
    original = tokenizer.set_truncation_and_padding

    def recorded(**settings):
        padding, truncation = settings["padding_strategy"], settings["truncation_strategy"]
        if padding != PaddingStrategy.DO_NOT_PAD or truncation != TruncationStrategy.DO_NOT_TRUNCATE:
            asked.append((padding, truncation))
        return original(**settings)

    monkeypatch.setattr(tokenizer, "set_truncation_and_padding", recorded)
    for name, view in _views(trained_tiny, tokenizer).items():
        view()
        assert not asked, f"{name} asked the shared tokenizer for {asked}"


def test_every_look_inside_is_the_same_alone_and_while_other_visitors_ask_the_same_model(trained_tiny, tokenizer):
    """Each view, asked 5 times while two threads ask Fill-mask and Next sentence of other sentences on the same
    model, the interpreter switching threads as often as it can, answers as it does alone, and so do they (issue
    69)."""
    import sys
    import threading

    views = _views(trained_tiny, tokenizer)
    alone = {name: view() for name, view in views.items()}
    stop, interval = threading.Event(), sys.getswitchinterval()
    questions = (lambda: fill_mask(trained_tiny, tokenizer, "paris is the capital of [MASK] . the sun rises ."),
                 lambda: next_sentence(trained_tiny, tokenizer, "berlin is the capital.", "water boils at noon."))
    theirs_alone, theirs = [question() for question in questions], [[], []]

    def ask(i: int) -> None:
        while not stop.is_set():
            try:
                theirs[i].append(questions[i]())
            except Exception as exc:  # noqa: BLE001 - another visitor's pass broken by a view's: a failure
                theirs[i].append(exc)

    others = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(len(questions))]
    sys.setswitchinterval(1e-6)
    for thread in others:
        thread.start()
    try:
        crowded = {name: [view() for _ in range(5)] for name, view in views.items()}
    finally:
        stop.set()
        for thread in others:
            thread.join()
        sys.setswitchinterval(interval)
    for name, answers in crowded.items():
        for answer in answers:
            if isinstance(answer, torch.Tensor):
                assert torch.equal(answer, alone[name]), name
            else:
                assert answer == alone[name], name
    for alone_answer, answers in zip(theirs_alone, theirs):  # and the other visitors were answered as alone
        assert answers and all(answer == alone_answer for answer in answers)
