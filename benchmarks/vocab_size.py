"""Which vocabulary size for corpus v3: WordPiece tokenizers of several sizes, trained on the same text, measured on
text none of them saw.

Why: the issue asks for the size to be chosen by measurement (the shipped model has 8,192 entries; Google's BERT
has 30,522). A larger vocabulary splits fewer words, so 128 tokens hold more text and more masked tokens are whole
words; it costs parameters (mini's word embeddings are V x 256 of its weights) and time (the MLM head scores all V
entries for every masked token: at V=30,522 a mini step took 1.41x as long as at 8,192, benchmarks/README.md).

For each size the script trains `bert_demo.tokenizer.train_tokenizer` on the training documents of `--corpus`
(the run's own split: `split_documents`, 1% held out), then reports on the corpus's held-out documents and on the
outside evaluation text (lee, never trained on): tokens per word, the share of words split into pieces, the
share of [UNK], and the embedding's share of mini's parameters. Reference: the shipped model's own tokenizer,
measured on the same text in the same run.

    python benchmarks/vocab_size.py [--corpus v3] [--sizes 4096,8192,16384,30522] [--words 5000000]
"""
from __future__ import annotations

import argparse
import re
import time
from dataclasses import replace

from _common import ROOT, print_table

from bert_demo.config import PRESETS
from bert_demo.corpus import load_corpus
from bert_demo.model import BertForPreTraining
from bert_demo.pretraining_data import split_documents
from bert_demo.tokenizer import load_tokenizer, train_tokenizer

WORD = re.compile(r"\w+|[^\w\s]")  # words and punctuation marks, as BERT's basic tokenizer splits them


def sample(documents: list[list[str]], words: int) -> list[list[str]]:
    """Every k-th document, so that about `words` words of every part of the mix are kept in their proportions."""
    total = sum(len(s.split()) for d in documents for s in d)
    step = max(1, round(total / words))
    return documents[::step]


def measure(tokenizer, documents: list[list[str]]) -> dict[str, float]:
    """Tokens per word, the share of words split into pieces, and the share of [UNK] tokens."""
    words = pieces = split = unknown = 0
    unk = tokenizer.unk_token_id
    for document in documents:
        for sentence in document:
            for word in WORD.findall(sentence.lower()):
                ids = tokenizer(word, add_special_tokens=False)["input_ids"]
                words += 1
                pieces += len(ids)
                split += len(ids) > 1
                unknown += ids.count(unk)
    return {"tokens/word": pieces / words, "split": split / words, "unk": unknown / max(pieces, 1)}


def embedding_share(vocab: int) -> float:
    """The word embeddings' share of a mini model's parameters at this vocabulary size (tied with the MLM decoder,
    so counted once)."""
    model = BertForPreTraining(replace(PRESETS["mini"], vocab_size=vocab))
    total = sum(p.numel() for p in model.parameters())  # parameters() lists a tied weight once
    return model.bert.embeddings.word_embeddings.weight.numel() / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="v3")
    parser.add_argument("--sizes", default="4096,8192,16384,30522")
    parser.add_argument("--words", type=int, default=5_000_000, help="words of the corpus to train each on")
    args = parser.parse_args()
    train, held_out = split_documents(load_corpus(args.corpus), 0.01, 0)
    outside = load_corpus("lee", reserved_ok=True)
    train = sample(train, args.words)
    texts = {f"{args.corpus} held-out": held_out[:2000], "lee (outside)": outside}
    rows = []
    reference = load_tokenizer(ROOT / "checkpoints" / "mini-english")
    candidates = [("shipped mini-english", reference, len(reference))]
    for size in (int(s) for s in args.sizes.split(",")):
        start = time.perf_counter()
        tokenizer = train_tokenizer(train, vocab_size=size)
        print(f"trained {size:,} entries in {time.perf_counter() - start:.0f} s", flush=True)
        candidates.append((f"trained on {args.corpus}", tokenizer, size))
    for name, tokenizer, size in candidates:
        row = [name, f"{len(tokenizer):,}"]
        for documents in texts.values():
            m = measure(tokenizer, documents)
            row += [f"{m['tokens/word']:.3f}", f"{m['split']:.1%}", f"{m['unk']:.2%}"]
        rows.append(row + [f"{embedding_share(len(tokenizer)):.0%}"])
    header = ["tokenizer", "entries"]
    for text in texts:
        header += [f"{text}: tokens/word", "words split", "[UNK]"]
    print(f"{sum(len(s.split()) for d in train for s in d):,} training words of {args.corpus}")
    print_table(header + ["embeddings' share of mini"], rows)


if __name__ == "__main__":
    main()
