"""The model in checkpoints/: it is the app's default, fits the size budget, and does what its examples claim."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from bert_demo.checkpoint import load_pretrained
from bert_demo.inference import attention, fill_mask, next_sentence
from bert_demo.registry import Registry
from bert_demo.ui import (ATTENTION_EXAMPLES, ATTENTION_LABELS, FILL_EXAMPLES, NSP_EXAMPLES, NSP_LABELS,
                          VIEW_HEAD)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "mini-news-wiki"

# The word each fill-mask example is about, and whether the model ranks it first (see the model card's examples);
# "the [MASK] sat on the [MASK]." has no single answer and is left out.
FILL_ANSWERS = {
    "donald [MASK] was sworn in as president.": ("trump", True),
    "the white [MASK] press secretary said.": ("house", True),
    "the prime [MASK] said the talks would continue.": ("minister", True),
    "prime minister theresa [MASK] said on tuesday.": ("may", True),
    "north korea fired a ballistic [MASK].": ("missile", True),
    "paris is the capital of [MASK].": ("france", False),
    "he scored two [MASK] in the second half.": ("goals", False),
}


@pytest.fixture(scope="module")
def shipped():
    return load_pretrained(SHIPPED, device="cpu")


def test_the_shipped_model_is_the_default_fits_in_25_mb_and_its_card_is_shown_whole(tmp_path):
    registry = Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=tmp_path / "runs", allow_hub=False)
    assert registry.default_model() == "checkpoints/mini-news-wiki"
    assert sum(f.stat().st_size for f in SHIPPED.iterdir()) <= 25 * 2**20
    assert not (SHIPPED / "optimizer.safetensors").exists()
    card = (SHIPPED / "README.md").read_text()
    assert "## Held-out evaluation" in card and "python -m bert_demo train" in card
    shown = registry.model_info("checkpoints/mini-news-wiki")["model_card"]  # what the Model tab shows: all of it
    assert shown.startswith("\n# mini-news-wiki") and shown.rstrip().endswith(card.rstrip()[-200:])


def test_fill_mask_examples_are_right_or_wrong_as_the_card_says(shipped):
    model, tokenizer = shipped
    assert set(FILL_ANSWERS) < {row[0] for row in FILL_EXAMPLES}
    for text, (answer, first) in FILL_ANSWERS.items():
        best = fill_mask(model, tokenizer, text, top_k=1)[0][0][0]
        assert (best == answer) == first, (text, best)


def test_next_sentence_examples_are_judged_as_their_labels_say(shipped):
    model, tokenizer = shipped
    for (a, b), label in zip(NSP_EXAMPLES, NSP_LABELS, strict=True):
        p = next_sentence(model, tokenizer, a, b)
        assert (p > 0.5) == (label.startswith("continuation") and "misses" not in label), (label, p)


def test_attention_examples_show_the_pattern_their_labels_name(shipped):
    model, tokenizer = shipped
    for (a, b, layer, head, view, _), label in zip(ATTENTION_EXAMPLES, ATTENTION_LABELS, strict=True):
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
        else:
            assert view != VIEW_HEAD and label.startswith("rollout"), label
