"""Where the app's default run spends its time, from the click to the last record.

    python benchmarks/default_run.py              # the run as the Train tab starts it, in its own process: phases
    python benchmarks/default_run.py --profile    # the same run in this process under cProfile: functions
    python benchmarks/default_run.py --precision fp32   # either form in another precision than auto's

The first form starts APP_RUN through the registry, as a visitor's click does once the page has loaded (the run's fork
server is already up), and stamps each record as it arrives: the wait for the run's process, each phase of the
preparation, the optimizer steps, the validations, and the final save. A run on a named corpus keeps its vocabulary and
token ids in the cache (`token_cache.py`): the first run on a fresh cache makes them. The second runs the same config's
pre-training under cProfile and prints what is not an optimizer step. Both print the held-out news MLM accuracy the run
reached (`python -m bert_demo eval`'s number). Run nothing else meanwhile: the seconds are shared."""
from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table

from bert_demo.app.machine import import_heavy
from bert_demo.app.runs import run_process
from bert_demo.app.registry import Registry
from bert_demo.training.evaluate import evaluate
from bert_demo.training.pretraining import pretraining

WHAT_IS_NOT_A_STEP = ["load_corpus", "split_documents", "train_tokenizer", "tokenize_documents", "create_examples",
                      "token_counts", "frequency_baseline", "readout_items", "fixed_batches", "_model_and_optimizer",
                      "validate", "_probe", "_readout", "snapshot", "save_pretrained", "share_memory_"]


def phases(runs: str, precision: str) -> tuple[list[list], str]:
    """The run as the Train tab starts it: (phase, seconds) rows from the arrival of its records, and its folder."""
    registry = Registry(runs_dir=runs, device="cpu")
    import_heavy()  # torch and the model code, as the page's first answer has imported them
    first = run_process.context().Process(target=int)  # and the run's fork server, started then, has loaded them too
    first.start()
    first.join()
    config = replace(registry.forms.train_config(), precision=precision)
    clicked = time.perf_counter()
    job = registry.slot.start(config, None, False)  # the settings a click sends, in the precision asked for
    arrivals: list[tuple[float, dict]] = []
    while job.running or len(arrivals) < len(job.records):
        for record in job.wait(len(arrivals), timeout=1.0):
            arrivals.append((time.perf_counter() - clicked, record))
    rows, before, last = [], 0.0, "the click"
    steps = validations = 0.0
    for at, record in arrivals:
        kind = record["kind"]
        if kind == "status":
            rows.append([f"{last} to: {record['message'][:60]}", f"{at - before:.1f}"])
            before, last = at, record["message"][:30]
        elif kind == "train":
            steps += at - before
            before = at
        elif kind in ("val", "probe", "readout"):
            validations += at - before
            before = at
        elif kind == "done":
            rows += [["optimizer steps (and the snapshots taken between them)", f"{steps:.1f}"],
                     ["validations: metrics, probe, held-out sentences", f"{validations:.1f}"],
                     ["the final save", f"{at - before:.1f}"], ["total, from the click", f"{at:.1f}"]]
    return rows, job.done["checkpoint"]


def profile(runs: str, precision: str) -> tuple[list[list], str]:
    """The same config's pre-training in this process, under cProfile: the cumulative seconds of what is not a step."""
    config = replace(Registry(runs_dir=runs, device="cpu").forms.train_config(), out=str(Path(runs) / "profiled"),
                     precision=precision)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    records = list(pretraining(config).run())
    profiler.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    seconds: dict[str, float] = {}
    for (_, _, name), (_, _, _, cumulative, _) in stats.stats.items():
        if name in WHAT_IS_NOT_A_STEP:
            seconds[name] = max(seconds.get(name, 0.0), cumulative)
    rows = [[name, f"{seconds[name]:.1f}"] for name in WHAT_IS_NOT_A_STEP if name in seconds]
    return rows + [["total", f"{total:.1f}"]], records[-1]["checkpoint"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", action="store_true", help="in this process, under cProfile, by function")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    parser.add_argument("--news-batches", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:
        rows, folder = (profile if args.profile else phases)(runs, args.precision)
        news = evaluate(folder, "news", max_batches=args.news_batches)["ours"]
    print_table(["what", "seconds"], rows)
    print(f"held-out news MLM accuracy: {news['mlm_acc']:.3f}")


if __name__ == "__main__":
    main()
