"""Dictionaries as prose: "devil" (Bierce's The Devil's Dictionary) and "foldoc" (the Free On-line Dictionary of
Computing), both dictd databases, and "jargon" (the Jargon File, plain text); all Debian packages.

A dictd database is an .index of tab-separated headword, offset and length (in base 64) and a .dict.dz of the
entries (gzip-compatible), read here without dictd. Headwords, pronunciations and cross-reference marks are removed
so that each entry reads as sentences.
"""
from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from bert_demo.data.parsers.packages import deb_file, deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import BRACES, BRACKETS, dedupe, indefinite_article, is_prose, squash, tidy
from bert_demo.data.sentences import paragraphs, to_documents

DEVIL = debian("dict-devil=1.0-13.1", "pool/main/d/dict-devil/dict-devil_1.0-13.1_all.deb",
               "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154")
FOLDOC = debian("dict-foldoc=20230119-1", "pool/main/d/dict-foldoc/dict-foldoc_20230119-1_all.deb",
                "745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3")
JARGON = debian("jargon-text=4.4.7-4.1", "pool/main/j/jargon-text/jargon-text_4.4.7-4.1_all.deb",
                "17d05997e30eb3d5d6713929b8e2f81b63a5f50073858ad2a06701c71f54dcdb")

_DICTD_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def dictd_entries(index: str, data: bytes) -> Iterator[str]:
    """Each entry of a dictd database once (several headwords can share one), in index order, without the
    00-database entries; `data` is the uncompressed .dict, the .index gives each headword's offset and length."""
    seen = set()
    for line in index.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        offset, length = (sum(_DICTD_B64[c] * 64 ** i for i, c in enumerate(reversed(p))) for p in parts[1:3])
        if offset not in seen:
            seen.add(offset)
            yield data[offset:offset + length].decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------------------------
# "devil": Ambrose Bierce's The Devil's Dictionary (1911)

_DICT_ENTRY = re.compile(r"([A-Z][A-Z'\- ]*[A-Z]), (n|v|v\.t|v\.i|adj|adv|x|pp|p\.p|pron|prep|interj|conj|pl)\.\s+")


def parse_devil(cache: Path) -> list[list[str]]:
    """Each entry of The Devil's Dictionary is a document: "ABSTAINER, n. A weak person who ..." becomes "An
    abstainer is a weak person who ...", other entries "Absolute, adj.: Independent, ..."; the verse quotations
    (indented) and etymologies in brackets are dropped, and so is the dictd header."""
    text = file_text(gzip.decompress(deb_file(fetch(DEVIL, cache), "usr/share/dictd/devil.dict.dz")))
    entries: list[list[str]] = []
    for [paragraph] in paragraphs(text):
        if paragraph.startswith(" "):
            continue  # verse, attributions and the header
        flat = BRACES.sub("", BRACKETS.sub("", squash(paragraph)))
        entry = _DICT_ENTRY.match(flat)
        if entry:
            entries.append([_devil_definition(entry.group(1).capitalize(), entry.group(2), flat[entry.end():])])
        elif entries:
            entries[-1].append(flat)
    return to_documents(entries, complete_only=True)


def _devil_definition(word: str, pos: str, definition: str) -> str:
    """A headword and its definition as a sentence where the definition starts with an article, else as a label."""
    if pos == "n" and re.match(r"(An?|The) ", definition):
        return f"{indefinite_article(word).capitalize()} {word.lower()} is {definition[0].lower()}{definition[1:]}"
    return f"{word}, {pos}.: {definition}"


# ----------------------------------------------------------------------------------------------------------------
# "foldoc": the Free On-line Dictionary of Computing

_URL = re.compile(r"\s*\(?\b(?:https?|ftp|news|mailto|telnet|gopher):[^\s)]*\)?|\s*\(?\bwww\.[^\s)]*\)?")
_FOLDOC_FIXES = [  # (pattern, replacement), in order
    (re.compile(r"^\s*(<[^<>]+>\s*)+"), ""),  # "<programming> " domain labels
    (re.compile(r"\(\d{4}-\d\d-\d\d\)"), ""),  # "(1994-11-08)" dates
    (BRACES, ""),  # {cross references}
    (BRACKETS, ""),  # [references], [Jargon File], [acronym]
    (re.compile(r"\s*/[^/\s]*['’:,][^/\s]*/"), ""),  # /ki:'boh/ pronunciations
    (re.compile(r"^\s*\d+\.\s+"), ""),  # "1. " sense numbers
    (re.compile(r"\(\s*\)"), ""),  # parentheses left empty
]


def parse_foldoc(cache: Path) -> list[list[str]]:
    """Each entry of the Free On-line Dictionary of Computing is a document of its prose paragraphs: headwords,
    domain labels, cross-reference braces, URLs, dates, code and tables (indented further) are removed; the 1,463
    entries marked "[Jargon File]" are left to "jargon"."""
    files = dict(deb_files(fetch(FOLDOC, cache), lambda n: n.startswith("usr/share/dictd/foldoc.")))
    data = gzip.decompress(files["usr/share/dictd/foldoc.dict.dz"])
    entries = sorted(dictd_entries(file_text(files["usr/share/dictd/foldoc.index"]), data))
    documents = [_foldoc_paragraphs(entry) for entry in entries if "[{Jargon File}]" not in entry]
    return dedupe(to_documents(documents, complete_only=True))


def _foldoc_paragraphs(entry: str) -> list[str]:
    """An entry's paragraphs indented by exactly three spaces (not the headword, nor code, tables and examples,
    which are indented further), cleaned, that read as prose."""
    body = []
    for [paragraph] in paragraphs(entry):
        if not all(line.startswith("   ") and not line.startswith("    ") for line in paragraph.split("\n")):
            continue
        text = _URL.sub("", squash(paragraph))
        for pattern, replacement in _FOLDOC_FIXES:
            text = pattern.sub(replacement, text)
        text = tidy(text)
        if is_prose(text):
            body.append(text)
    return body


# ----------------------------------------------------------------------------------------------------------------
# "jargon": the Jargon File 4.4.7

_JARGON_FILE = "usr/share/doc/jargon-text/jargon.txt.gz"
_JARGON_ENTRY = re.compile(r"\s*:[^:]+:.*")  # ":attoparsec: n."
_JARGON_SECTION = re.compile(r"(Chapter \d+\.|Appendix [A-C]\.)\s.*")
_JARGON_TABLE = re.compile(r"[─│┌┐└┘├┤┬┴┼═]")
_JARGON_FIXES = [
    (re.compile(r"^\s*(\d+\.\s*)?((n|v|vt|vi|adj|adv|interj|excl|pl|prep|conj)\.\s*,?\s*)*"), ""),  # "2. n."
    (re.compile(r"^\s*(\[[^\[\]]*\]\s*)+"), ""),  # "[Unix techspeak] "
    (BRACES, ""),
]


def parse_jargon(cache: Path) -> list[list[str]]:
    """The Jargon File 4.4.7: each chapter, appendix and lexicon entry is a document of its prose paragraphs;
    headwords, pronunciations, part-of-speech marks, tables and the glossary's word list are left out; the front
    matter and the bibliography too."""
    text = file_text(deb_file(fetch(JARGON, cache), _JARGON_FILE), _JARGON_FILE).replace("\xa0", " ")
    text = text[text.index("\nChapter 1. "):text.index("\nBibliography\n")]
    documents: list[list[str]] = [[]]
    for [paragraph] in paragraphs(text):
        first = paragraph.split("\n", 1)[0]
        if _JARGON_ENTRY.fullmatch(first) or _JARGON_SECTION.fullmatch(first.strip()):
            documents.append([])
            continue
        if _JARGON_TABLE.search(paragraph) or paragraph.startswith("    "):
            continue  # tables, examples, code
        flat = squash(paragraph)
        for pattern, replacement in _JARGON_FIXES:
            flat = pattern.sub(replacement, flat)
        if is_prose(flat):
            documents[-1].append(flat)
    return dedupe(to_documents(documents, complete_only=True))
