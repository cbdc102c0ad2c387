"""Does the data keep the step busy? A real pre-training run's tokens/s against its training step alone.

Why: on an H200 a run of mini trained at 0.45-0.55 M tokens/s while its step alone (bench_train.py) ran at 2.2 M: the
batches were built in the training process between steps. Now data workers build them ahead (`--data-workers`,
`PretrainingData.batches`). This script measures, in one process and on the same corpus, shape and batch:

1. the run: `python -m bert_demo train`'s own loop for --steps, its tokens/s as its records report them (real
   tokens, padding not counted; the first record, which holds the start-up, left out), for each --workers count;
2. the data alone: how many batches a second the pipeline makes with each --workers count;
3. the step alone: bench_train.py's training step (forward in the run's precision, backward, clipping, AdamW) on
   batches of the same pipeline already on the device, median of --step-repeats steps.

The target (issue 49): on a GPU, the run at >= 80% of the step alone. On a CPU the data is a few ms beside a step of
hundreds, and the run there must be no slower than before the workers came (compare with 0 workers).

With --profile, the run of the first --batch with the last --workers count is profiled (torch.profiler) over 20 of
its steps from its middle: where the training process spends its own time (host time by operation, highest first),
and on a GPU how much of that stretch the GPU computed. What a run does beyond its step alone shows there.

--batch 256,512 measures each batch size in turn (its runs, the pipeline, its step alone): where the step is too small
to fill the GPU, the host's own time per step weighs less beside a larger one (issue 57).

    python benchmarks/bench_pipeline.py --preset mini --batch 32 --corpus wiki --steps 40 --workers 0,1
    python benchmarks/bench_pipeline.py --preset small --vocab 16384 --batch 256 --corpus everyday --steps 300 \\
        --workers 0,8                                                                        # on a GPU
    python benchmarks/bench_pipeline.py --preset small --vocab 16384 --batch 256,512 --corpus v4 --steps 200 \\
        --workers 8 --profile                                        # where the time goes, and a batch twice as large
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from _common import interleaved_times, print_table
from bench_train import step_fn

from bert_demo.config import PRESETS
from bert_demo.data.pairs import SpecialIds
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import load_tokenizer
from bert_demo.training.loop import Control
from bert_demo.training.pretraining import _ids, pretraining, sentence_pairs, split_corpus
from bert_demo.training.recipe import set_dropout
from bert_demo.training.settings import TrainConfig

PROFILED_STEPS = 20  # the steps --profile times, from the middle of the run


def run_speed(config: TrainConfig, profile_from: int | None = None) -> float:
    """Median tokens/s of a run's training records, the first one (start-up, first batches) left out; with
    `profile_from`, its 20 steps after that one profiled (`profiled`), which slows one record of the ten."""
    control = Control()
    if profile_from is None:
        records = list(pretraining(config, control=control).run())
    else:
        with profiled(control, config.device, profile_from):
            records = list(pretraining(config, control=control).run())
    return statistics.median(r["tokens_per_s"] for r in [r for r in records if r["kind"] == "train"][1:])


@contextmanager
def profiled(control: Control, device: str, first: int, steps: int = PROFILED_STEPS) -> Iterator[None]:
    """Profile the steps first+1 to first+steps of the run `control` steers, then print where its process spent its
    time, and on a GPU the share of that stretch the GPU computed."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    times = {}
    with profile(activities=activities, schedule=schedule(wait=first - 1, warmup=1, active=steps)) as prof:
        def after_step() -> None:
            times[control.step] = time.perf_counter()
            prof.step()
        control.after_step = after_step
        yield
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=15))
    wall = times[first + steps] - times[first]
    host = sum(e.self_cpu_time_total for e in events) / 1e6
    line = (f"profiled steps {first + 1}-{first + steps}: {wall * 1000 / steps:.1f} ms a step; host ops "
            f"{host * 1000 / steps:.1f} ms a step")
    if ProfilerActivity.CUDA in activities:
        gpu = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA") / 1e6
        line += f"; the GPU computed {gpu * 1000 / steps:.1f} ms a step ({gpu / wall:.0%} of the stretch)"
    print(line, flush=True)


def data_speed(data, workers: int, batches: int) -> float:
    """Batches a second from the pipeline, after its first batch (the workers' start and first epoch)."""
    stream = data.batches(workers) if workers else data.batches()  # (the code before the workers took no count)
    next(stream)
    start = time.perf_counter()
    for _ in range(batches):
        next(stream)
    return batches / (time.perf_counter() - start)


def measure_batch(args: argparse.Namespace, batch: int, profile: bool, scratch: Path) -> list[list]:
    """The run (for each --workers count; the last one profiled if `profile`), the pipeline alone and the step alone
    at one batch size; each figure printed as soon as it is measured, so that a timeout leaves what was measured."""
    counts = [int(w) for w in args.workers.split(",")]
    config = TrainConfig(preset=args.preset, vocab_size=args.vocab, batch_size=batch, seq_len=args.seq,
                         corpus=args.corpus, steps=args.steps, log_every=max(1, args.steps // 10), eval_every=10**6,
                         save_every=10**6, device=args.device, compile=args.compile,
                         out=str(scratch / f"run-{batch}"))
    runs = {}
    for w in counts:
        profile_from = args.steps // 2 if profile and w == counts[-1] else None
        runs[w] = run_speed(TrainConfig.from_dict({**config.to_dict(), "data_workers": w}), profile_from)
        print(f"the run at batch {batch} with {w} data workers: {runs[w]:,.0f} real tokens/s", flush=True)
    tokenizer = load_tokenizer(config.out)
    (train_docs, train_sources), _ = split_corpus(config)
    data = sentence_pairs(config, _ids(config, tokenizer, train_docs, train_sources, "train"),
                          SpecialIds.from_tokenizer(tokenizer), 0, batch, mask_prob=config.mask_prob)
    made = {w: data_speed(data, w, max(20, args.step_repeats)) for w in counts}
    alone, tokens = step_alone(args, config, data, len(tokenizer))
    step_speed = tokens / alone
    print(f"the step alone at batch {batch}: {alone * 1000:.1f} ms, {step_speed:,.0f} real tokens/s ({tokens:.0f} a "
          "batch)", flush=True)
    return [[batch, w, f"{made[w]:.1f}", f"{made[w] * tokens:,.0f}", f"{runs[w]:,.0f}", f"{step_speed:,.0f}",
             f"{runs[w] / step_speed:.0%}"] for w in counts]


def step_alone(args: argparse.Namespace, config: TrainConfig, data, vocab: int) -> tuple[float, float]:
    """The median seconds of bench_train.py's training step on four of the pipeline's batches already on the device,
    and their mean real tokens."""
    device = torch.device(args.device)
    batches = [{k: v.to(device) for k, v in b.items()} for b in itertools.islice(data.batches(), 4)]
    model = BertForPreTraining(PRESETS[args.preset].with_vocab(vocab))
    set_dropout(model, config.dropout)
    model = model.to(device).train()
    step, _ = step_fn("ours", torch.compile(model) if args.compile else model, batches, device, config.precision)
    alone = statistics.median(interleaved_times({"step": step}, args.step_repeats, 3, device)["step"])
    return alone, statistics.mean(float(b["attention_mask"].sum()) for b in batches)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", default="32", help="batch sizes to compare, comma-separated (each its run and step)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--corpus", default="wiki")
    p.add_argument("--steps", type=int, default=40, help="steps of each run")
    p.add_argument("--workers", default="0,1", help="data-worker counts to compare, comma-separated")
    p.add_argument("--step-repeats", type=int, default=20)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the run's model (and the step alone's)")
    p.add_argument("--profile", action="store_true",
                   help=f"profile {PROFILED_STEPS} steps of the run of the first --batch with the last --workers count")
    args = p.parse_args()
    if args.profile and args.steps < 2 * PROFILED_STEPS:
        p.error(f"--profile times {PROFILED_STEPS} steps from the run's middle: give --steps {2 * PROFILED_STEPS} "
                "or more")
    sizes = [int(b) for b in args.batch.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for batch in sizes:
            rows += measure_batch(args, batch, args.profile and batch == sizes[0], Path(scratch))
    print(f"{args.preset} V={args.vocab}, x{args.seq}, corpus {args.corpus}, {args.device}"
          f"{', compiled' if args.compile else ''}; runs of {args.steps} steps")
    print_table(["batch", "data workers", "batches/s made", "tokens/s made", "run tokens/s", "step alone tokens/s",
                 "run / step alone"], rows)
    print("target: on a GPU, the run at >= 80% of the step alone")


if __name__ == "__main__":
    main()
