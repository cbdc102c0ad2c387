"""Labelled text for fine-tuning, as `datasets.DatasetDict`s with fixed train / validation / test splits.

Offline: the sentences that people rated for VADER (Hutto & Gilbert 2014), inside vaderSentiment's source archive,
fetched pinned and hash-checked like the corpora (`sources.fetch`) and read as an archive, never installed:
movie-review snippets (the Rotten Tomatoes sentences of Pang & Lee 2005, where SST comes from), and, from other
domains, Amazon product reviews, New York Times editorials and tweets. A sentence's label is the sign of its mean
rating (negative or positive); sentences rated exactly 0 are left out.

Where the Hugging Face Hub is reachable: GLUE's SST-2, CoLA, MRPC and RTE (`datasets.load_dataset`), each with its
own metric. And a visitor's own CSV, TSV or JSONL file of `text`, optional `text_b`, and `label`.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets

from bert_demo.config import MAX_LABEL_CHARS, MAX_LABELS, hub_reachable
from bert_demo.data.sources import Package, fetch

SEED = 0  # the fixed shuffle: the same split and the same "first N labelled sentences" on every machine
SPLITS = (0.8, 0.1, 0.1)  # train, validation, test
MAX_FILE_BYTES = 10 * 2**20  # a visitor's labelled file
MAX_EXAMPLES = 100_000
MAX_TEXT_CHARS = 2000  # one text of an example
MIN_EXAMPLES = 20  # 16 to train, 2 to validate, 2 to test: fewer leaves a split empty
FILE_TYPES = (".csv", ".tsv", ".jsonl")  # a visitor's labelled file
REVIEWS_PACKAGE = Package("pypi-sdist", "vaderSentiment==3.3.2", "vaderSentiment-3.3.2.tar.gz",
                          "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9")
_INNER_ARCHIVE = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
SENTIMENT = ("negative", "positive")


@dataclass(frozen=True)
class Task:
    """A labelled task: where its examples come from, its classes, and the metric it is scored with."""

    about: str
    metric: str = "accuracy"  # accuracy, f1 (of class 1) or matthews
    vader_file: str | None = None  # offline: a rated-snippets file inside the VADER archive
    glue: str | None = None  # where the hub is reachable: the GLUE configuration


TASKS = {
    "movie-reviews": Task("10,568 rated movie-review sentences (Pang & Lee 2005, rated again for VADER; MIT)",
                          vader_file="movieReviewSnippets_GroundTruth.txt"),
    "amazon-reviews": Task("rated Amazon product-review sentences (VADER; MIT): another domain",
                           vader_file="amazonReviewSnippets_GroundTruth.txt"),
    "nyt-editorials": Task("rated New York Times editorial sentences (VADER; MIT): another domain",
                           vader_file="nytEditorialSnippets_GroundTruth.txt"),
    "tweets": Task("rated tweets (VADER; MIT): another domain", vader_file="tweets_GroundTruth.txt"),
    "sst2": Task("GLUE SST-2: movie-review sentences, where the Hugging Face Hub is reachable", glue="sst2"),
    "cola": Task("GLUE CoLA: is the sentence grammatical, where the hub is reachable", "matthews", glue="cola"),
    "mrpc": Task("GLUE MRPC: are the two sentences paraphrases, where the hub is reachable", "f1", glue="mrpc"),
    "rte": Task("GLUE RTE: does A entail B, where the hub is reachable", glue="rte"),
}


def load_task(name: str, cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """A named task's train, validation and test splits: columns `text`, `text_b` (None for single sentences) and
    `label` (a ClassLabel with the class names)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose from {', '.join(TASKS)}, or give a labelled file")
    task = TASKS[name]
    if task.glue:
        return _glue(task.glue)
    cache = Path(cache_dir or os.environ.get("BERT_DEMO_CACHE") or Path.home() / ".cache" / "bert-demo")
    texts, labels = _vader_snippets(task.vader_file, cache)
    return split(texts, [None] * len(texts), labels, SENTIMENT)


def _vader_snippets(file: str, cache: Path) -> tuple[list[str], list[int]]:
    """The sentences of one rated-snippets file (id, mean rating from -4 to 4, sentence) and their rating's sign."""
    with tarfile.open(fetch(REVIEWS_PACKAGE, cache)) as outer:
        inner = outer.extractfile(_INNER_ARCHIVE).read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as archive:
        text = archive.extractfile(f"hutto_ICWSM_2014/{file}").read().decode("utf-8", errors="replace")
    texts, labels = [], []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and float(parts[1]) != 0.0:
            texts.append(parts[2].strip().replace("''", '"'))
            labels.append(int(float(parts[1]) > 0))
    return texts, labels


def split(texts: Sequence[str], texts_b: Sequence[str | None], labels: Sequence[int], names: Sequence[str]
          ) -> datasets.DatasetDict:
    """One fixed shuffle (seed SEED), cut into train, validation and test (SPLITS)."""
    data = datasets.Dataset.from_dict(
        {"text": list(texts), "text_b": list(texts_b), "label": list(labels)},
        features=datasets.Features({"text": datasets.Value("string"), "text_b": datasets.Value("string"),
                                    "label": datasets.ClassLabel(names=list(names))}))
    data = data.shuffle(seed=SEED)
    n_train, n_val = round(SPLITS[0] * len(data)), round(SPLITS[1] * len(data))
    return datasets.DatasetDict({"train": data.select(range(n_train)),
                                 "validation": data.select(range(n_train, n_train + n_val)),
                                 "test": data.select(range(n_train + n_val, len(data)))})


def first(data: datasets.Dataset, n: int | None) -> datasets.Dataset:
    """The first `n` examples of a (fixedly shuffled) split: how a run trains on fewer labels (None: all)."""
    if n is None:
        return data
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of labelled examples must be a positive whole number, got {n!r}")
    return data.select(range(min(n, len(data))))


def _glue(config: str) -> datasets.DatasetDict:
    """A GLUE task from the hub, as our columns; its test split has no labels, so validation is the score."""
    if not hub_reachable():
        raise ValueError(f"could not load GLUE {config}: the Hugging Face Hub is not reachable from here. Use "
                         "movie-reviews, which works offline")
    try:
        glue = datasets.load_dataset("nyu-mll/glue", config)
    except Exception as error:  # offline, the hub raises ConnectionError, OSError or its own errors
        raise ValueError(f"could not load GLUE {config}: the Hugging Face Hub is not reachable from here "
                         f"({type(error).__name__}). Use movie-reviews, which works offline") from error
    return from_glue(glue)


def from_glue(glue: datasets.DatasetDict) -> datasets.DatasetDict:
    """GLUE's columns (sentence, or sentence1/sentence2, question/sentence...) as text, text_b and label; GLUE's
    validation split serves as both validation and test (its test labels are hidden)."""
    columns = glue["train"].column_names
    first_text = next(c for c in ("sentence", "sentence1", "question", "question1", "premise") if c in columns)
    second = next((c for c in ("sentence2", "question2", "hypothesis") if c in columns), None)
    if first_text == "question" and "sentence" in columns:
        second = "sentence"

    def ours(data: datasets.Dataset) -> datasets.Dataset:
        renamed = data.map(lambda row: {"text": row[first_text], "text_b": row[second] if second else None},
                           remove_columns=[c for c in data.column_names if c != "label"])
        return renamed.cast_column("text_b", datasets.Value("string"))

    return datasets.DatasetDict({"train": ours(glue["train"]), "validation": ours(glue["validation"]),
                                 "test": ours(glue["validation"])})


def load_file(path: str | Path) -> datasets.DatasetDict:
    """A visitor's labelled file: CSV, TSV or JSONL with a `text` column, an optional `text_b`, and a `label`
    (class names or numbers). Checked, capped, and split like the named tasks."""
    path = Path(path)
    if path.suffix.lower() not in FILE_TYPES:
        raise ValueError(f"give a .csv, .tsv or .jsonl file, not {path.suffix or 'a file without extension'}")
    if not path.is_file():
        raise ValueError("the labelled file is gone: upload it again")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"the labelled file is {size / 2**20:.1f} MB; at most {MAX_FILE_BYTES // 2**20} MB are "
                         "allowed")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError("the labelled file is not UTF-8 text: save it as UTF-8") from None
    rows = _rows(text, path.suffix.lower())
    return _examples(rows)


def _rows(text: str, suffix: str) -> list[dict]:
    """The file's rows as dicts; a line that cannot be read is refused by its number, with why."""
    if suffix == ".jsonl":
        return [_json_row(line, number) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    # csv refuses a field over 128 KB with csv.Error: a long field is refused instead by its example's length
    csv.field_size_limit(max(csv.field_size_limit(), MAX_FILE_BYTES))
    return list(csv.DictReader(io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ","))


def _json_row(line: str, number: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError(f"line {number} of the labelled file is not JSON") from None
    except ValueError:  # Python refuses to read an integer of more than 4,300 digits
        raise ValueError(f"line {number} of the labelled file has a number too long to read") from None
    except RecursionError:  # thousands of nested brackets
        raise ValueError(f"line {number} of the labelled file is nested too deeply to be an example") from None
    if not isinstance(row, dict):
        raise ValueError(f"line {number} of the labelled file is not a JSON object")
    return row


def _examples(rows: list[dict]) -> datasets.DatasetDict:
    """Rows with text (and text_b) and a label, checked, with the classes in sorted order."""
    if not rows:
        raise ValueError("the labelled file has no examples")
    if len(rows) > MAX_EXAMPLES:
        raise ValueError(f"the labelled file has {len(rows):,} examples; at most {MAX_EXAMPLES:,} are allowed")
    for column in ("text", "label"):
        if column not in rows[0]:
            raise ValueError(f"the labelled file has no {column!r} column: it needs text, label and optionally "
                             f"text_b (it has {', '.join(map(str, rows[0])) or 'none'})")
    texts, texts_b, labels = [], [], []
    for number, row in enumerate(rows, start=1):
        text, text_b, label = row.get("text"), row.get("text_b"), row.get("label")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"example {number} has no text")
        if any(isinstance(t, str) and len(t) > MAX_TEXT_CHARS for t in (text, text_b)):
            raise ValueError(f"example {number} has a text over {MAX_TEXT_CHARS} characters")
        if label is None or (isinstance(label, float) and math.isnan(label)) or not str(label).strip():
            raise ValueError(f"example {number} has no label")
        texts.append(text.strip())
        texts_b.append(text_b.strip() if isinstance(text_b, str) and text_b.strip() else None)
        labels.append(str(label).strip())
    if len({b is None for b in texts_b}) > 1:
        number = texts_b.index(None) + 1 if texts_b[0] is not None else next(
            i for i, b in enumerate(texts_b, start=1) if b is not None)
        raise ValueError(f"example {number} differs from the first: give every example a second text (text_b), or "
                         "none")
    names = sorted(set(labels))
    long_name = next((name for name in names if len(name) > MAX_LABEL_CHARS), None)
    if long_name is not None:
        raise ValueError(f"a class name has {len(long_name)} characters; at most {MAX_LABEL_CHARS} are allowed")
    if len(names) < 2:
        raise ValueError(f"every example has the label {names[0]!r}: a classifier needs at least two classes")
    if len(names) > MAX_LABELS:
        raise ValueError(f"the labelled file has {len(names)} classes; at most {MAX_LABELS} are allowed")
    if len(rows) < MIN_EXAMPLES:
        raise ValueError(f"the labelled file has {len(rows)} examples; at least {MIN_EXAMPLES} are needed, so that "
                         "training, validation and test each get some")
    index = {name: i for i, name in enumerate(names)}
    return split(texts, texts_b, [index[label] for label in labels], names)


def score(metric: str, predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Accuracy; F1 of class 1 (GLUE's MRPC); or Matthews' correlation coefficient (GLUE's CoLA), binary."""
    if len(predictions) != len(labels) or not labels:
        raise ValueError("score needs as many predictions as labels, and at least one")
    if metric == "accuracy":
        return sum(p == y for p, y in zip(predictions, labels)) / len(labels)
    tp = sum(p == 1 and y == 1 for p, y in zip(predictions, labels))
    fp = sum(p == 1 and y != 1 for p, y in zip(predictions, labels))
    fn = sum(p != 1 and y == 1 for p, y in zip(predictions, labels))
    tn = len(labels) - tp - fp - fn
    if metric == "f1":
        return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    if metric == "matthews":
        denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        return (tp * tn - fp * fn) / denominator if denominator else 0.0
    raise ValueError(f"unknown metric {metric!r}: accuracy, f1 or matthews")
