"""Which vocabulary size for a corpus: WordPiece tokenizers of several sizes, trained on the same text, measured on
text none of them saw and on the everyday words a fill-mask must be able to answer.

Why: the issue asks for the size to be chosen by measurement (the shipped model has 8,192 entries; Google's BERT
has 30,522). A larger vocabulary splits fewer words, so 128 tokens hold more text and more masked tokens are whole
words; it costs parameters (mini's word embeddings are V x 256 of its weights) and time (the MLM head scores all V
entries for every masked token: at V=30,522 a mini step took 1.41x as long as at 8,192, benchmarks/README.md).

For each size the script trains `bert_demo.tokenizer.train_tokenizer` on the training documents of `--corpus`
(the run's own split: `split_documents`, 1% held out), then reports on the corpus's held-out documents and on the
outside evaluation text (lee, never trained on): tokens per word, the share of words split into pieces, the
share of [UNK], and the embedding's share of the --preset's parameters. Then what a fill-mask can answer: a masked
position takes one piece, so a word split into pieces is a word the model can never guess; the share of
benchmarks/everyday_english.py's sixty sentences with a fitting word that is one piece, and of its fitting words.
Last, what the size costs: the model's weights in bf16 (what a GPU call sends back) and the --preset's training
step on this machine at batch --batch x 128, relative to the smallest size (the masked-LM head scores every entry
for every masked token). Reference: the shipped model's own tokenizer, measured on the same text in the same run.

    python benchmarks/vocab_size.py [--corpus v3] [--sizes 4096,8192,16384,30522] [--words 5000000]
    python benchmarks/vocab_size.py --corpus v4 --sizes 16384,20480,24576,30522 --preset small --batch 32
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
from dataclasses import replace

import torch
from _common import ROOT, interleaved_times, print_table
from bench_train import make_batches, step_fn
from everyday_english import SENTENCES, fitting

from bert_demo.config import PRESETS
from bert_demo.data.corpus import load_corpus, word_count
from bert_demo.data.pairs import split_documents
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import load_tokenizer, train_tokenizer

WORD = re.compile(r"\w+|[^\w\s]")  # words and punctuation marks, as BERT's basic tokenizer splits them


def sample(documents: list[list[str]], words: int) -> list[list[str]]:
    """Every k-th document, so that about `words` words of every part of the mix are kept in their proportions."""
    total = word_count(documents)
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


def embedding_share(vocab: int, preset: str = "mini") -> tuple[float, int]:
    """The word embeddings' share of a model's parameters at this vocabulary size (tied with the MLM decoder, so
    counted once), and the parameters."""
    model = BertForPreTraining(replace(PRESETS[preset], vocab_size=vocab))
    total = sum(p.numel() for p in model.parameters())  # parameters() lists a tied weight once
    return model.bert.embeddings.word_embeddings.weight.numel() / total, total


def everyday(tokenizer) -> tuple[float, float]:
    """The share of the everyday sentences with a fitting word that is one piece (a fill-mask could answer them),
    and the share of all their fitting words that are one piece."""
    whole = lambda word: len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1  # noqa: E731
    answerable = sum(any(whole(w) for w in fitting(words)) for _, words in SENTENCES)
    all_words = [w for _, words in SENTENCES for w in fitting(words)]
    return answerable / len(SENTENCES), sum(map(whole, all_words)) / len(all_words)


def step_times(sizes: list[int], preset: str, batch: int, steps: int = 6) -> dict[int, float]:
    """Median seconds of the preset's training step at each vocabulary size, the sizes' steps interleaved."""
    calls = {}
    for size in sizes:
        torch.manual_seed(0)
        model = BertForPreTraining(replace(PRESETS[preset], vocab_size=size)).train()
        calls[size] = step_fn("ours", model, make_batches(2, batch, 128, size), torch.device("cpu"))[0]
    times = interleaved_times(calls, steps, 2)
    return {size: statistics.median(values) for size, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="v3")
    parser.add_argument("--sizes", default="4096,8192,16384,30522")
    parser.add_argument("--words", type=int, default=5_000_000, help="words of the corpus to train each on")
    parser.add_argument("--preset", default="mini", help="the model whose parameters and step the sizes cost")
    parser.add_argument("--batch", type=int, default=32, help="sequences of 128 tokens a timed step")
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
    steps = step_times([len(t) for _, t, _ in candidates], args.preset, args.batch)
    fastest = min(steps.values())
    for name, tokenizer, _ in candidates:
        row = [name, f"{len(tokenizer):,}"]
        for documents in texts.values():
            m = measure(tokenizer, documents)
            row += [f"{m['tokens/word']:.3f}", f"{m['split']:.1%}", f"{m['unk']:.2%}"]
        answerable, whole = everyday(tokenizer)
        share, parameters = embedding_share(len(tokenizer), args.preset)
        rows.append(row + [f"{answerable:.0%}", f"{whole:.0%}", f"{share:.0%}", f"{parameters * 2 / 1e6:.1f}",
                           f"{steps[len(tokenizer)] * 1000:.0f} ({steps[len(tokenizer)] / fastest:.2f}x)"])
    header = ["tokenizer", "entries"]
    for text in texts:
        header += [f"{text}: tokens/word", "words split", "[UNK]"]
    print(f"{word_count(train):,} training words of {args.corpus}; {args.preset}'s step "
          f"at batch {args.batch} x 128 on this CPU, the sizes interleaved")
    print_table(header + ["everyday sentences answerable", "their fitting words whole",
                          f"embeddings' share of {args.preset}", "weights in bf16, MB", "step ms"], rows)


if __name__ == "__main__":
    main()
