"""The model in checkpoints/: it is the app's default, fits the size budget, and does what its examples claim."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from bert_demo.checkpoint import load_pretrained
from bert_demo.inference import attention, attention_rollout, drop_tokens, fill_mask, next_sentence
from bert_demo.model_card import CURVE_NAME
from bert_demo.app.models import read_examples
from bert_demo.app.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
NAME = "mini-english"
SHIPPED = ROOT / "checkpoints" / NAME
CLAIMS = json.loads((SHIPPED / "examples.json").read_text())  # each example the app shows, with what it claims


@pytest.fixture(scope="module")
def shipped():
    return load_pretrained(SHIPPED, device="cpu")


def test_the_shipped_model_is_the_default_fits_in_25_mb_and_its_card_is_shown_whole(tmp_path):
    registry = Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=tmp_path / "runs", allow_hub=False)
    assert registry.default_model() == f"checkpoints/{NAME}"
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) <= 25 * 2**20
    assert not (SHIPPED / "optimizer.safetensors").exists()
    card = (SHIPPED / "README.md").read_text()
    assert "## Metrics" in card and "python -m bert_demo train" in card and "(never seen)" in card
    assert (SHIPPED / CURVE_NAME).read_text().startswith("<svg")
    shown = registry.model_info(f"checkpoints/{NAME}")["model_card"]  # what the Model tab shows: all of it
    assert shown.startswith(f"\n# {NAME}") and shown.rstrip().endswith(card.rstrip()[-200:])


def test_the_app_shows_every_example_of_the_shipped_model():
    examples = read_examples(SHIPPED)
    assert examples.fill_mask == [e["text"] for e in CLAIMS["fill_mask"]]
    assert [label for *_, label in examples.next_sentence] == [e["label"] for e in CLAIMS["next_sentence"]]
    assert [label for *_, label in examples.attention] == [e["label"] for e in CLAIMS["attention"]]


def test_fill_mask_examples_are_right_or_wrong_as_claimed(shipped):
    """The word each example is about, and whether the model ranks it first; an example without an "answer"
    ("the [MASK] sat on the [MASK].") has no single answer."""
    model, tokenizer = shipped
    claims = [e for e in CLAIMS["fill_mask"] if "answer" in e]
    assert len(claims) >= 5
    for claim in claims:
        best = fill_mask(model, tokenizer, claim["text"], top_k=1)[0][0][0]
        assert (best == claim["answer"]) == claim["first"], (claim, best)


def test_next_sentence_examples_are_judged_as_their_labels_say(shipped):
    model, tokenizer = shipped
    for claim in CLAIMS["next_sentence"]:
        p = next_sentence(model, tokenizer, claim["a"], claim["b"])
        assert (p > 0.5) == claim["follows"], (claim["label"], p)
        assert claim["follows"] == (claim["label"].startswith("continuation") and "misses" not in claim["label"])


def test_attention_examples_show_the_pattern_their_labels_name(shipped):
    model, tokenizer = shipped
    for claim in CLAIMS["attention"]:
        a, b, layer, head, view, label = (claim[k] for k in ("a", "b", "layer", "head", "view", "label"))
        tokens, weights = attention(model, tokenizer, a, b)
        matrix = weights[layer - 1, head - 1]
        words = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
        if match := re.search(r"the (previous|next) token$", label):
            offset = -1 if match[1] == "previous" else 1
            share = torch.stack([matrix[i, i + offset] for i in words]).mean()
            assert share > 0.6, (label, share)
        elif match := re.search(r"“(.+)” looks at “(.+)”$", label):
            assert matrix[tokens.index(match[1])].argmax() == tokens.index(match[2]), label
        elif match := re.search(r"most words look at (.+)$", label):
            targets = re.findall(r"“(.+?)”", match[1])
            looking = sum(tokens[matrix[i].argmax()] in targets for i in words)
            assert looking > len(words) / 2, (label, looking, len(words))
        elif re.search(r"^rollout: .* every word draws most on its own sentence$", label):
            assert view == "rollout" and claim["hide_special"]
            shown, flow = drop_tokens(tokens, attention_rollout(weights)[layer - 1])  # (T', T'), rows sum to 1
            first = tokens.index("[SEP]") - 1  # words of sentence A, once [CLS] is dropped
            own = [flow[i, :first].sum() if i < first else flow[i, first:].sum() for i in range(len(shown))]
            assert min(own) > 0.5, (label, own)
        else:
            raise AssertionError(f"no check for the claim {label!r}: write one")
