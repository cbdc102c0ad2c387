"""bert_demo/app/text.py: the header's line about the model, how much text the shipped models read as the page and the
Fine-tune tab say it (their records' counts), and a text escaped to be shown as it is."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from bert_demo.app import text
from bert_demo.config import BertConfig
from bert_demo.data.sources import MIX_ABOUT

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"
SHAPE = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
         "max_position_embeddings": 512, "hidden_dropout_prob": 0.0}


def test_the_header_says_which_model_how_big_and_where_it_runs():
    config = BertConfig(**SHAPE, vocab_size=8192)
    assert text.model_summary("checkpoints/mini-english", config, "cpu") == (
        "checkpoints/mini-english: 4 layers, hidden size 256, 4 heads, vocabulary 8,192; runs on cpu")


def test_the_page_and_the_fine_tune_tab_say_how_much_each_shipped_model_read_as_its_record_counted_it():
    """Issue 81: the counts were written by hand in text.py (and the header once said "13 million", the card "a few
    million"). Each shipped model's record counts its training documents' words; the page reads them there."""
    from bert_demo.app import header
    from bert_demo.app.state.catalog import OPENS_ON
    from bert_demo.app.tabs import finetune

    said = {}
    for model in ("small-english", "mini-english"):
        metadata = json.loads((SHIPPED / model / "bert_demo.json").read_text())
        said[model] = f"{metadata['training_words'] / 1e6:.1f} million words"  # the count, as the page rounds it
        corpus = metadata["train_config"]["corpus"]
        if corpus in MIX_ABOUT:  # the training split is the mix less its held-out documents (5 %, whole ones)
            mix = float(re.search(r"([\d.]+) M words", MIX_ABOUT[corpus])[1]) * 1e6
            assert 0.9 * mix < metadata["training_words"] < mix
    assert f"on {said[OPENS_ON]} of English (corpus v4" in header.intro()
    assert json.loads((SHIPPED / OPENS_ON / "bert_demo.json").read_text())["train_config"]["corpus"] == "v4"
    assert f"mini-english read {said['mini-english']} (" in finetune.INTRO
    assert f"small-english {said['small-english']};" in finetune.INTRO


def test_a_model_whose_record_counted_no_words_is_said_to_have_read_a_corpus_not_a_number(tmp_path):
    from bert_demo.app.folders import training_words

    for kept in ("{}", '{"training_words": null}', '{"training_words": true}', '{"training_words": "12 M"}'):
        (tmp_path / "bert_demo.json").write_text(kept)
        assert training_words(tmp_path) is None and text.words_read(training_words(tmp_path)) == "a corpus"
    (tmp_path / "bert_demo.json").write_text('{"training_words": 12160000}')
    assert text.words_read(training_words(tmp_path)) == "12.2 million words"
    assert text.words_read(56_789) == "56,789 words" and text.words_read(999_999) == "999,999 words"
    assert training_words(tmp_path / "no-such-model") is None


def test_an_escaped_text_has_nothing_markdown_or_html_would_read_and_is_shown_as_it_was():
    said = "a|b *x* _y_ <i> `c` \\ &amp; {z} [MASK] ##s"
    shown = text.escape(said)
    assert not set(shown) & set("|*_<>`\\{}") and "&amp;" not in shown
    assert html.unescape(shown) == said  # what Markdown and the browser show: each reference as its character
