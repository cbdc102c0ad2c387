"""Count the words a checkpoint's pre-training run read, and keep the count in its record (`bert_demo.json`).

Why: the page says how much each shipped model read (the header, the Fine-tune tab), from `training_words` in the
model's record. A run counts its training documents itself (`training.pretraining.prepare`); the shipped models were
trained before it did. This splits the corpus the record names as the run split it (its `val_fraction` and `seed`),
counts the training documents' words as the run does (`corpus.word_count`) and writes the record again, atomically.

    python benchmarks/count_training_words.py checkpoints/small-english checkpoints/mini-english
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)

from bert_demo.config import METADATA_NAME, read_metadata
from bert_demo.data.corpus import word_count
from bert_demo.training.pretraining import split_corpus
from bert_demo.training.settings import TrainConfig


def training_words(folder: Path) -> int:
    """The words of the training documents of the run that saved `folder`, split again as it split them."""
    recorded = read_metadata(folder).get("train_config") or {}
    if "corpus" not in recorded or recorded.get("init_from"):
        raise SystemExit(f"{folder}: not a pre-training run from scratch (its record names no corpus, or it was "
                         "continued from another model, whose words its record would leave out)")
    config = TrainConfig(corpus=recorded["corpus"], val_fraction=recorded["val_fraction"], seed=recorded["seed"])
    (train_docs, _), _ = split_corpus(config)
    return word_count(train_docs)


def keep(folder: Path, words: int) -> None:
    """Write `words` into the folder's record, whole or not at all."""
    record = json.loads((folder / METADATA_NAME).read_text(encoding="utf-8"))
    record["training_words"] = words
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False, encoding="utf-8") as file:
        try:
            json.dump(record, file, indent=2)
            file.write("\n")
        except BaseException:
            os.unlink(file.name)
            raise
    os.chmod(file.name, 0o644)  # as the record was: readable by all
    os.replace(file.name, folder / METADATA_NAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    for folder in parser.parse_args().folders:
        started = time.perf_counter()
        words = training_words(folder)
        keep(folder, words)
        corpus = read_metadata(folder)["train_config"]["corpus"]
        print(f"{folder}: {words:,} training words of {corpus!r} ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
