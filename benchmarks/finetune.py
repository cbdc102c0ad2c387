"""What pre-training buys: the shipped model fine-tuned, beside the same architecture from random weights (and its
frozen encoder), on the same labelled sentences, seeds and budget; accuracy on the task's test split and on another
domain, with all labels and with few. Also the time of one integrated-gradients attribution.

    python benchmarks/finetune.py                                     # seeds 0,1,2; all labels and 500
    python benchmarks/finetune.py --seeds 0 --sizes 500 --inits pretrained,random

Rows are appended as JSON lines to --log. The gap is the mean over seeds of pretrained minus random. Run nothing
else meanwhile: the seconds are shared.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table

from bert_demo.attribution import masked_word
from bert_demo.checkpoint import load_pretrained
from bert_demo.finetune import FineTuner
from bert_demo.train_config import FinetuneConfig

SMALL_EPOCHS = 10  # a few hundred labels take more passes for the same number of steps to matter


def run_one(args: argparse.Namespace, init: str, size: int | None, seed: int) -> dict:
    """One fine-tuning run; its final validation record's test and outside scores, and its wall time."""
    with tempfile.TemporaryDirectory() as out:
        config = FinetuneConfig(model=args.model, task=args.task, outside=args.outside, init=init,
                                train_examples=size, epochs=args.epochs if size is None else SMALL_EPOCHS,
                                lr=args.lr, batch_size=args.batch_size, seed=seed, out=f"{out}/run",
                                eval_every=10**6, log_every=10**6)
        started = time.perf_counter()
        final = [r for r in FineTuner(config).run() if r["kind"] == "val"][-1]
        return {"init": init, "labels": size or "all", "seed": seed, "steps": config.steps,
                "val_acc": round(final["acc"], 4), "test_acc": round(final["test_acc"], 4),
                "outside_acc": round(final.get("outside_acc", float("nan")), 4),
                "seconds": round(time.perf_counter() - started, 1)}


def attribution_time(model_folder: str) -> tuple[float, int]:
    """Median seconds of one attribution of a 30-token sentence's [MASK] (after one warm-up), and its tokens."""
    model, tokenizer = load_pretrained(model_folder)
    text = ("the president of the united [MASK] spoke to reporters in washington on tuesday about the new trade "
            "agreement with canada and mexico.")
    masked_word(model, tokenizer, text)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        result = masked_word(model, tokenizer, text)
        times.append(time.perf_counter() - started)
    return statistics.median(times), len(result.tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="checkpoints/mini-english")
    parser.add_argument("--task", default="movie-reviews")
    parser.add_argument("--outside", default="amazon-reviews")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sizes", default="all,500", help="labelled examples per run: numbers or 'all'")
    parser.add_argument("--inits", default="pretrained,random,frozen")
    parser.add_argument("--epochs", type=float, default=3.0, help="epochs with all labels")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--log", default="finetune.jsonl")
    args = parser.parse_args()
    rows = []
    for size in [None if s == "all" else int(s) for s in args.sizes.split(",")]:
        for init in args.inits.split(","):
            for seed in map(int, args.seeds.split(",")):
                row = run_one(args, init, size, seed)
                rows.append(row)
                with open(args.log, "a") as log:
                    log.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    table, means = [], {}
    for key in dict.fromkeys((r["labels"], r["init"]) for r in rows):
        group = [r for r in rows if (r["labels"], r["init"]) == key]
        means[key] = {m: statistics.mean(r[m] for r in group) for m in ("test_acc", "outside_acc")}
        spread = statistics.stdev(r["test_acc"] for r in group) if len(group) > 1 else 0.0
        table.append([key[0], key[1], len(group), group[0]["steps"], f"{means[key]['test_acc']:.3f} ± {spread:.3f}",
                      f"{means[key]['outside_acc']:.3f}", f"{statistics.mean(r['seconds'] for r in group):.0f}"])
    print_table(["labels", "start", "seeds", "steps", "test acc (mean ± sd)", "outside acc", "seconds"], table)
    for labels in dict.fromkeys(r["labels"] for r in rows):
        if (labels, "pretrained") in means and (labels, "random") in means:
            gap = {m: means[(labels, "pretrained")][m] - means[(labels, "random")][m] for m in ("test_acc",
                                                                                              "outside_acc")}
            print(f"gap pretrained - random, {labels} labels: test {100 * gap['test_acc']:+.1f} points, "
                  f"outside {100 * gap['outside_acc']:+.1f} points (targets: >= 6)")
    seconds, tokens = attribution_time(args.model)
    print(f"one integrated-gradients attribution, {tokens} tokens, {args.model}: {seconds:.2f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
