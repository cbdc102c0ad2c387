"""The app's ZeroGPU path on a lent GPU, in one call of under 4 minutes (issue 56): the contract tests with CUDA in the
forked call, then the Train tab's GPU default run (APP_GPU_RUN) as a visitor's click starts it on ZeroGPU, measured.

Why: ZeroGPU itself cannot be reached from here, and the lent GPU has no `spaces` and no gradio. The harness of
tests/app/runs/zerogpu_harness.py does what `spaces` does there (a forked, reused worker; pickled arguments and
messages; the duration asked first, bounding the call; the app's process patched so that CUDA looks available but cannot
start), so the run goes through the app's own code: the slot, `zerogpu.GPUCallTrainer`, `gpu_call.train_call`. What the
lent card cannot tell is ZeroGPU's own pace (half an RTX Pro 6000, perhaps a quarter of an H200): the run's tokens/s
here is an upper bound for it.

Here, before the call (the corpus's parsed caches and vocabulary, and the wheels the machine lacks, in zerogpu-carry/;
the shipped weights left home, as for the other GPU calls, so that the tree travels light):

    python benchmarks/zerogpu_check.py pack
    python benchmarks/gpu_pretrain.py leave-home

There (carry ["zerogpu-carry"], timeout_s 240), then `python benchmarks/gpu_pretrain.py come-back` here:

    python benchmarks/zerogpu_check.py run

Its last lines: the tests' summary, then the run: the seconds its call asked for and took, its steps and tokens, its
tokens/s, its last validation and probe, and its held-out news and wiki MLM / NSP through `transformers`
(issue 56's target: news MLM >= 0.30, NSP >= 0.70).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
import gpu_pretrain

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / "zerogpu-carry"
CORPUS = CARRY / "corpus.tar.xz"


def pack() -> None:
    """Here: the default GPU run's corpus (parsed caches and vocabulary) and the wheels, in zerogpu-carry/."""
    from bert_demo.app.policy import APP_GPU_RUN

    gpu_pretrain.pack(APP_GPU_RUN["corpus"], CORPUS, APP_GPU_RUN["vocab_size"])
    gpu_pretrain.pack_wheels(CARRY / "wheels")
    sent = gpu_pretrain.travel_bytes(carry=CARRY.name)
    print(f"a call sends {sent / gpu_pretrain.MiB:.1f} MiB of the {gpu_pretrain.TRAVEL_BYTES // gpu_pretrain.MiB} MiB "
          "that may travel (run `gpu_pretrain.py leave-home` first if the shipped weights are still in the tree)")


def run(test_timeout: int, run_timeout: int, form: dict) -> None:
    """There: the contract tests, then the default GPU run through the harness, and its held-out metrics."""
    gpu_pretrain.install_missing(CARRY / "wheels")
    cache = Path(tempfile.mkdtemp(prefix="bert-demo-cache-"))
    gpu_pretrain.unpack(CORPUS, cache)
    os.environ["BERT_DEMO_CACHE"] = str(cache)
    try:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "tests/app/runs/test_zerogpu.py"], cwd=ROOT, capture_output=True, text=True,
                               timeout=test_timeout)
        told = (tests.stdout.strip().splitlines() or ["(no output)"])[-1]
    except subprocess.TimeoutExpired:
        told = f"not finished in {test_timeout} s"
    print("== tests/app/runs/test_zerogpu.py (CUDA in the forked call):", told, flush=True)
    default_run(Path(tempfile.mkdtemp(prefix="bert-demo-runs-")), run_timeout, form)


def default_run(runs: Path, timeout: float, form: dict) -> None:
    """The Train tab's GPU default run, started as a visitor's click starts it on ZeroGPU, and what it learned."""
    sys.path.insert(0, str(ROOT))
    from bert_demo.app.runs.gpu_call import train_call
    from bert_demo.app.runs.zerogpu import duration
    from bert_demo.app.registry import Registry
    from tests.app.runs.zerogpu_harness import ForkedGPU, ZeroGPUTorch

    patched = ZeroGPUTorch()
    patched.patch()
    call = ForkedGPU(train_call, duration, in_worker=patched.in_worker)
    registry = Registry(checkpoints_dir=ROOT / "checkpoints", runs_dir=runs, allow_hub=False, gpu_call=call)
    clicked = time.perf_counter()
    job = registry.join_line(owner="zerogpu-check", **form).wait_for_run(1, timeout=60)
    asked = None
    while job.running and time.perf_counter() - clicked < timeout:
        if asked is None and any(r.get("message", "").startswith("asking ZeroGPU") for r in job.records):
            asked = time.perf_counter()
        time.sleep(0.2)
    ended = time.perf_counter()
    patched.unpatch()
    print(summary(job, call.durations, clicked, asked or clicked, ended, patched.attempts), flush=True)
    if job.done and job.done.get("checkpoint"):
        held_out(job.done["checkpoint"])


def summary(job, durations: list[float], clicked: float, asked: float, ended: float, attempts: list) -> str:
    """What the run did, in a few lines."""
    done = job.done or {}
    train = [r for r in job.records if r.get("kind") == "train"]
    val = next((r for r in reversed(job.records) if r.get("kind") == "val"), {})
    probe = next((r for r in reversed(job.records) if r.get("kind") == "probe"), {})
    tokens = train[-1]["tokens"] if train else 0
    speeds = sorted(r["tokens_per_s"] for r in train[1:]) or [0.0]
    config = job.trainer.config
    return "\n".join([
        f"== the GPU default run: {config.preset}, {config.steps:,} steps of {config.batch_size} x {config.seq_len}, "
        f"corpus {config.corpus}",
        f"call: asked for {durations[0] if durations else '?'} s, took {ended - asked:.1f} s (the CPU's preparation "
        f"before it: {asked - clicked:.1f} s); CUDA initialised in the app's process: {len(attempts)} time(s)",
        f"run: {done.get('reason')} at step {done.get('step', 0):,}, {tokens / 1e6:.1f} M real tokens, "
        f"{speeds[len(speeds) // 2]:,.0f} tokens/s (median of its records); {done.get('message') or ''}",
        f"last validation: MLM {val.get('mlm_acc', float('nan')):.3f}, NSP {val.get('nsp_acc', float('nan')):.3f}; "
        f"probe: {[word for word, _ in probe.get('predictions', [])[:5]]}",
    ])


def held_out(folder: str) -> None:
    """Held-out news and wiki MLM / NSP of the run, through transformers (and ours, which must agree)."""
    from bert_demo.training.evaluate import evaluate

    for corpus in ("news", "wiki"):
        result = evaluate(folder, corpus, max_batches=50, reference=True)
        theirs = result["transformers"]
        print(f"held-out {corpus} through transformers: MLM {theirs['mlm_acc']:.3f}, NSP {theirs['nsp_acc']:.3f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("pack", "run"))
    parser.add_argument("--test-timeout", type=int, default=100, help="seconds the contract tests may take")
    parser.add_argument("--run-timeout", type=int, default=100, help="seconds the default run may take")
    parser.add_argument("--steps", type=int, help="a shorter run than the default's (a proof on a CPU)")
    parser.add_argument("--batch-size", type=int, help="a smaller batch than the default's (a proof on a CPU)")
    args = parser.parse_args()
    if args.action == "pack":
        pack()
    else:
        form = {name: value for name, value in (("steps", args.steps), ("batch_size", args.batch_size)) if value}
        run(args.test_timeout, args.run_timeout, form)


if __name__ == "__main__":
    main()
