"""Every layer at once: a token's path is its hidden state at each depth, its last guesses are Fill-mask's answer and
its spread an entropy's exponential; a step in every layer and head is each layer's own."""
from __future__ import annotations

import math

import pytest
import torch

from bert_demo.inference import encode_input, fill_mask
from bert_demo.inspection.depth import every_layer, token_path
from bert_demo.inspection.forward_steps import SPECS, forward_pass

TEXT = "the cat sat on the [MASK]."


def test_a_tokens_path_is_its_hidden_state_at_each_depth_and_ends_in_fill_masks_answer(trained_tiny, tokenizer):
    p = forward_pass(trained_tiny, tokenizer, TEXT)
    position = p.guessed[0]
    path = token_path(trained_tiny, tokenizer, p, position)
    batch = encode_input(trained_tiny, tokenizer, TEXT)
    with torch.no_grad():
        out = trained_tiny(**batch, output_hidden_states=True, output_attentions=True)
    layers = trained_tiny.config.num_hidden_layers
    assert [d.layer for d in path] == list(range(layers + 1))
    for depth, hidden in zip(path, out.hidden_states):
        assert depth.size == pytest.approx(float(hidden[0, position].norm()), rel=1e-5)
    answer = fill_mask(trained_tiny, tokenizer, TEXT, top_k=3)[0]
    assert [word for word, _ in path[-1].guesses] == [word for word, _ in answer]
    assert path[0].spread is None and path[0].most is None
    row = out.attentions[-1][0, :, position]  # (A, T)
    spread = (-(row * row.log()).sum(-1)).exp().mean()
    assert path[-1].spread == pytest.approx(float(spread), rel=1e-4) and 1 <= path[-1].spread <= len(p.tokens)


def test_a_position_the_input_lacks_is_refused(trained_tiny, tokenizer):
    p = forward_pass(trained_tiny, tokenizer, TEXT)
    with pytest.raises(ValueError, match="a position from 0 to"):
        token_path(trained_tiny, tokenizer, p, len(p.tokens))


def test_a_step_in_every_layer_and_head_is_that_layers_own(trained_tiny, tokenizer):
    p = forward_pass(trained_tiny, tokenizer, TEXT)
    softmax = next(spec for spec in SPECS if spec.title == "Softmax" and spec.part == "Attention")
    grid = every_layer(softmax, p)
    layers, heads = trained_tiny.config.num_hidden_layers, trained_tiny.config.num_attention_heads
    assert [caption for _, caption in grid] == [f"L{i + 1} H{h + 1}" for i in range(layers) for h in range(heads)]
    for (values, _), (layer, head) in zip(grid, [(i, h) for i in range(layers) for h in range(heads)]):
        assert torch.equal(values, p.probs[0, layer, head])
    output = next(spec for spec in SPECS if spec.title == "The layer's output (LayerNorm)")
    assert [caption for _, caption in every_layer(output, p)] == [f"L{i + 1}" for i in range(layers)]
    assert every_layer(SPECS[0], p) == []  # the embeddings are computed once
    assert not math.isnan(float(grid[0][0].sum()))
