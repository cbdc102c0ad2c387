"""The forward pass step by step shows the model's own numbers: every value a step shows equals what Hugging Face's
BertForPreTraining computes at the same place on the same weights, and each step names the line that computes it."""
from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import transformers

from bert_demo import model as model_py
from bert_demo.config import BertConfig
from bert_demo.inference import encode_input, fill_mask, next_sentence
from bert_demo.inspection.forward_steps import IN, PARTS, SPECS, Site, capture, forward_pass, forward_steps, source_line
from bert_demo.tokenizer import train_tokenizer
from tests.references import random_weights

TOL = 1e-5
SENTENCES = ["the cat sat on the mat.", "a dog barked at the moon.", "paris is the capital of france."]


@pytest.fixture(scope="module")
def pair():
    """Our model and transformers' with the same random weights (LayerNorms and biases random too), and a
    tokenizer of its vocabulary."""
    tokenizer = train_tokenizer([SENTENCES] * 5, vocab_size=128, min_frequency=1)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=80)
    ours = random_weights(config)
    theirs = transformers.BertForPreTraining(
        transformers.BertConfig(**config.to_hf_dict(), attn_implementation="eager")).eval()
    theirs.load_state_dict(ours.state_dict(), strict=False)
    theirs.cls.predictions.decoder.bias = theirs.cls.predictions.bias
    return ours, theirs, tokenizer


def hf_capture(model: transformers.BertForPreTraining, batch: dict) -> dict[Site, torch.Tensor]:
    """What transformers' modules returned and received, under the same names as `capture`'s."""
    kept = {}

    def keep(name):
        def hook(module, inputs, output):
            if inputs and isinstance(inputs[0], torch.Tensor):
                kept[Site(name, IN)] = inputs[0].float()
            output = output[0] if isinstance(output, tuple) else output
            if isinstance(output, torch.Tensor):
                kept[Site(name)] = output.float()
        return hook

    handles = [m.register_forward_hook(keep(name)) for name, m in model.named_modules() if name]
    with torch.no_grad():
        out = model(**batch, output_attentions=True, output_hidden_states=True)
    for handle in handles:
        handle.remove()
    return kept, out


def test_every_value_captured_from_our_forward_pass_equals_transformers_at_the_same_module(pair):
    ours, theirs, tokenizer = pair
    batch = encode_input(ours, tokenizer, "the cat sat on the [MASK].", "a dog barked at the moon.")
    kept, probs = capture(ours, batch)
    hf, out = hf_capture(theirs, {**batch, "attention_mask": torch.ones_like(batch["input_ids"])})
    compared = [tap for tap in kept if tap in hf and not (tap.module.endswith("_embeddings") and tap.port == IN)]
    assert len(compared) >= 3 * 20  # every layer's projections, norms and feed-forward, and the heads
    for tap in compared:  # (an embedding reads ids, not values)
        torch.testing.assert_close(kept[tap], hf[tap].reshape(kept[tap].shape), atol=TOL, rtol=0, msg=str(tap))
    torch.testing.assert_close(probs[0], torch.stack(out.attentions, dim=1)[0], atol=TOL, rtol=0)
    torch.testing.assert_close(kept[Site("cls.predictions")], out.prediction_logits, atol=TOL, rtol=0)
    torch.testing.assert_close(kept[Site("cls.seq_relationship")], out.seq_relationship_logits, atol=TOL, rtol=0)
    for layer, hidden in enumerate(out.hidden_states):
        name = Site("bert.embeddings.LayerNorm" if layer == 0 else f"bert.encoder.layer.{layer - 1}.output.LayerNorm")
        torch.testing.assert_close(kept[name], hidden, atol=TOL, rtol=0, msg=name)


def test_each_step_shows_what_the_model_computed_there(pair):
    """The steps of layer 2, head 3: the scores are Q Kᵀ/√d of the head's own Q and K, the softmax is the
    model's attention for that head, the weighted sum is that softmax times V, the embeddings add up, and the
    layer's output and the NSP probabilities are transformers'."""
    ours, theirs, tokenizer = pair
    text = ("the cat sat on the [MASK].", "a dog barked.")
    steps = {(step.part, step.title): step.values for step in forward_steps(ours, tokenizer, *text, layer=2, head=3)}
    attention = {title: values for (part, title), values in steps.items() if part == "Attention"}
    q, k, v = attention["Queries Q"], attention["Keys K"], attention["Values V"]
    torch.testing.assert_close(attention["Scores"], q @ k.T / math.sqrt(q.shape[1]), atol=TOL, rtol=0)
    torch.testing.assert_close(attention["Softmax"], attention["Scores"].softmax(-1), atol=TOL, rtol=0)
    torch.testing.assert_close(attention["Weighted sum of V"], attention["Softmax"] @ v, atol=TOL, rtol=0)
    embeddings = [steps["Embeddings", name] for name in ("Word rows", "Position rows", "Segment rows")]
    torch.testing.assert_close(steps["Embeddings", "Their sum"], sum(embeddings), atol=TOL, rtol=0)
    batch = encode_input(ours, tokenizer, *text)
    _, out = hf_capture(theirs, {**batch, "attention_mask": torch.ones_like(batch["input_ids"])})
    torch.testing.assert_close(attention["Softmax"], out.attentions[1][0, 2], atol=TOL, rtol=0)
    torch.testing.assert_close(steps["Feed-forward", "The layer's output (LayerNorm)"], out.hidden_states[2][0],
                               atol=TOL, rtol=0)
    torch.testing.assert_close(steps["Next-sentence head", "Softmax"], out.seq_relationship_logits.softmax(-1),
                               atol=TOL, rtol=0)


def test_the_guesses_are_the_heads_top_scores_at_each_mask(pair):
    ours, theirs, tokenizer = pair
    steps = forward_steps(ours, tokenizer, "the [MASK] sat on the [MASK].")
    decoder, softmax = [s for s in steps if s.part == "Masked-LM head"][-2:]
    assert decoder.rows == ["2 [MASK]", "6 [MASK]"] and softmax.rows == decoder.rows
    batch = encode_input(ours, tokenizer, "the [MASK] sat on the [MASK].")
    _, out = hf_capture(theirs, {**batch, "attention_mask": torch.ones_like(batch["input_ids"])})
    logits = out.prediction_logits[0, [2, 6]]
    top = logits.topk(decoder.values.shape[1], dim=-1)
    torch.testing.assert_close(decoder.values, top.values, atol=TOL, rtol=0)
    assert decoder.cells == [tokenizer.convert_ids_to_tokens(row.tolist()) for row in top.indices]
    torch.testing.assert_close(softmax.values, logits.softmax(-1).gather(1, top.indices), atol=TOL, rtol=0)


def test_the_steps_walk_the_paper_in_order_and_each_names_its_line_of_model_py(pair):
    ours, _, tokenizer = pair
    steps = forward_steps(ours, tokenizer, "the cat sat on the mat.", layer=3, head=2)
    assert [s.part for s in steps] == sorted((s.part for s in steps), key=PARTS.index)
    names = [f"{s.part} · {s.title}" for s in steps]
    assert len(set(names)) == len(names) == len(SPECS)  # every step once, none left out
    assert {s.where for s in steps if s.part == "Attention"} == {"layer 3, head 2", "layer 3"}
    assert {s.where for s in steps if s.part == "Feed-forward"} == {"layer 3"}
    assert not any(s.where for s in steps if s.part not in ("Attention", "Feed-forward"))
    source = Path(model_py.__file__).read_text(encoding="utf-8")
    for step in steps:
        assert source.count(step.code) == 1, (step.title, step.code)  # its line, and no other, holds its anchor
        assert step.values.dim() == 2 and len(step.rows) == step.values.shape[0], step.title
        assert step.equation and step.about


@pytest.mark.parametrize("layer, head, message", [(0, 1, "layer must be"), (4, 1, "layer must be"),
                                                  (1, 5, "head must be"), (True, 1, "layer must be"),
                                                  (1, "2", "head must be")])
def test_a_layer_or_head_the_model_lacks_is_refused_with_its_range(pair, layer, head, message):
    ours, _, tokenizer = pair
    with pytest.raises(ValueError, match=message):
        forward_steps(ours, tokenizer, "the cat sat.", layer=layer, head=head)


@contextmanager
def others_asking(*questions: Callable[[], object]) -> Iterator[None]:
    """Other visitors asking the same model all the while, each on a thread of their own, with the interpreter
    switching threads as often as it can: a pass of theirs then runs in the middle of any pass of ours."""
    stop, interval = threading.Event(), sys.getswitchinterval()

    def ask(question: Callable[[], object]) -> None:
        while not stop.is_set():
            question()

    threads = [threading.Thread(target=ask, args=(question,), daemon=True) for question in questions]
    sys.setswitchinterval(1e-6)
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)


def test_a_forward_pass_holds_its_own_values_while_other_visitors_ask_the_same_model(pair):
    """Every value of 30 passes of one sentence, taken while two other visitors ask Fill-mask and Next sentence of
    other sentences on the same model, equals the pass taken alone: no hook records another caller's pass."""
    ours, _, tokenizer = pair
    text = ("the cat sat on the [MASK].", "a dog barked.")
    alone = forward_pass(ours, tokenizer, *text, layer=2, head=3)
    with others_asking(lambda: fill_mask(ours, tokenizer, "paris is the capital of [MASK] . the sun rises ."),
                       lambda: next_sentence(ours, tokenizer, "berlin is the capital.", "water boils at noon.")):
        passes = [forward_pass(ours, tokenizer, *text, layer=2, head=3) for _ in range(30)]
    for crowded in passes:
        assert crowded.kept.keys() == alone.kept.keys()
        for name, value in alone.kept.items():
            assert torch.equal(crowded.kept[name], value), name
        assert torch.equal(crowded.probs, alone.probs)
    assert ours.training is False and not any(m._forward_hooks for m in ours.modules())


COMPUTES = {  # what each step's line of model.py must compute: a name or an operation only that step's line holds
    ("Embeddings", "Word rows"): "self.word_embeddings(", ("Embeddings", "Position rows"): "self.position_embeddings(",
    ("Embeddings", "Segment rows"): "self.token_type_embeddings(", ("Embeddings", "Their sum"): "x + ",
    ("Embeddings", "LayerNorm"): "self.LayerNorm(x)", ("Attention", "Queries Q"): "self.query",
    ("Attention", "Keys K"): "self.key", ("Attention", "Values V"): "self.value",
    ("Attention", "Scores"): "q @ k.transpose", ("Attention", "Padding mask"): "masked_fill(~key_mask",
    ("Attention", "Softmax"): ".softmax(", ("Attention", "Weighted sum of V"): "probs) @ v",
    ("Attention", "Every head joined"): '"b a t d -> b t (a d)"', ("Attention", "Output projection"): "self.dense(h)",
    ("Attention", "Residual"): "residual +", ("Attention", "LayerNorm (post-LN)"): "self.LayerNorm(residual",
    ("Feed-forward", "First linear map"): "self.dense(x)", ("Feed-forward", "GELU"): "F.gelu(",
    ("Feed-forward", "Second linear map"): "self.dense(h)", ("Feed-forward", "Residual"): "residual +",
    ("Feed-forward", "The layer's output (LayerNorm)"): "self.output(self.intermediate(x), x)",
    ("Masked-LM head", "Transform: dense"): "self.dense(x)", ("Masked-LM head", "Transform: GELU"): "F.gelu(",
    ("Masked-LM head", "Transform: LayerNorm"): "self.LayerNorm(F.gelu(",
    ("Masked-LM head", "Decoder, tied to the word embeddings"): "self.decoder.weight",
    ("Masked-LM head", "Softmax: the guesses"): "self.decoder.weight",
    ("Next-sentence head", "The [CLS] vector"): "hidden[:, 0]",
    ("Next-sentence head", "Pooler: dense"): "self.dense(hidden",
    ("Next-sentence head", "Pooler: tanh"): "torch.tanh(",
    ("Next-sentence head", "Classifier"): "seq_relationship(",
    ("Next-sentence head", "Softmax"): "seq_relationship(",
}


def test_each_steps_line_of_model_py_computes_that_step():
    """A step's line of model.py holds what computes it, so a step cannot point at another's line (the two heads'
    softmaxes run in the loss and the view: their line is the scores they turn into probabilities)."""
    assert set(COMPUTES) == {(spec.part, spec.title) for spec in SPECS}
    for spec in SPECS:
        _, line = source_line(spec.code)
        assert COMPUTES[spec.part, spec.title] in line, (spec.part, spec.title, line)
