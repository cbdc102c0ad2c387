"""Prose into sentences and documents: the splitting every corpus goes through, in linear time on any input.

`split_sentences` keeps abbreviations, initials and decimals together; `to_documents` turns each document's paragraphs
into its list of sentences; `paragraphs` reads blank-line separated, hard-wrapped text. A visitor's upload goes
through all three, so none of them may be slower than linear (see the pathological-input tests).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

MIN_WORDS, MAX_WORDS = 2, 100  # shorter sentences carry no signal; longer ones are tables or run-on lists


# Abbreviations, as written, that are followed by a capital or a digit without ending the sentence: titles before
# names, "Jan. 5", "No. 5", "Fig. 2", "et al. 2012". Only these matter: before a lower-case word there is no split
# anyway, and "Inc." or "Jr." before a capital usually does end a sentence. Initials ("J.") and dotted acronyms
# ("U.S.", "e.g.") are recognised by their shape instead; the price is that "vitamin C. It" stays one sentence.
ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr Prof St Mt Ft Rev Fr Gen Col Lt Sgt Capt Gov Sen Sens Rep Reps Pres Hon Messrs Mme Mlle Bros "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec No Nos Vol Fig Ch Sec Art pp vol fig vs cf ca approx al".split()
)
CLOSERS = "\"'”’)]"  # closing quotes and brackets that may follow a sentence's final punctuation
OPENERS = "\"'“‘(["  # opening quotes and brackets that may come before a sentence's first character
_INITIAL_OR_ACRONYM = re.compile(r"[A-Za-z](\.[A-Za-z])*")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences, keeping abbreviations, initials and decimals together.

    A sentence ends at a word that ends in . ! ? or an ellipsis (plus any closing quotes or brackets) when the next
    word starts with a capital or a digit. Sentences of fewer than MIN_WORDS or more than MAX_WORDS words are
    dropped: the first carry no signal for BERT, the second are almost always tables or lists that lost their markup.

    It reads a visitor's upload, so it looks at each word once, with string methods: linear time on any input,
    however long its words or runs of punctuation.
    """
    words = text.split()  # one space everywhere, newlines included
    sentences, start = [], 0
    for i in range(len(words) - 1):
        if _starts_sentence(words[i + 1]) and _ends_sentence(words[i]):
            sentences.append(words[start : i + 1])
            start = i + 1
    sentences.append(words[start:])
    return [" ".join(s) for s in sentences if MIN_WORDS <= len(s) <= MAX_WORDS]


def _starts_sentence(word: str) -> bool:
    """Whether a word can open a sentence: a capital or a digit, after at most one opening quote or bracket."""
    first = word[1:2] if word[0] in OPENERS else word[0]
    return first.isascii() and (first.isupper() or first.isdigit())


def _final_punctuation(word: str) -> tuple[str, str]:
    """(stem, punctuation) of a word that ends a clause: "Dr." -> ("Dr", "."), "end?!)" -> ("end", "?!"); the
    punctuation is "" when the word does not end in . ! ? or an ellipsis."""
    core = word.rstrip(CLOSERS)
    if core.endswith("…"):
        return core[:-1], "…"
    stem = core.rstrip(".!?")
    return stem, core[len(stem):]


def is_complete(sentence: str) -> bool:
    """Whether a sentence ends like one (. ! ? or an ellipsis, then any closing quotes or brackets)."""
    return sentence.rstrip(CLOSERS).endswith((".", "!", "?", "…"))


def _ends_sentence(word: str) -> bool:
    """Whether a word ends a sentence: it ends in . ! ? or an ellipsis, and is not "Dr.", "J.", "U.S." or "e.g."."""
    stem, punctuation = _final_punctuation(word)
    if not punctuation:
        return False
    stem = stem.lstrip(OPENERS)
    if punctuation != "." or not stem:
        return True
    return stem not in ABBREVIATIONS and not _INITIAL_OR_ACRONYM.fullmatch(stem)


def to_documents(paragraphs_per_document: Iterable[Iterable[str]], complete_only: bool = False) -> list[list[str]]:
    """Split each document's paragraphs into sentences, dropping documents left with none.

    With `complete_only`, pieces that do not end like a sentence are dropped: in parsed web text they are captions,
    datelines or lines cut short where markup was removed.
    """
    documents = []
    for paragraphs in paragraphs_per_document:
        sentences = [s for paragraph in paragraphs for s in split_sentences(paragraph)
                     if not complete_only or is_complete(s)]
        if sentences:
            documents.append(sentences)
    return documents



def paragraphs(text: str) -> Iterator[list[str]]:
    """Blank-line separated paragraphs, each as a one-item list (one document each); linear time on any input."""
    paragraph: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            yield ["\n".join(paragraph)]
            paragraph = []
    if paragraph:
        yield ["\n".join(paragraph)]
