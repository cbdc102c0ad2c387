"""bert_demo/data/token_cache.py: a named corpus's vocabulary and token ids (with each document's source) are made once
and read back the same, a damaged file or one of another layout is made again, and a visitor's file is never kept."""
from __future__ import annotations

import bert_demo.training.pretraining as trainer_module
from bert_demo.data import sources
from bert_demo.data import token_cache as prepared
from bert_demo.data.pairs import tokenize_sourced
from bert_demo.data.token_cache import cached_ids, cached_vocabulary
from bert_demo.tokenizer import train_tokenizer, vocabulary
from bert_demo.training.pretraining import pretraining
from bert_demo.training.settings import TrainConfig

DOCUMENTS = [[f"The {animal} number {i} lived near the {place} for many years.", f"People saw the {animal} often.",
              f"It liked the {place} in the summer months."]
             for i, (animal, place) in enumerate([("fox", "river"), ("owl", "forest"), ("hare", "hill"),
                                                  ("deer", "lake"), ("crow", "town"), ("mole", "field")] * 5)]
SOURCES = [i % 3 for i in range(len(DOCUMENTS))]


def never(*args, **kwargs):
    raise AssertionError("made again although it was kept")


def test_a_vocabulary_and_ids_are_made_once_and_read_back_exactly(private_cache):
    tokenizer = cached_vocabulary("stories|train", lambda: train_tokenizer(DOCUMENTS, 300, min_frequency=1))
    ids = cached_ids("stories|train", tokenizer, lambda: tokenize_sourced(DOCUMENTS, SOURCES, tokenizer))
    again = cached_vocabulary("stories|train", never)
    assert vocabulary(again) == vocabulary(tokenizer)
    text = "the fox lived near the river."
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert cached_ids("stories|train", again, never) == ids and len(ids.documents) == len(DOCUMENTS)
    assert ids.sources == SOURCES  # each document's source is kept beside it
    assert (private_cache / "prepared").is_dir()


def test_ids_kept_in_another_layout_are_made_again(private_cache, monkeypatch):
    tokenizer = train_tokenizer(DOCUMENTS, 200, min_frequency=1)
    kept = cached_ids("k", tokenizer, lambda: tokenize_sourced(DOCUMENTS, SOURCES, tokenizer))
    monkeypatch.setattr(prepared, "IDS_LAYOUT", prepared.IDS_LAYOUT + 1)
    made = []
    assert cached_ids("k", tokenizer, lambda: made.append(1) or kept) == kept and made


def test_ids_are_kept_per_vocabulary_and_a_damaged_file_is_made_again(private_cache):
    small = train_tokenizer(DOCUMENTS, 200, min_frequency=1)
    other = train_tokenizer([["A quiet orchard grew plums beside the mill."]] + DOCUMENTS, 400, min_frequency=1)
    kept = cached_ids("k", small, lambda: tokenize_sourced(DOCUMENTS, SOURCES, small))
    made = []
    ids = cached_ids("k", other, lambda: made.append(1) or tokenize_sourced(DOCUMENTS, SOURCES, other))
    assert made and ids != kept  # another vocabulary: its own ids, not the kept ones
    for file in (private_cache / "prepared").glob("ids-*"):
        file.write_bytes(b"not safetensors")
    assert cached_ids("k", small, lambda: tokenize_sourced(DOCUMENTS, SOURCES, small)) == kept


def run(tmp_path, corpus: str, name: str) -> list[dict]:
    config = TrainConfig(preset="tiny", corpus=corpus, steps=2, batch_size=4, seq_len=32, vocab_size=300,
                         val_fraction=0.2, eval_every=2, eval_batches=1, log_every=1, out=str(tmp_path / name))
    return [r for r in pretraining(config).run() if r["kind"] in ("train", "val")]


def test_a_run_on_a_named_corpus_reads_its_preparation_back_and_trains_the_same(private_cache, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setitem(sources.SOURCES, "stories", sources.Source(lambda cache: DOCUMENTS, "test stories"))
    first = run(tmp_path, "stories", "first")
    monkeypatch.setattr(trainer_module, "train_tokenizer", never)
    monkeypatch.setattr(trainer_module, "tokenize_sourced", never)
    again = run(tmp_path, "stories", "again")
    assert [(r["mlm_loss"], r["nsp_loss"]) for r in again] == [(r["mlm_loss"], r["nsp_loss"]) for r in first]


def test_a_visitors_file_is_never_kept(private_cache, tmp_path):
    upload = tmp_path / "mine.txt"
    upload.write_text("\n\n".join(" ".join(document) for document in DOCUMENTS))
    run(tmp_path, str(upload), "run")
    assert not (private_cache / "prepared").exists()
