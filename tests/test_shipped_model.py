"""The model in checkpoints/: it is the app's default, fits the size budget, and does what its examples claim, as the
app shows them (its page as `build_demo` makes it, its answers from the handlers in bert_demo/app/tabs/)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import gradio as gr
import pytest
import torch

from bert_demo.app.registry import Registry
from bert_demo.app.tabs import attention, fill, nsp
from bert_demo.app.tabs.attention import VIEWS
from bert_demo.app.ui import build_demo
from bert_demo.inspection.card import CURVE_NAME

ROOT = Path(__file__).resolve().parents[1]
NAME = "small-english"
SHIPPED = ROOT / "checkpoints" / NAME
MODEL = f"checkpoints/{NAME}"
CLAIMS = json.loads((SHIPPED / "examples.json").read_text())  # each example the app shows, with what it claims
# every model in checkpoints/
EVERY_SHIPPED = sorted(folder for folder in (ROOT / "checkpoints").iterdir() if (folder / "config.json").is_file())


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """The app's registry over the repository's checkpoints/, as `python app.py` starts with."""
    return Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=tmp_path_factory.mktemp("runs"), allow_hub=False)


def test_the_app_opens_on_the_shipped_model_and_lists_it_first(registry):
    assert registry.catalog.default_model() == MODEL == registry.catalog.list_models()[0].name


@pytest.mark.parametrize("folder", EVERY_SHIPPED, ids=lambda folder: folder.name)
def test_each_shipped_model_fits_in_48_mib_of_files_under_25_mb_has_no_optimizer_and_its_card_is_shown_whole(
        registry, folder):
    assert sum(f.stat().st_size for f in folder.iterdir()) <= 48 * 2**20  # BERT-Small's weights in bf16: 41.6 MiB
    assert max(f.stat().st_size for f in folder.iterdir()) < 25 * 10**6  # larger weights go in shards (`ship`)
    assert not (folder / "optimizer.safetensors").exists()
    card = (folder / "README.md").read_text()
    assert "## Metrics" in card and "python -m bert_demo train" in card and "(never seen)" in card
    assert (folder / CURVE_NAME).read_text().startswith("<svg")
    shown = registry.catalog.model_info(f"checkpoints/{folder.name}")["model_card"]  # the Model tab shows all of it
    assert shown.startswith(f"\n# {folder.name}") and shown.rstrip().endswith(card.rstrip()[-200:])


def test_the_app_shows_every_example_of_the_shipped_model(registry):
    tables = [block for block in build_demo(registry).blocks.values() if isinstance(block, gr.Dataset)]
    fill, pairs, heads = [(table.samples, table.sample_labels) for table in tables]  # the three tabs, in order
    assert fill == ([[e["text"]] for e in CLAIMS["fill_mask"]], None)
    assert pairs == ([[e["a"], e["b"]] for e in CLAIMS["next_sentence"]], [e["label"] for e in CLAIMS["next_sentence"]])
    assert heads == ([[e["a"], e["b"], e["layer"], e["head"], VIEWS[e["view"]], e["hide_special"]]
                      for e in CLAIMS["attention"]], [e["label"] for e in CLAIMS["attention"]])


def test_fill_mask_examples_are_right_or_wrong_as_claimed(registry):
    """The word each example is about, and whether the app ranks it first; an example without an "answer"
    ("the [MASK] sat on the [MASK].") has no single answer."""
    claims = [e for e in CLAIMS["fill_mask"] if "answer" in e]
    assert len(claims) >= 5
    for claim in claims:
        [best] = fill.fill_mask(registry, MODEL, sentence=claim["text"],
                                top_k=1)["mask_label_0"]  # the first [MASK]'s list
        assert (best == claim["answer"]) == claim["first"], (claim, best)


def test_next_sentence_examples_are_judged_as_their_labels_say(registry):
    for claim in CLAIMS["next_sentence"]:
        p = nsp.next_sentence(registry, MODEL, text_a=claim["a"], text_b=claim["b"])["nsp_result"]["B follows A"]
        assert (p > 0.5) == claim["follows"], (claim["label"], p)
        assert claim["follows"] == (claim["label"].startswith("continuation") and "misses" not in claim["label"])


def test_attention_examples_show_the_pattern_their_labels_name(registry):
    tokenizer = registry.catalog.load(MODEL).tokenizer
    for claim in CLAIMS["attention"]:
        a, b, layer, head, view, label = (claim[k] for k in ("a", "b", "layer", "head", "view", "label"))
        shown = attention.attention(registry, MODEL, text_a=a, text_b=b, layer=layer, head=head, view=VIEWS[view],
                                    hide=claim["hide_special"])["att_plot"]
        rows, cols = list(shown.layout.yaxis.ticktext), list(shown.layout.xaxis.ticktext)  # the map's tokens
        matrix = torch.tensor(shown.data[0].z)  # as drawn: [CLS]/[SEP] hidden where the example hides them
        words = [i for i, t in enumerate(rows) if t not in ("[CLS]", "[SEP]")]
        if match := re.search(r"the (previous|next) token$", label):
            offset = -1 if match[1] == "previous" else 1
            share = torch.stack([matrix[i, i + offset] for i in words]).mean()
            assert share > 0.6, (label, share)
        elif match := re.search(r"“(.+)” looks at “(.+)”$", label):
            assert matrix[rows.index(match[1])].argmax() == cols.index(match[2]), label
        elif match := re.search(r"most words look at (.+)$", label):
            targets = re.findall(r"“(.+?)”", match[1])
            looking = sum(cols[matrix[i].argmax()] in targets for i in words)
            assert looking > len(words) / 2, (label, looking, len(words))
        elif re.search(r"^rollout: .* every word draws most on its own sentence$", label):
            assert view == "rollout" and claim["hide_special"] and "[SEP]" not in rows
            first = len(tokenizer.tokenize(a))  # the words of sentence A come first
            own = [matrix[i, :first].sum() if i < first else matrix[i, first:].sum() for i in range(len(rows))]
            assert min(own) > 0.5, (label, own)
        else:
            raise AssertionError(f"no check for the claim {label!r}: write one")
