"""The Fine-tune tab's experiment as a visitor runs it: the tab's own handler, from the click to the verdict, with the
app's budget (`APP_FINETUNE`), in the training slot's run process. Prints each phase's time and the final scores.

    python benchmarks/app_experiment.py                          # the default: 300 labels, pre-trained and random
    python benchmarks/app_experiment.py --labels 300 --compare random,frozen

Runs go to a temporary folder. Run nothing else meanwhile: the seconds are shared.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import ROOT, print_table

from bert_demo.app import verdict
from bert_demo.app.policy import APP_FINETUNE
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import finetune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="checkpoints/mini-english")
    parser.add_argument("--task", default=APP_FINETUNE["task"])
    parser.add_argument("--labels", default=str(APP_FINETUNE["train_examples"]), choices=finetune.LABEL_CHOICES)
    parser.add_argument("--compare", default="random", help="comma-separated: random, frozen")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs:
        registry = Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=runs, device="cpu", allow_hub=False)
        started, phases, status, update = time.perf_counter(), {}, "", {}
        for update in finetune.finetune(registry, args.model, args.task, None, args.labels,
                                      [c for c in args.compare.split(",") if c], owner="benchmark"):
            status = update.get("ft_status", status)
            phase = status.split(":")[0] if status.startswith("Run ") else status.split(" ")[0]
            phases.setdefault(phase, time.perf_counter() - started)
        total = time.perf_counter() - started
        finals = {init: verdict.final_record(records) for init, records in _records(registry, runs).items()}
    print_table(["phase", "started at (s)"], [[phase, f"{at:.1f}"] for phase, at in phases.items()])
    print_table(["start", "steps", "validation", "test", "outside"],
                [[init, r.get("step"), f"{r.get('acc', float('nan')):.3f}", f"{r.get('test_acc', float('nan')):.3f}",
                  f"{r.get('outside_acc', float('nan')):.3f}"] for init, r in finals.items()])
    print(f"\nfrom the click to the verdict: {total:.1f} s ({total / 60:.2f} min)")
    print(f"verdict: {update.get('ft_verdict', '')}")


def _records(registry: Registry, runs: str) -> dict[str, list]:
    """Each finished run's records, by its start, read back from its folder."""
    from bert_demo.config import read_metadata

    found = {}
    for entry in registry.catalog.list_models("benchmark"):
        if entry.folder is not None and str(entry.folder).startswith(runs):
            metadata = read_metadata(entry.folder)
            found[metadata["train_config"]["init"]] = metadata.get("history") or []
    return found


if __name__ == "__main__":
    main()
