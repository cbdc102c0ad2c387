"""How close the Train and Fine-tune tabs' estimates come to the runs they estimate, quiet and with a second heavy
process on the machine (issue 58: "about 4 min" for a run on course for 15, and four figures of one run that
disagreed).

    python benchmarks/estimate_vs_run.py                        # the Train tab's default run, on a quiet machine
    python benchmarks/estimate_vs_run.py --load 1               # the same beside a second heavy process
    python benchmarks/estimate_vs_run.py --finetune [--load 1]  # the Fine-tune tab's default experiment
    python benchmarks/estimate_vs_run.py --steps 20 --batch-size 4 --seq-len 32 --vocab-size 512 --corpus wiki

The estimate is taken as the page takes it (`estimates.plan` and `forecast`: a few of the run's steps timed here now),
then the run is trained as a click trains it (the training slot, in a process of its own), and every `--every`
seconds the page's other figures of it are read: the status line's time left (as a whole time: elapsed + left), the
line under Start while it trains (its whole time at its own pace), and the estimate another visitor gets for the
same settings. The table sets each beside the real time from the click to the run's last record, and says whether
the estimate is within 1.5x of it. The estimate leaves out the preparation (reading the text, or loading each
model), so the real time is also given without it. `--load N` starts N processes, each training a BERT-mini on
random tokens with a thread per core, before the estimate is taken and until the run ends.
"""
from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import ROOT, print_table

from bert_demo.app.policy import APP_FINETUNE, APP_RUN
from bert_demo.app.runs import estimates, run_process
from bert_demo.app.registry import Registry

WITHIN = 1.5  # the target: the estimate within this factor of the real time
OWNER = "benchmark"


def main() -> None:
    args = _arguments()
    loads = [multiprocessing.get_context("spawn").Process(target=_heavy, daemon=True) for _ in range(args.load)]
    for load in loads:
        load.start()
    try:
        time.sleep(5.0 if loads else 0.0)  # the heavy processes past their imports, training
        with tempfile.TemporaryDirectory(prefix="estimate-") as runs:
            registry = Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=runs, device="cpu", allow_hub=False)
            first = run_process.context().Process(target=int)  # the runs' fork server, up as the app has it
            first.start()
            first.join()
            rows = (_experiment if args.finetune else _run)(registry, args)
    finally:
        for load in loads:
            load.kill()
    print(f"\n{args.load} heavy process(es) beside the run")
    print_table(["what", "seconds", "/ real"], rows)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finetune", action="store_true", help="the Fine-tune tab's experiment instead of a run")
    parser.add_argument("--load", type=int, default=0, help="heavy processes beside the run (default 0)")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between readings of the page's figures")
    for name in ("corpus", "preset", "steps", "batch_size", "seq_len", "vocab_size"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(APP_RUN[name]), default=APP_RUN[name],
                            help=f"the run's {name} (default: the Train tab's, {APP_RUN[name]})")
    parser.add_argument("--model", default="checkpoints/mini-english", help="the model to fine-tune")
    parser.add_argument("--task", default=APP_FINETUNE["task"], help="the task to fine-tune on")
    parser.add_argument("--file", default=None, help="a labelled .csv/.tsv/.jsonl to fine-tune on instead")
    parser.add_argument("--labels", type=int, default=APP_FINETUNE["train_examples"], help="labelled sentences")
    return parser.parse_args()


def _run(registry: Registry, args: argparse.Namespace) -> list[list[str]]:
    """The Train tab's run: its estimate, then the run from the click, read every `args.every` seconds."""
    config = registry.forms.train_config(corpus=args.corpus, preset=args.preset, steps=args.steps,
                                         batch_size=args.batch_size, seq_len=args.seq_len,
                                         vocab_size=args.vocab_size)
    planned = estimates.plan(config)
    before, measured = estimates.forecast(registry.slot.job, [planned])
    clicked = time.perf_counter()
    job = registry.slot.start(config, OWNER)
    readings = []
    while job.running:
        job.thread.join(timeout=args.every)
        if job.running and job.seconds_left is not None:
            readings.append((time.perf_counter() - job.started + job.seconds_left, job.seconds_total,
                             estimates.forecast(registry.slot.job, [planned])[0]))
    real = time.perf_counter() - clicked
    return _rows(before, measured, real, real - _trained(job), readings, job.pace())


def _experiment(registry: Registry, args: argparse.Namespace) -> list[list[str]]:
    """The Fine-tune tab's experiment (pre-trained and random weights): its estimate, then its runs from the click."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    configs = {start: registry.forms.finetune_config(args.model, args.task, args.labels, start, args.file, OWNER,
                                                     stamp=stamp) for start in ("pretrained", "random")}
    plans = [estimates.plan(config) for config in configs.values()]
    before, measured = estimates.forecast(registry.slot.job, plans)
    clicked = time.perf_counter()
    ticket = registry.slot.join(configs, OWNER)
    readings = []
    while not ticket.ended.wait(args.every):
        ticket.followed()  # a page follows it: the slot gives up a ticket nobody follows
        job = ticket.job
        if job is not None and job.running and job.seconds_left is not None:
            rest = len(configs) - len(ticket.jobs)
            whole = estimates.experiment_left(job, rest) + time.perf_counter() - ticket.jobs[0].started
            readings.append((whole, whole, estimates.forecast(registry.slot.job, plans)[0]))
    real = time.perf_counter() - clicked
    trained = sum(_trained(job) for job in ticket.jobs)
    return _rows(before, measured, real, real - trained, readings, ticket.jobs[-1].pace())


def _trained(job) -> float:
    """A run's time from its first step to its last record: its records' clock, which starts before the run reads
    its text or loads its model, less that preparation (its first record's time less its steps at its own pace)."""
    timed = [r for r in job.records if "elapsed" in r]
    first = next((r for r in timed if r["kind"] == "train"), None)
    if first is None or job.pace() is None:
        return 0.0
    return float(timed[-1]["elapsed"]) - (float(first["elapsed"]) - first["step"] * job.pace()[0])


def _rows(before: float, measured, real: float, prepared: float, readings: list[tuple[float, float, float]],
          own) -> list[list[str]]:
    """The table: the estimate and the page's figures during the run, each against the real time."""
    def row(what: str, seconds: float) -> list[str]:
        return [what, f"{seconds:.1f}", f"{seconds / real:.2f}"]

    def spread(what: str, values: list[float]) -> list[str]:
        if not values:
            return [what, "-", "-"]
        return [what, f"{min(values):.1f}-{max(values):.1f}", f"{min(values) / real:.2f}-{max(values) / real:.2f}"]

    ratio = before / real
    return [row("estimate before the click (steps and checks)", before),
            [f"  its pace: a step {measured.step_s * 1000:.0f} ms, the timing's share of {measured.threads} cores",
             f"{measured.share:.0%}", ""],
            row("the real time, from the click to the run's last record", real),
            row("  without the preparation (reading the text, loading each model)", real - prepared),
            spread(f"the status line, elapsed + left ({len(readings)} readings)", [r[0] for r in readings]),
            spread("the line under Start while it trains (its whole time)", [r[1] for r in readings]),
            spread("another visitor's estimate of the same settings meanwhile", [r[2] for r in readings]),
            ["  the run's own pace: a step (ms), a check (s)",
             f"{own[0] * 1000:.0f}, {own[1] or 0:.1f}" if own else "-", ""],
            ["estimate / real time", f"{ratio:.2f}",
             "within 1.5x" if 1 / WITHIN <= ratio <= WITHIN else "NOT within 1.5x"]]


def _heavy() -> None:
    """A second heavy process: a BERT-mini trained on random tokens, a thread per core, until it is killed."""
    import torch

    from bert_demo.config import PRESETS
    from bert_demo.model import BertForPreTraining
    from bert_demo.training.runtime import set_cpu_threads

    set_cpu_threads()
    model = BertForPreTraining(PRESETS["mini"].with_vocab(8192)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, 8192, (32, 128))
    labels = torch.where(torch.rand(ids.shape) < 0.15, ids, torch.full_like(ids, -100))
    while True:
        model(ids, None, None, mlm_labels=labels, nsp_labels=torch.zeros(32, dtype=torch.long)).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
