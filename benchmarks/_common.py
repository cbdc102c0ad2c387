"""Helpers shared by the benchmark scripts: import path, thread count, timing statistics, a throwaway checkpoint.

Each benchmark runs as `python benchmarks/<name>.py` from the repository root; that puts `benchmarks/` (not the
root) on sys.path, so this module adds the root so that `bert_demo` imports without installing the package.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def cores() -> int:
    """CPU cores this process may run on (the default thread count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so that a wall-clock time covers the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; the median is q=50."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interleaved_times(calls: dict[str, Callable[[], object]], n: int, warmup: int,
                      device: torch.device | None = None) -> dict[str, list[float]]:
    """Seconds per call for each named function, run in turns (A B, then B A, ...) so noise hits all alike.

    The order alternates every round, so neither side always runs right after the other (cache, turbo, GC).
    The first `warmup` rounds are run but not recorded.
    """
    names, times = list(calls), {name: [] for name in calls}
    device = device or torch.device("cpu")
    for round_ in range(warmup + n):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            sync(device)
            start = time.perf_counter()
            calls[name]()
            sync(device)
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def matmul_peak_flops(device: torch.device, dtype: torch.dtype = torch.float32, n: int = 2048,
                      repeats: int = 5, tries: int = 5) -> float:
    """This machine's measured matmul FLOP/s: the best of `tries` timings of `repeats` (n x n) @ (n x n)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)  # warm-up: thread pool, kernel selection
    best = float("inf")
    for _ in range(tries):
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 * repeats / best


def print_table(header: list[str], rows: list[list[object]]) -> None:
    """A plain, aligned text table (floats as given: format them before)."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for index, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if index == 0:
            print("  ".join("-" * w for w in widths))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def make_random_checkpoint(folder: Path, preset: str = "mini", vocab_size: int = 8192, n_documents: int = 300,
                           seed: int = 0) -> Path:
    """A random-weight checkpoint with a real WordPiece tokenizer trained on a few hundred wiki documents.

    Random weights are enough for latency: the work per call does not depend on what the weights are.
    """
    from bert_demo.checkpoint import save_pretrained
    from bert_demo.config import PRESETS
    from bert_demo.data.corpus import load_corpus
    from bert_demo.model import BertForPreTraining
    from bert_demo.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(load_corpus("wiki")[:n_documents], vocab_size=vocab_size)
    torch.manual_seed(seed)
    model = BertForPreTraining(PRESETS[preset].with_vocab(len(tokenizer)))
    return save_pretrained(model, tokenizer, folder)

