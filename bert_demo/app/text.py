"""What the page says before any tab: the introduction and where to start, the header's line about the model, what
it says when there is no model yet; and `escape`, which every tab's views use to show a text as it is. Each
tab's own words are in its views module (`tabs/train_views.py`, `model_views.py`, `fill_views.py`,
`attention_views.py`, `steps_views.py`, `learning_views.py`, `lecture_views.py`); times are `estimates.py`'s words;
the fine-tuning verdict is `verdict.py`'s."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bert_demo.config import BertConfig

INTRO = """# BERT, from scratch
A small BERT, built and pre-trained by this project on {read} of English (corpus v4:
modern prose and conversation). Below, it already fills in the `[MASK]` of a sentence: change the sentence and press
Enter. Then look inside it, train your own, and fine-tune it to see what pre-training bought.
"""

START_HERE = (("fill", "① Its guesses"), ("attention", "② Where it looks"), ("steps", "③ Step by step"),
              ("train", "④ Train your own"), ("finetune", "⑤ What pre-training buys"))  # (tab, words): the buttons

NO_MODEL = ("⚠️ There is no model yet: train one in the **Train** tab (a few minutes with the defaults). "
            "It then appears in the model selector.")


def model_summary(name: str, config: BertConfig, device: str) -> str:
    """The header's line: which model, how big, where it runs."""
    return (f"{name}: {config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
            f"{config.num_attention_heads} heads, vocabulary {config.vocab_size:,}; runs on {device}")


LITERAL = str.maketrans({c: f"&#{ord(c)};" for c in "&<>\\`*_{}|"})  # each such character as its reference


def words_read(count: int | None) -> str:
    """How much a model read, as the page says it: "12.2 million words" ("56,789 words" under a million), from the
    count its record keeps (`folders.training_words`); "a corpus" where it kept none."""
    if not count:
        return "a corpus"
    return f"{count / 1e6:.1f} million words" if count >= 1e6 else f"{count:,} words"


def escape(text: str) -> str:
    """Text shown as it is, in Markdown (a table's cell, a quote) and in HTML alike: "|" must not end a cell, nor "*"
    or "_" start emphasis, "`" code, "<" a tag or "&" an entity, so each is written as its character reference, which
    Markdown and the browser both show as the character. ("[MASK]" is no link without a "(" after it, and "##s" is
    no heading inside a cell or a quote.)"""
    return text.translate(LITERAL)


def rate(value: float) -> str:
    """A small number as a paper writes it: 1e-4 and 7e-4, not 0.0001 and 0.0007; 0.01 and 0.5 as they are."""
    if value == 0 or abs(value) >= 1e-2:
        return f"{value:g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"
