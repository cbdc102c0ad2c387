"""What the Step by step tab's first two sections show, read back from what they rendered (the Markdown's numbers
and tables, the example's boxes, the figures' data) and checked against an independent computation: transformers'
BertForPreTraining with the same weights for losses, probabilities, attention and hidden states; the example's own
batch for positions, pieces, segments and labels. The test model's 3 layers and 4 heads tell a layer from a head."""
from __future__ import annotations

import html
import re

import pytest
import torch

from bert_demo.app.queries import At
from bert_demo.app.tabs import drawn, steps
from bert_demo.data.masking import Fate
from bert_demo.inference import encode_input
from bert_demo.inspection.forward_steps import STEP_NAMES
from bert_demo.config import IS_NEXT
from tests.conftest import TEST_SHAPE
from tests.references import example_batch, transformers_loss, transformers_model
from tests.rendered import after, number, numbers, plain, table_after, traces

MODEL = "checkpoints/tiny-test"
PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))
SENTENCE_A, SENTENCE_B = "the cat [MASK] on the mat.", "it purred."


@pytest.fixture(scope="module")
def drawn_with(make_checkpoint, tmp_path_factory):
    """The app's state over a test model, and a seed whose example has a kept and a random position."""
    from bert_demo.app.registry import Registry

    root = tmp_path_factory.mktemp("steps-views")
    make_checkpoint(root / "checkpoints" / "tiny-test")
    registry = Registry(checkpoints_dir=root / "checkpoints", runs_dir=root / "runs", device="cpu", allow_hub=False)
    seed = next(seed for seed in range(60) if {Fate.RANDOM, Fate.KEPT} <= set(
        drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                                    seed=seed)).example.fates))
    return registry, seed


@pytest.fixture
def section_1(drawn_with):
    """Section 1 as the page draws it for that seed (rendered afresh for each test), and the example."""
    registry, seed = drawn_with
    shown = steps.pretraining_example(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                      seed=seed)
    return registry, shown, drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS,
                                                                        recipe="paper", seed=seed))


def test_the_pair_names_its_seed_and_its_nsp_label_as_the_batch_holds_it(section_1):
    _, shown, example = section_1
    label = int(example.example.batch["nsp_labels"][0])
    assert shown["ex_pair"].startswith(f"Seed **{example.example.seed}**")
    word = "IsNext" if label == IS_NEXT else "NotNext"
    assert f"**{word}** (label {label})" in shown["ex_pair"]
    assert example.example.is_next == (label == IS_NEXT)


def test_each_box_is_its_positions_piece_id_segment_and_fate_with_its_label(section_1):
    _, shown, example = section_1
    boxes = re.findall(r'<div class="ex-tok ([^"]+)">(.*?)</div>', shown["ex_tokens"])
    batch = example.example.batch
    assert len(boxes) == batch["input_ids"].shape[1]
    for position, (classes, inner) in enumerate(boxes):
        spans = dict(re.findall(r'<span class="ex-(\w+)">(.*?)</span>', inner))
        segment = int(batch["token_type_ids"][0, position])
        assert spans["pos"] == f"{position} · {'AB'[segment]}" and f"seg-{'ab'[segment]}" in classes.split()
        assert int(spans["id"]) == int(batch["input_ids"][0, position])
        assert html.unescape(spans["piece"]) == example.loaded.tokenizer.convert_ids_to_tokens(int(spans["id"]))
        label = int(batch["mlm_labels"][0, position])
        fate = Fate(example.example.fates[position])
        if label == -100:
            assert "fate" not in spans and fate == Fate.NOT_PICKED
            continue
        assert f"fate-{fate.name.lower()}" in classes.split()
        assert html.unescape(spans["fate"]).endswith(
            f"label {example.loaded.tokenizer.convert_ids_to_tokens(label)}")
        assert (int(spans["id"]) == label) == (fate == Fate.KEPT)  # kept: the model reads the label itself


@pytest.mark.parametrize("is_next", [True, False], ids=["IsNext", "NotNext"])
def test_the_examples_loss_and_each_positions_are_transformers_on_its_batch(section_1, is_next):
    registry = section_1[0]
    seed = next(seed for seed in range(60)
                if drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS,
                                                               recipe="paper", seed=seed)).example.is_next == is_next)
    shown = steps.pretraining_example(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                      seed=seed)
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                                          seed=seed))
    batch, weight = example_batch(example.example), example.config.nsp_weight
    theirs = transformers_model(example.loaded.model)
    with torch.no_grad():
        loss, out = transformers_loss(theirs, batch, weight)
    probs = out.prediction_logits[0].softmax(-1)
    label = int(batch["nsp_labels"][0])
    nsp_p = float(out.seq_relationship_logits[0].softmax(-1)[label])
    mlm = torch.nn.functional.cross_entropy(out.prediction_logits[0], batch["mlm_labels"][0])
    text = shown["ex_loss"]
    assert after(text, "each one's label = ") == pytest.approx(float(mlm), abs=6e-5)
    assert f"the label is {'IsNext' if label == IS_NEXT else 'NotNext'}, to which the model gives" in text
    assert after(text, "to which the model gives") == pytest.approx(nsp_p, abs=6e-5)
    total = numbers(text.split("**The loss training minimises**:")[1])
    assert total == pytest.approx([float(mlm), -torch.log(torch.tensor(nsp_p)).item(), float(loss)], abs=2e-4)
    tokenizer = example.loaded.tokenizer
    rows = table_after(shown["ex_loss_table"], "| position |")
    assert [int(row["position"]) for row in rows] == example.example.picked
    for row in rows:
        position = int(row["position"])
        target = int(batch["mlm_labels"][0, position])
        assert row["the model reads"] == example.example.shown[position]
        assert tokenizer.convert_tokens_to_ids(row["label"]) == target
        assert number(row["p(label)"]) == pytest.approx(float(probs[position, target]), abs=6e-4)
        assert tokenizer.convert_tokens_to_ids(row["top guess"]) == int(probs[position].argmax())
        assert number(row["−log p"]) == pytest.approx(-float(probs[position, target].log()), abs=6e-4)


def test_the_shares_table_sets_what_each_recipe_sets(section_1):
    _, shown, example = section_1
    rows = table_after(shown["ex_shares"], "| |")
    picked = rows[0]
    columns = list(picked)
    assert number(picked[columns[1]]) == pytest.approx(example.ours.mask_prob)  # the model's recipe: its rate
    assert number(picked[columns[3]]) == pytest.approx(0.15)  # the paper's, §3.1
    nsp = rows[-1]
    assert nsp[""].startswith("B is what follows A") and number(nsp[columns[3]]) == pytest.approx(0.5)


def forward(registry, step: str, layer: int, head: int, position: int = -1) -> dict:
    return steps.forward_steps(registry, MODEL, text_a=SENTENCE_A, text_b=SENTENCE_B, layer=layer, head=head,
                               step=STEP_NAMES.index(step), position=position)


@pytest.fixture(scope="module")
def typed(drawn_with):
    """transformers' pass over the typed pair, attention and hidden states kept."""
    registry, seed = drawn_with
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                                          seed=seed))
    theirs = transformers_model(example.loaded.model)
    batch = encode_input(example.loaded.model, example.loaded.tokenizer, SENTENCE_A, SENTENCE_B)
    with torch.no_grad():
        out = theirs(**batch, output_attentions=True, output_hidden_states=True)
    return registry, example.loaded.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()), out


@pytest.mark.parametrize("layer, head", [(3, 2), (2, 4), (1, 3)])
def test_a_heads_softmax_is_transformers_attention_of_that_layer_and_head(typed, layer, head):
    registry, tokens, out = typed
    shown = forward(registry, "Attention · Softmax", layer, head)
    heatmap = traces(shown["fw_plot"])[0]
    expected = out.attentions[layer - 1][0, head - 1]
    assert torch.tensor(heatmap["z"]) == pytest.approx(expected, abs=1e-4)  # rows: the token asking
    assert [label.replace("\u200b", "") for label in heatmap["y"]] == [f"{i} {t}" for i, t in enumerate(tokens)]
    assert f"(layer {layer}, head {head})" in shown["fw_text"]
    assert f"**Shape** ({len(tokens)}, {len(tokens)})" in shown["fw_text"]


def test_a_layers_output_is_transformers_hidden_state_after_that_layer(typed):
    registry, _, out = typed
    for layer in range(1, TEST_SHAPE.num_hidden_layers + 1):
        shown = forward(registry, "Feed-forward · The layer's output (LayerNorm)", layer, 1)
        heatmap = traces(shown["fw_plot"])[0]
        assert torch.tensor(heatmap["z"]) == pytest.approx(out.hidden_states[layer][0], abs=2e-3), layer


def test_the_nsp_heads_probabilities_are_isnext_then_notnext_as_transformers_orders_them(typed):
    """transformers' class 0 is "B follows A" (IsNext), class 1 "B is random": the bars name each its own."""
    registry, _, out = typed
    shown = forward(registry, "Next-sentence head · Softmax", 1, 1)
    bars = traces(shown["fw_plot"])[0]
    labels, values = list(bars["y"]), list(bars["x"])
    expected = out.seq_relationship_logits[0].softmax(-1).tolist()
    assert labels[0].startswith("IsNext") and labels[1].startswith("NotNext")
    assert values == pytest.approx(expected, abs=1e-4)


def test_a_tokens_path_is_its_size_guess_and_attention_spread_after_each_layer(typed):
    registry, tokens, out = typed
    position = tokens.index("[MASK]")
    shown = forward(registry, "Embeddings · Word rows", 1, 1)  # -1 follows the first [MASK]
    rows = table_after(shown["fw_path"], "| after |")
    assert [row["after"] for row in rows] == ["the embeddings", *(f"layer {i}" for i in range(1, 4))]
    for depth, row in enumerate(rows):
        assert number(row["size"]) == pytest.approx(float(out.hidden_states[depth][0, position].norm()), abs=0.06)
        if depth:
            attention = out.attentions[depth - 1][0, :, position]  # (heads, tokens): this token's rows
            entropy = -(attention * attention.clamp_min(1e-12).log()).sum(-1)
            assert number(row["attention reads"].split(" tokens")[0]) == pytest.approx(
                float(entropy.exp().mean()), abs=0.06)
            weight, most = attention.mean(0).max(-1)  # the token its heads read most, on average
            piece, shown_weight = plain(row["most"]).rsplit(" ", 1)
            assert (piece, float(shown_weight)) == (tokens[int(most)], pytest.approx(float(weight), abs=6e-3))
    last = out.prediction_logits[0, position].softmax(-1)
    guess = rows[-1]["the head would guess"].split(",")[0].rsplit(" ", 1)
    assert typed[0].catalog.load(MODEL).tokenizer.convert_tokens_to_ids(guess[0]) == int(last.argmax())
    assert float(guess[1]) == pytest.approx(float(last.max()), abs=6e-3)


def test_what_was_cut_to_fit_is_counted_from_each_sides_start_and_end_as_the_pieces_show(section_1):
    """"Cut to fit": how many word pieces went from A's start and end and B's start and end, counted here by finding
    the pieces the model reads in each sentence's own pieces (a swapped side would teach truncation wrongly)."""
    registry = section_1[0]
    checked = 0
    for seed in range(40):
        example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS,
                                                              recipe="paper", seed=seed))
        if not any(example.example.cut):
            continue
        pieces, tokenizer = example.example.pieces, example.loaded.tokenizer
        first_sep = pieces.index("[SEP]")
        kept = {"A": pieces[1:first_sep], "B": pieces[first_sep + 1:-1]}
        counted = []
        for side, segment in (("A", example.example.a), ("B", example.example.b)):
            whole = tokenizer.tokenize(" ".join(segment.sentences))
            start = next(i for i in range(len(whole) - len(kept[side]) + 1)
                         if whole[i:i + len(kept[side])] == kept[side])
            counted += [start, len(whole) - start - len(kept[side])]
        said = steps.pretraining_example(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                         seed=seed)["ex_pair"]
        for n, where in zip(counted, ("A's start", "A's end", "B's start", "B's end")):
            assert (f"{n} from {where}" in said) == (n > 0), (seed, where, said[-300:])
        assert f"{sum(counted)} word pieces went" in said
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_each_sentence_is_said_to_come_from_the_paragraph_and_sentence_it_was_found_in(section_1):
    """"your text, document 3, sentence 3": counted here by finding A's and B's sentences in the typed paragraphs."""
    registry, shown, example = section_1
    paragraphs = [paragraph.split(". ") for paragraph in PARAGRAPHS.split("\n\n")]
    for label, segment in (("Sentence A", example.example.a), ("Sentence B", example.example.b)):
        first = segment.sentences[0].rstrip(".")
        document = next(i for i, sentences in enumerate(paragraphs) if any(s.rstrip(".") == first for s in sentences))
        sentence = next(i for i, s in enumerate(paragraphs[document]) if s.rstrip(".") == first)
        told = shown["ex_pair"].split(f"**{label}**")[1].split(":")[0]
        span = (f"sentence {sentence + 1}" if len(segment.sentences) == 1
                else f"sentences {sentence + 1}-{sentence + len(segment.sentences)}")
        assert f"document {document + 1}, {span}" in told, (label, told)


def test_a_segment_of_several_sentences_is_said_to_span_them_from_its_first(drawn_with):
    """"sentences 2-4": the first of a segment's sentences counted from 1, then its last (short sentences, so that
    a segment holds several)."""
    registry, _ = drawn_with
    text = "\n\n".join(". ".join(f"The {w} {verb}" for verb in ("fell", "rose", "sang", "ran", "slept", "woke")) + "."
                        for w in ("mill", "tower", "bridge", "church"))
    for seed in range(40):
        example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=text, recipe="paper",
                                                              seed=seed)).example
        long = [s for s in (example.a, example.b) if len(s.sentences) > 1]
        if long:
            break
    segment = long[0]
    paragraph = [sentence.rstrip(".") for sentence in text.split("\n\n")[segment.document].split(". ")]
    first = paragraph.index(segment.sentences[0].rstrip("."))  # found here in the typed text
    shown = steps.pretraining_example(registry, MODEL, source=drawn.YOUR_TEXT, typed=text, recipe="paper",
                                      seed=seed)["ex_pair"]
    assert f"document {segment.document + 1}, sentences {first + 1}-{first + len(segment.sentences)}" in shown
