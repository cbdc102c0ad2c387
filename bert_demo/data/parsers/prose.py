"""Cleaning shared by the parsers: what markup leaves behind is tidied, lines that are not running prose are told
apart, and repeated documents are dropped, so that every source hands `to_documents` plain paragraphs."""
from __future__ import annotations

import hashlib
import re

MIN_PROSE_WORDS = 6  # a line with fewer words is a caption, table cell, heading or list item
LETTERS = re.compile(r"[A-Za-z]")
BRACKETS = re.compile(r"\s*\[[^\[\]]*\]")  # "[Bakunin, p. 9]", "[Jargon File]", with the space before
BRACES = re.compile(r"[{}]")  # dictionaries' {cross references}
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE = re.compile(r"\s+([,.;:!?’”)\]])")
_SPACE_AFTER = re.compile(r"([“‘(\[])\s+")
_CODE_CHARACTERS = re.compile(r"[{}<>|\\]|=>|->|::|\$\w|#!|&&")
_AN_EXCEPTIONS = re.compile(r"(uni|use|usu|eu|one|once|ubiq|ure|uro|uti|ut[aeo]|uk)", re.IGNORECASE)
_AN_SILENT_H = re.compile(r"(hour|honest|honor|honour|heir)", re.IGNORECASE)


def squash(text: str) -> str:
    """Runs of whitespace, newlines included, as one space; no space at either end."""
    return _SPACES.sub(" ", text).strip()


def tidy(text: str) -> str:
    """Spaces squashed, none before closing punctuation or after an opening bracket or curly quote (what removed
    markup leaves: "God ,", "( very", "“ What")."""
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", squash(text)))


def is_prose(line: str) -> bool:
    """A line of running prose: enough words, mostly letters, no code-like characters."""
    if len(line.split()) < MIN_PROSE_WORDS:
        return False
    letters = sum(c.isalpha() for c in line)
    return letters >= 0.6 * len(line.replace(" ", "")) and not _CODE_CHARACTERS.search(line)


def dedupe(documents: list[list[str]]) -> list[list[str]]:
    """Documents in order, each kept once (by its sentences): copies of a page or an entry would be seen twice."""
    seen, kept = set(), []
    for document in documents:
        key = hashlib.sha1("\n".join(document).encode()).digest()
        if key not in seen:
            seen.add(key)
            kept.append(document)
    return kept


def indefinite_article(word: str) -> str:
    """"a" or "an" before a word, by its spelling (a united, an hour, an apple): dictionary headwords become
    sentences ("An abstainer is ...")."""
    vowel = word[:1].lower() in "aeiou" and not _AN_EXCEPTIONS.match(word)
    return "an" if vowel or _AN_SILENT_H.match(word) else "a"
