"""What pre-training buys: the shipped model fine-tuned, beside the same architecture from random weights (and its
frozen encoder), on the same labelled sentences, seeds and budget; accuracy on the task's test split and on another
domain, with all labels and with few. Also the time of one integrated-gradients attribution.

    python benchmarks/finetune.py                                     # seeds 0,1,2; all labels and 500
    python benchmarks/finetune.py --seeds 0 --sizes 500 --inits pretrained,random
    python benchmarks/finetune.py --lrs 3e-5,1e-4,3e-4,1e-3 --inits pretrained,random --jobs 12   # a grid
    python benchmarks/finetune.py --from-log benchmarks/results/finetune.jsonl   # the rows already run, summed up
    python benchmarks/finetune.py --app-budget --sizes 100,300,1000,all --inits pretrained,random   # the tab's runs
    python benchmarks/finetune.py --write-task-text movies.txt        # the training sentences, unlabelled

Each start's settings are chosen fairly: for each start and label count, the learning rate (and the epochs, where
several were run) with the best mean VALIDATION accuracy over the seeds is picked (among the cells with all the seeds),
and that choice's test and outside accuracy are reported (mean ± sd). The test split never chooses anything. A random
start wants other settings than a pre-trained one, so each gets its own choice; the gap is pre-trained minus random at
their choices.

Rows are appended as JSON lines to --log. With --jobs > 1 the runs share the machine (the GPU), so their seconds
are wall times under that sharing, not a run's own cost.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table

from bert_demo.app.policy import app_finetune_steps
from bert_demo.training.settings import FinetuneConfig

DEFAULT_MODEL = "checkpoints/mini-english"


def run_one(args: argparse.Namespace, init: str, size: int | None, seed: int, lr: float, epochs: float) -> dict:
    """One fine-tuning run; its final validation record's test and outside scores, and its wall time."""
    import torch

    from bert_demo.data.labelled import load_task
    from bert_demo.training.finetuning import finetuning

    torch.set_num_threads(max(1, _common.cores() // max(1, args.jobs)))
    reinit_pooler = args.reinit_pooler and init == "pretrained"  # a random start's pooler is new anyway
    with tempfile.TemporaryDirectory() as out:
        steps = app_finetune_steps(size or len(load_task(args.task)["train"])) if args.app_budget else None
        config = FinetuneConfig(model=args.model, task=args.task, outside=args.outside, init=init,
                                train_examples=size, epochs=epochs, steps=steps, lr=lr, batch_size=args.batch_size,
                                seed=seed, reinit_pooler=reinit_pooler, layer_decay=args.layer_decay,
                                out=f"{out}/run", eval_every=10**6, log_every=10**6)
        started = time.perf_counter()
        final = [r for r in finetuning(config).run() if r["kind"] == "val"][-1]
        return {"model": args.model, "init": init, "labels": size or "all", "seed": seed, "lr": lr, "epochs": epochs,
                "reinit_pooler": reinit_pooler, "layer_decay": args.layer_decay, "steps": config.steps,
                "val_acc": round(final["acc"], 4), "test_acc": round(final["test_acc"], 4),
                "outside_acc": round(final.get("outside_acc", float("nan")), 4),
                "seconds": round(time.perf_counter() - started, 1), "jobs": args.jobs}


def _key(row: dict) -> tuple:
    """What makes a run: its start, labels, seed, learning rate and epochs."""
    return (row["model"], row["init"], str(row["labels"] or "all"), row["seed"], row["lr"], row["epochs"],
            bool(row["reinit_pooler"]), row["layer_decay"])


def attribution_time(model_folder: str) -> tuple[float, int]:
    """Median seconds of one attribution of a 30-token sentence's [MASK] (after one warm-up), and its tokens."""
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.inspection.attribution import masked_word

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


def start_name(row: dict) -> str:
    """A start as the tables show it: pretrained, random or frozen, its extras, and its checkpoint (or, for a random
    start, its shape) if not the default."""
    name = row["init"]
    if row.get("reinit_pooler"):
        name += " + new pooler"
    if row.get("layer_decay", 1.0) != 1.0:
        name += f" + layer decay {row['layer_decay']:g}"
    model = row.get("model", DEFAULT_MODEL)
    if model != DEFAULT_MODEL:  # a random start has the checkpoint's shape: random weights of two shapes differ
        name += f" ({model}'s shape)" if row["init"] == "random" else f" ({model})"
    return name


def _mean_sd(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def summarise(rows: list[dict]) -> dict[tuple, dict]:
    """Print the grid (every start, label count, rate and epochs: mean ± sd over seeds), each start's choice by
    validation, and the gaps between the pre-trained starts and the random one at their choices. Returns the
    choices, keyed by (start, labels)."""
    rows = [{"lr": None, "epochs": None, "model": DEFAULT_MODEL, "reinit_pooler": False, "layer_decay": 1.0, **r}
            for r in rows]
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        # the steps too: the tab's budget (--app-budget) caps them, so the same epochs may mean other steps
        cells.setdefault((start_name(row), str(row["labels"]), row["lr"], row["epochs"], row["steps"]), []).append(row)
    table = []
    for (start, labels, lr, epochs, _), group in cells.items():
        table.append([labels, start, f"{lr:g}" if lr else "?", f"{epochs:g}" if epochs else "?", len(group),
                      group[0]["steps"], _mean_sd([r["val_acc"] for r in group]),
                      _mean_sd([r["test_acc"] for r in group]), _mean_sd([r["outside_acc"] for r in group]),
                      f"{statistics.mean(r['seconds'] for r in group):.0f}"])
    table.sort(key=lambda row: (row[0], row[1], float(row[2]) if row[2] != "?" else 0, float(row[3]) if row[3] != "?"
                                else 0))
    print("\nthe grid (mean ± sd over seeds):")
    print_table(["labels", "start", "lr", "epochs", "seeds", "steps", "validation", "test", "outside", "seconds"],
                table)
    chosen: dict[tuple, dict] = {}
    seeds = {}  # a start's most seeds in any cell: cells with fewer (a grid cut short) are not chosen
    for (start, labels, *_), group in cells.items():
        seeds[start, labels] = max(seeds.get((start, labels), 0), len(group))
    for (start, labels, lr, epochs, _), group in cells.items():
        val = statistics.mean(r["val_acc"] for r in group)
        best = chosen.get((start, labels))
        if len(group) == seeds[start, labels] and (best is None or val > best["val"]):
            chosen[(start, labels)] = {"lr": lr, "epochs": epochs, "val": val, "seeds": len(group),
                                       "random": start_name({"init": "random", "model": group[0]["model"]}),
                                       **{m: [r[m] for r in group] for m in ("val_acc", "test_acc", "outside_acc")}}
    print("\neach start's choice, by mean validation accuracy (the test split chose nothing):")
    print_table(["labels", "start", "chosen lr", "epochs", "seeds", "validation", "test", "outside"],
                [[labels, start, f"{c['lr']:g}" if c["lr"] else "?", f"{c['epochs']:g}" if c["epochs"] else "?",
                  c["seeds"], _mean_sd(c["val_acc"]), _mean_sd(c["test_acc"]), _mean_sd(c["outside_acc"])]
                 for (start, labels), c in sorted(chosen.items(), key=lambda item: (item[0][1], item[0][0]))])
    for (start, labels), c in sorted(chosen.items(), key=lambda item: (item[0][1], item[0][0])):
        baseline = chosen.get((c["random"], labels))  # random weights of the same shape
        if start != c["random"] and baseline:
            gap = {m: 100 * (statistics.mean(c[m]) - statistics.mean(baseline[m])) for m in ("test_acc", "outside_acc")}
            print(f"gap {start} - random, {labels} labels, each at its chosen rate: test {gap['test_acc']:+.1f} points,"
                  f" outside {gap['outside_acc']:+.1f} points (targets: >= 6)")
    return chosen


def majority_rates(task: str, outside: str) -> None:
    """The accuracy of always guessing the most frequent class of each test split: what no skill scores."""
    from collections import Counter

    from bert_demo.data.labelled import load_task

    for name in (task, outside):
        labels = load_task(name)["test"]["label"]
        print(f"{name} test split: {len(labels):,} sentences, the majority class alone scores "
              f"{Counter(labels).most_common(1)[0][1] / len(labels):.3f}")


def write_task_text(task: str, path: str, per_document: int = 20) -> None:
    """The task's training sentences without their labels, one a line, a blank line after every `per_document`
    (documents for next-sentence pairs): the text for continued pre-training on the task (Gururangan et al. 2020)."""
    from bert_demo.data.labelled import load_task

    texts = [" ".join(text.split()) for text in load_task(task)["train"]["text"]]
    with open(path, "w") as file:
        for start in range(0, len(texts), per_document):
            file.write("\n".join(texts[start:start + per_document]) + "\n\n")
    print(f"wrote {len(texts):,} training sentences of {task} to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--task", default="movie-reviews")
    parser.add_argument("--outside", default="amazon-reviews")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sizes", default="all,500", help="labelled examples per run: numbers or 'all'")
    parser.add_argument("--inits", default="pretrained,random,frozen")
    parser.add_argument("--epochs", default="3", help="epochs with all labels (a comma list: each is run)")
    parser.add_argument("--small-epochs", default="10", help="epochs with a given number of labels, which take more "
                                                           "passes for the same number of steps (a comma list)")
    parser.add_argument("--lr", type=float, default=None, help="one learning rate (default: FinetuneConfig's)")
    parser.add_argument("--lrs", default=None, help="a grid of learning rates, comma-separated (replaces --lr)")
    parser.add_argument("--reinit-pooler", action="store_true", help="start the pooler anew (pre-trained starts)")
    parser.add_argument("--layer-decay", type=float, default=1.0, help="layer-wise learning-rate decay (1: off)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--app-budget", action="store_true",
                        help="the Fine-tune tab's budget: APP_FINETUNE's passes, at most its max_steps a run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in a process of its own")
    parser.add_argument("--log", default="benchmarks/results/finetune.jsonl")
    parser.add_argument("--resume", action="store_true", help="skip the runs --log already holds")
    parser.add_argument("--from-log", nargs="+", default=None, help="summarise the rows of these logs; run nothing")
    parser.add_argument("--no-attribution", action="store_true", help="skip the attribution timing")
    parser.add_argument("--write-task-text", default=None, metavar="PATH",
                        help="write the task's training sentences, unlabelled, to PATH and stop")
    args = parser.parse_args()
    if args.write_task_text:
        write_task_text(args.task, args.write_task_text)
        return
    if args.from_log:
        rows = [json.loads(line) for path in args.from_log for line in open(path) if line.strip()]
        summarise(rows)
        majority_rates(args.task, args.outside)
        return
    lrs = [float(x) for x in args.lrs.split(",")] if args.lrs else [args.lr or FinetuneConfig.lr]
    plan = [(init, size, seed, lr, epochs)
            for size in [None if s == "all" else int(s) for s in args.sizes.split(",")]
            for epochs in map(float, (args.epochs if size is None else args.small_epochs).split(","))
            for init in args.inits.split(",")
            for lr in lrs
            for seed in map(int, args.seeds.split(","))]
    if args.resume and os.path.exists(args.log):  # runs the log already holds are not run again
        done = {_key(json.loads(line)) for line in open(args.log) if line.strip()}
        plan = [run for run in plan if _key(dict(zip(("init", "labels", "seed", "lr", "epochs"), run), model=args.model,
                                                 reinit_pooler=args.reinit_pooler and run[0] == "pretrained",
                                                 layer_decay=args.layer_decay)) not in done]
        print(f"{len(plan)} runs to go", flush=True)
    rows = []

    def record(row: dict) -> None:
        rows.append(row)
        with open(args.log, "a") as log:
            log.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if args.jobs > 1:  # CUDA needs fresh processes, not forked ones
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for future in as_completed([pool.submit(run_one, args, *run) for run in plan]):
                record(future.result())
    else:
        for run in plan:
            record(run_one(args, *run))
    summarise(rows)
    if not args.no_attribution:
        seconds, tokens = attribution_time(args.model)
        print(f"one integrated-gradients attribution, {tokens} tokens, {args.model}: {seconds:.2f} s (target <= 1 s)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the worker processes tokenise on their own
    main()
