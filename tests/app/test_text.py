"""bert_demo/app/text.py: the header's line about the model, the page, the Fine-tune tab and the cards agreeing on
how much text the shipped models read, and a text escaped to be shown as it is."""
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


def test_the_page_the_fine_tune_tab_and_the_cards_agree_on_how_much_text_the_shipped_models_read():
    """The header said "13 million words", the card "a few million words"."""
    for model, said in text.WORDS_READ.items():
        metadata = json.loads((SHIPPED / model / "bert_demo.json").read_text())
        corpus = metadata["train_config"]["corpus"]
        if corpus in MIX_ABOUT:
            assert re.search(r"([\d.]+) M words", MIX_ABOUT[corpus])[1] == said.split()[0]
        card = (SHIPPED / model / "README.md").read_text()
        assert "million words" not in card or said in card
    assert f"on {text.WORDS_READ['small-english']} words" in text.INTRO


def test_an_escaped_text_has_nothing_markdown_or_html_would_read_and_is_shown_as_it_was():
    said = "a|b *x* _y_ <i> `c` \\ &amp; {z} [MASK] ##s"
    shown = text.escape(said)
    assert not set(shown) & set("|*_<>`\\{}") and "&amp;" not in shown
    assert html.unescape(shown) == said  # what Markdown and the browser show: each reference as its character
