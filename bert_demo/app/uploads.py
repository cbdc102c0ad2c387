"""A visitor's own text: its private copy, what is checked before a run may train on it, the sweep of what a killed
app left, and the privacy rule for what is trained from it.

A visitor's file (an upload, typed text, a labelled file) is copied into a folder of ours named for the app's
process, under a name of ours (a visitor's file name never reaches a loader, where a comma would split it). The copy
goes when its run or experiment ends; the copies of a process that is gone are swept when the app starts. A copy's
path names the server's temporary folder and the app's process: what a page shows says its name alone (`shown`).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from bert_demo.app.folders import visible_to
from bert_demo.data.corpus import load_corpus
from bert_demo.processes import alive
from bert_demo.training.settings import FinetuneConfig, RunConfig, TrainConfig

UPLOAD_PREFIX = "bert-demo-upload-"  # then the app's process id: a copy whose process is gone is swept at start
MAX_WORD_CHARS = 100  # WordPiece reads a longer word as [UNK]; thousands of letters a word stall its training
_COPY_PATH = re.compile(re.escape(os.path.join(tempfile.gettempdir(), UPLOAD_PREFIX)) + r"[\w-]*/(?P<name>[\w.-]+)")


def private_copy(source: Path, name: str, max_bytes: int) -> Path:
    """A copy of a visitor's file (at most `max_bytes`), as `name` in a new private folder."""
    if not source.is_file():
        raise ValueError(f"the {_what(name)} is gone: upload it again")
    size = source.stat().st_size
    if size > max_bytes:
        raise ValueError(f"the {_what(name)} is {size / 2**20:.1f} MB; at most {max_bytes // 2**20} MB are allowed")
    if is_upload(source):  # already ours (typed text): no second copy
        return source
    target = private_folder() / name
    shutil.copyfile(source, target)
    return target


def shown(text: str) -> str:
    """`text` with each path of a private copy as the copy's name alone ('upload.txt'): the path names the server's
    temporary folder and the app's process id, which no visitor is shown."""
    return _COPY_PATH.sub(lambda found: found["name"], text)


def private_text(text: str, name: str) -> Path:
    """A visitor's typed text, as `name` in a new private folder."""
    target = private_folder() / name
    target.write_text(text, encoding="utf-8")
    return target


def private_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{UPLOAD_PREFIX}{os.getpid()}-"))


def discard(copy: Path | None) -> None:
    """Delete a private copy with its folder (nothing for a file that is not ours)."""
    if copy is not None and is_upload(copy):
        shutil.rmtree(copy.parent, ignore_errors=True)


def _what(name: str) -> str:
    return "labelled file" if name.startswith("labelled") else "uploaded file"


def corpus_upload(path: Path, alone: bool, max_bytes: int) -> Path:
    """The private copy of an uploaded text file, read now, so that a file that cannot be trained on is refused at
    once, not when the run starts. A file that is the only source must hold enough documents for training and
    validation; beside a named corpus, any readable text will do."""
    from bert_demo.data import pairs

    if path.suffix.lower() != ".txt":
        raise ValueError(f"upload a plain .txt file, not {path.suffix or 'a file without extension'}")
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError("the uploaded file is empty")
    target = private_copy(path, "upload.txt", max_bytes)
    try:
        documents = load_corpus(str(target))
        _check_words(documents)
        if alone:
            pairs.split_documents(documents, TrainConfig.val_fraction, TrainConfig.seed)
    except ValueError as exc:
        discard(target)
        reason = str(exc)
        for shown in {str(target.resolve()), str(target)}:  # never show a visitor the server's temporary paths
            reason = reason.replace(shown, "it")
        raise ValueError(f"the uploaded file cannot be trained on: {reason}") from None
    return target


def _check_words(documents: list[list[str]]) -> None:
    """Refuse text whose words no tokenizer can learn: a few words of 16,000 letters pass every size check, then
    stall the tokenizer's training for tens of seconds in the training slot."""
    longest = max((len(word) for document in documents for sentence in document for word in sentence.split()),
                  default=0)
    if longest > MAX_WORD_CHARS:
        raise ValueError(f"it has a word of {longest:,} characters; at most {MAX_WORD_CHARS} are allowed (a longer "
                         "word is not English prose)")


def sweep_private_copies() -> None:
    """Delete the private copies of uploads and typed text left in the temporary folder by an app that was killed
    mid-run (its process is gone); a live app's copies are kept."""
    for folder in Path(tempfile.gettempdir()).glob(f"{UPLOAD_PREFIX}*"):
        pid = folder.name[len(UPLOAD_PREFIX):].split("-", 1)[0]
        if folder.is_dir() and (not pid.isdigit() or not alive(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)


def is_upload(path: Path) -> bool:
    """Whether a file is one of our private copies."""
    return path.parent.name.startswith(UPLOAD_PREFIX) and path.parent.parent == Path(tempfile.gettempdir())


def has_upload(config: RunConfig) -> bool:
    """Whether a run trains on a visitor's upload (our private copy of it): in its corpus list, or as its task."""
    sources = config.task if isinstance(config, FinetuneConfig) else config.corpus
    return any(is_upload(Path(source)) for source in sources.split(","))


def remove_uploads(config: RunConfig) -> None:
    """Delete the private copies of uploaded text in a pre-training run's corpus list when the run is over. A
    fine-tuning experiment's labelled file serves several runs: its handler deletes it."""
    for source in getattr(config, "corpus", "").split(","):
        if is_upload(Path(source)):
            shutil.rmtree(Path(source).parent, ignore_errors=True)


def private_to(config: RunConfig, owner: str | None, share: bool) -> str | None:
    """The browser session a new run is private to (None: everyone). A model trained from anything private stays
    private to its owner, whatever trains it next: a continued or fine-tuned private run is as private as the run it
    starts from. A run on an upload is private to its visitor unless they share it (its vocabulary and guesses, or
    its classes and answers, show the text)."""
    start = start_folder(config)
    parent = visible_to(start) if start else None
    if parent is not None:
        return parent
    return owner if owner is not None and not share and has_upload(config) else None


def start_folder(config: RunConfig) -> Path | None:
    """The saved model a run starts from: the one a fine-tuning run tunes, or the one a pre-training run continues."""
    start = config.model if isinstance(config, FinetuneConfig) else config.init_from
    return Path(start) if start else None
