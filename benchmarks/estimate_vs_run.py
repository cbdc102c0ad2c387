"""How close the Train tab's estimate comes to the run it estimates (issue 50: "about 3 minutes" took 20+).

    python benchmarks/estimate_vs_run.py                 # the app's default run (APP_RUN)
    python benchmarks/estimate_vs_run.py --steps 300     # a shorter one

The run is timed before it starts as the page times it (`bert_demo/app/pace.py`: a few optimizer steps of its
model, and a forward pass for its checks), then trained as a click trains it (`Slot.start`, its own process), and
the two are printed side by side: the estimate, the run from the click to its last record, and the run's own steps
and checks. The estimate leaves out the preparation (reading the text, its vocabulary and examples), so that is
printed apart. Run it on a quiet machine, and again with the machine busy: the estimate is meant to follow the load.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table

from bert_demo.app import run_process
from bert_demo.app.pace import checks, pace
from bert_demo.app.registry import Registry
from bert_demo.config import PRESETS
from bert_demo.train_config import VAL_BATCH_SIZE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="steps of the run (default: APP_RUN's)")
    args = parser.parse_args()
    registry = Registry(runs_dir=Path(tempfile.mkdtemp(prefix="estimate-")), device="cpu")
    first = run_process.context().Process(target=int)  # the run's fork server, up as the page's first answer has it
    first.start()
    first.join()
    config = registry.forms.train_config(**({"steps": args.steps} if args.steps else {}))
    shape = PRESETS[config.preset].with_vocab(config.vocab_size)
    measured = pace(shape, config.batch_size, config.seq_len, config.precision, config.device)
    count = checks(config.steps, config.eval_every)
    estimate = measured.seconds(config.steps, count, config.eval_batches * VAL_BATCH_SIZE)
    clicked = time.perf_counter()
    job = registry.slot.start(config)
    arrivals: list[tuple[float, dict]] = []
    while job.running or len(arrivals) < len(job.records):
        for record in job.wait(len(arrivals), timeout=1.0):
            arrivals.append((time.perf_counter() - clicked, record))
    total = arrivals[-1][0]
    first_step = next(at for at, record in arrivals if record["kind"] == "train")
    pace_s = job.pace()
    print_table(["what", "seconds"], [
        ["estimate before the click (steps and checks)", f"{estimate:.1f}"],
        [f"  a step measured: {measured.step_s * 1000:.0f} ms; the timing's share of {measured.threads} cores",
         f"{measured.share:.0%}"],
        ["the run, from the click to its last record", f"{total:.1f}"],
        ["  of which before its first training record (preparation, first steps)", f"{first_step:.1f}"],
        ["  its own pace: a step (ms), a check (s)",
         f"{pace_s[0] * 1000:.0f}, {pace_s[1] or 0:.1f}" if pace_s else "-"],
        ["estimate / run", f"{estimate / total:.2f}"],
    ])


if __name__ == "__main__":
    main()
