"""What pre-training makes of a named corpus before its first step, kept on disk: the WordPiece vocabulary trained on
its training documents, and its documents as token ids, each with its source (the part of the corpus it came from).

The same corpus, split and vocabulary size always give the same vocabulary and the same ids, yet making them took
about 8 of the 100 seconds of the app's default run (news,wiki: a vocabulary of 8,192, then 2.5 M words tokenized).
So they are made once per cache folder and read back after that. A visitor's file is never kept: only named corpora,
which anyone can fetch, are (`corpus.is_named`). Files are written atomically; a damaged one is made again.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from array import array
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import BertTokenizerFast

from bert_demo.data.corpus import CACHE_VERSION, cache_folder
from bert_demo.data.pairs import Document, Tokenized
from bert_demo.tokenizer import tokenizer_from_vocab, vocabulary

VERSION = 1  # bump when tokenizing or the vocabulary's training changes, so that older files are not read
IDS_LAYOUT = 2  # bump when what an ids file holds changes (2: each document's source), so older files are not read


def vocabulary_file(key: str) -> Path:
    """Where the vocabulary kept under `key` lies (what a GPU machine is sent, so that its run need not train it)."""
    return _folder() / f"vocab-{_digest(key)}.txt"


def cached_vocabulary(key: str, make: Callable[[], BertTokenizerFast]) -> BertTokenizerFast:
    """The tokenizer whose vocabulary was kept under `key`, else `make()`'s, kept there for next time."""
    path = vocabulary_file(key)
    try:
        tokens = path.read_text(encoding="utf-8").split("\n")
        if len(tokens) > 5:
            return tokenizer_from_vocab(tokens)
    except (OSError, UnicodeDecodeError):  # not made yet, or unreadable: make it again
        pass
    tokenizer = make()
    _write(path, lambda tmp: Path(tmp).write_text("\n".join(vocabulary(tokenizer)), encoding="utf-8"))
    return tokenizer


def cached_ids(key: str, tokenizer: BertTokenizerFast, make: Callable[[], Tokenized]) -> Tokenized:
    """The documents as token ids, with their sources, kept under `key` and this vocabulary, else `make()`'s, kept
    there for next time."""
    path = _folder() / f"ids-{_digest(key, f'layout {IDS_LAYOUT}', *vocabulary(tokenizer))}.safetensors"
    try:
        return _tokenized(load_file(str(path)))
    except (OSError, SafetensorError, KeyError, ValueError):  # not made yet, damaged or foreign: make it again
        pass
    tokenized = make()
    _write(path, lambda tmp: save_file(_tensors(tokenized), tmp))
    return tokenized


def _tensors(tokenized: Tokenized) -> dict[str, torch.Tensor]:
    """Documents of sentences of ids as four flat int32 tensors: every id, each sentence's length, each document's
    number of sentences, and each document's source."""
    ids, lengths = array("i"), array("i")
    for document in tokenized.documents:
        for sentence in document:
            ids.extend(sentence)
            lengths.append(len(sentence))
    sentences = array("i", (len(document) for document in tokenized.documents))
    sources = array("i", tokenized.sources)
    return {name: torch.frombuffer(values, dtype=torch.int32).clone() if values else torch.zeros(0, dtype=torch.int32)
            for name, values in (("ids", ids), ("lengths", lengths), ("sentences", sentences), ("sources", sources))}


def _tokenized(tensors: dict[str, torch.Tensor]) -> Tokenized:
    """`_tensors` read back: the documents as lists of int32 arrays, and their sources."""
    ids, lengths, sentences = (tensors[name].numpy() for name in ("ids", "lengths", "sentences"))
    sources = tensors["sources"].tolist()
    if int(lengths.sum()) != len(ids) or int(sentences.sum()) != len(lengths) or len(sources) != len(sentences):
        raise ValueError("the kept ids do not add up")
    starts = lengths.cumsum() - lengths
    rows = [array("i", ids[start:start + length].tobytes()) for start, length in zip(starts.tolist(), lengths.tolist())]
    documents: list[Document] = []
    first = 0
    for count in sentences.tolist():
        documents.append(rows[first:first + count])
        first += count
    return Tokenized(documents, sources)


def _folder() -> Path:
    return cache_folder() / "prepared"


def _digest(*parts: str) -> str:
    versions = f"{VERSION}.{CACHE_VERSION}"  # a corpus parsed anew is tokenized anew
    return hashlib.sha256("\n".join([versions, *parts]).encode()).hexdigest()[:24]


def _write(path: Path, write: Callable[[str], object]) -> None:
    """Write a file through `write(temporary path)`, then move it into place: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
