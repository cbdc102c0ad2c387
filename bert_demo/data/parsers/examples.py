"""Example sentences: the plain sentences a dictionary gives to show its words in use. "ding" is the English side of
Ding's German-English dictionary (Debian trans-de-en): everyday English about homes, meals, health, shopping, work
and school, written to show how people say things ("I scraped my knee when I fell.", "Can I pay by card?").

Ding's file has an entry per line, "German :: English", each side's senses split by "|" and their synonyms by ";".
Most English senses are words or phrases ("to keep sth. in the fridge"); only those that are whole sentences are
kept. Their notation is taken out the way a reader would: usage labels ("[Br.]") and asides or optional words in
round brackets are dropped ("what(so)ever" reads "whatever"), and of "might/could/will" the first word is read.
Sentences that cannot be read as one sentence are left out: gaps to fill ("sb.", "sth.", "..."), and alternatives of
several words ("from person to person / from place to place"). Each entry's sentences are a document: they show one
word, so they belong together.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from bert_demo.data.parsers.packages import deb_file, debian, fetch, file_text
from bert_demo.data.parsers.prose import tidy
from bert_demo.data.sentences import CLOSERS, OPENERS, to_documents

DING = debian("trans-de-en=1.9-6", "pool/main/d/ding/trans-de-en_1.9-6_all.deb",
              "45f6b4cf1c434776fba6811d7bc522efabb5425c43ba8afd0e289bf9e2e53df4")
_DING_FILE = "usr/share/trans/de-en"
MIN_EXAMPLE_WORDS = 3  # "Come in!" is a sentence, but too short to teach a word its context
_GAPS = re.compile(r"…|\.\.\.|\b(?i:sb|sth|jd|etw)\b|[{}]|\s/|/\s")  # a pattern, or alternatives of several words
_LABEL = re.compile(r"\s*\[[^\[\]]*\]")  # [Br.], [coll.], [Am.]
_ASIDE = re.compile(r"\s*\([^()]*\)")  # "(easy)", "(with it)": a gloss or an optional word, with the space before
_ALTERNATIVES = re.compile(r"\b([A-Za-z']+)(?:/[A-Za-z']+)+\b")  # "might/could/will" -> "might", not "24/7"


def example_sentence(text: str) -> str | None:
    """One English sense as a plain sentence, or None where it is not a whole sentence of MIN_EXAMPLE_WORDS words
    or more: labels and asides dropped, the first of single-word alternatives kept, curly apostrophes made straight
    (as the other sources and the everyday sentences write them)."""
    text = text.strip().replace("’", "'")
    if _GAPS.search(text):
        return None
    text = _ALTERNATIVES.sub(r"\1", _ASIDE.sub("", _LABEL.sub("", text)))
    text = tidy(text).replace("..", ".")  # "The jig is up. [Am.]." -> "The jig is up."
    first = text.lstrip(OPENERS)[:1]
    if not (first.isupper() or first.isdigit()) or not text.rstrip(CLOSERS).endswith((".", "!", "?")):
        return None
    if any(c in text for c in "/[]()") or len(text.split()) < MIN_EXAMPLE_WORDS:
        return None
    return text


def ding_entries(text: str) -> Iterator[list[str]]:
    """Each entry's English example sentences, in the file's order; comment lines are skipped."""
    for line in text.splitlines():
        if line.startswith("#") or "::" not in line:
            continue
        senses = line.split("::", 1)[1].split("|")
        sentences = (example_sentence(synonym) for sense in senses for synonym in sense.split(";"))
        yield [s for s in sentences if s]


def parse_ding(cache: Path) -> list[list[str]]:
    """The English example sentences of Ding's German-English dictionary, an entry's sentences a document; a
    sentence that an earlier entry already gave (case aside) is kept there only."""
    text = file_text(deb_file(fetch(DING, cache), _DING_FILE))
    seen: set[str] = set()
    documents = []
    for sentences in ding_entries(text):
        new = [s for s in sentences if s.lower() not in seen]
        seen.update(s.lower() for s in new)
        documents.append(new)
    return to_documents(documents, complete_only=True)
