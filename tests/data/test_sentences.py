"""Sentence splitting: abbreviations, initials and decimals kept together, and agreement with the old regex splitter
on any text (the linear-time guarantee is checked on whole uploads in test_corpus.py)."""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from bert_demo.data.sentences import ABBREVIATIONS, MAX_WORDS, MIN_WORDS, split_sentences

# ---------------------------------------------------------------------------------------------------------------
# split_sentences


def test_split_sentences_keeps_abbreviations_together():
    text = ("Dr. Smith went to Washington, D.C. on Monday. Mr. and Mrs. Brown met St. John in Jan. 1990. "
            "No. 5 was built in the U.S. Army base, e.g. Fort Bragg. Smith et al. 2012 disagree. It ended.")
    assert split_sentences(text) == [
        "Dr. Smith went to Washington, D.C. on Monday.",
        "Mr. and Mrs. Brown met St. John in Jan. 1990.",
        "No. 5 was built in the U.S. Army base, e.g. Fort Bragg.",
        "Smith et al. 2012 disagree.",
        "It ended.",
    ]


def test_split_sentences_keeps_initials_and_decimals_together():
    text = "J. R. R. Tolkien wrote The Hobbit. It sold 3.5 million copies by 1960. The answer is no. Then it grew."
    assert split_sentences(text) == [
        "J. R. R. Tolkien wrote The Hobbit.",
        "It sold 3.5 million copies by 1960.",
        "The answer is no.",
        "Then it grew.",
    ]


def test_split_sentences_splits_after_closing_quotes_and_brackets():
    text = 'He said "Hi." Then he left. (It was raining.) “Go home,” she said. ‘Why not?’ He stayed.'
    assert split_sentences(text) == [
        'He said "Hi."', "Then he left.", "(It was raining.)", "“Go home,” she said.", "‘Why not?’",
        "He stayed.",
    ]


def test_split_sentences_handles_ellipses_questions_and_newlines():
    text = "We waited... The bus came at last.\nWas it late? Yes, very late! The driver… Nobody asked him."
    assert split_sentences(text) == [
        "We waited...", "The bus came at last.", "Was it late?", "Yes, very late!", "The driver…",
        "Nobody asked him.",
    ]
    assert split_sentences("Wait... for it, the crowd said.") == ["Wait... for it, the crowd said."]


def test_split_sentences_drops_one_word_and_overlong_sentences():
    overlong = " ".join(["word"] * (MAX_WORDS + 1)) + "."
    assert split_sentences(f"Yes. {overlong} The short one stays. Fine.") == ["The short one stays."]




# The regex splitter this project used until a 60 KB word froze the app (quadratic time): the reference the linear
# splitter must agree with on every input.
_OLD_BOUNDARY = re.compile(r"""(\S*?)([.!?]+|…)(["'”’)\]]*)\s+(?=["'“‘(\[]?[A-Z0-9])""")


def regex_split_sentences(text: str) -> list[str]:
    text = " ".join(text.split())
    sentences, start = [], 0
    for match in _OLD_BOUNDARY.finditer(text):
        word = match.group(1).lstrip("\"'“‘([")
        ends = match.group(2) != "." or not word or (
            word not in ABBREVIATIONS and not re.fullmatch(r"[A-Za-z](\.[A-Za-z])*", word))
        if ends:
            sentences.append(text[start:match.end(3)])
            start = match.end()
    sentences.append(text[start:])
    return [s for s in sentences if MIN_WORDS <= len(s.split()) <= MAX_WORDS]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["Dr.", "J.", "U.S.", "e.g.", "end.", "end?!", "it…", '"Yes."', "(No.)", "A",
                                 "b", "7", "3.5", "...", "“Quote", "(Paren", "x.)", "Mr", "no.", "é", ".", "'",
                                 " ", "\n", "\n\n", "\t"]), max_size=40).map("".join))
def test_split_sentences_agrees_with_the_old_regex_splitter_on_any_text(text):
    assert split_sentences(text) == regex_split_sentences(text)
