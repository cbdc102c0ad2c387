"""One command that checks the GPU path on a machine with CUDA and prints one table; without CUDA it says so.

    python benchmarks/gpu_check.py                 # about 5 minutes on an H100
    python benchmarks/gpu_check.py --quick         # without the app's default run

What it checks, each beside a reference measured in the same run:
1. the test suite's GPU-marked tests (`pytest -m gpu`: parity with transformers on the GPU, a run in bf16 that
   learns, inference equal to the CPU's, out of memory saved), and test_runtime.py (device choice, precision rules);
2. the device each torchrun rank takes: every GPU of the machine, one rank each (with one GPU, the rank-to-GPU rule
   is only checked on a CPU, by test_runtime.py);
3. training throughput, ours against transformers.BertForPreTraining (SDPA), both in bf16 autocast
   (bench_train.py, mini at 32 x 128 with vocabulary 8,192);
4. the peak GPU memory of a training step at the app's GPU caps (base, batch 64 x 512, vocabulary 32,768), against
   the 24 GB the caps are meant to fit;
5. what the host-device synchronisations cost: our training step with the running metrics kept on the GPU (today)
   against the same step reading five of them back with `.item()` at every micro-step (before);
6. the app's default run (APP_RUN) trained on the GPU: time, held-out MLM and next-sentence accuracy;
7. each backend function behind the app's endpoints, once, on the GPU, with its answer compared to the CPU's.
   The gradio layer itself is started only where gradio is installed.

It needs nothing a lent GPU machine lacks (no gensim, no datasets, no registry): the compile check trains on a corpus
file it writes, and the app's default run reads news and wiki from the carried corpus (`gpu_pretrain.py pack`, carry
["gpu-carry"]); without it that row says so.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _common import interleaved_times, print_table

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "mini-english"
CARD_BYTES = 24 * 10**9  # the GPU caps are meant to fit a 24 GB card (settings.py)
Row = list[str]


def run(argv: list[str], timeout: float = 900) -> tuple[int, str]:
    """A command's exit code and its output (stdout and stderr together), echoed as it was."""
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    output = done.stdout + done.stderr
    print(output[-4000:])
    return done.returncode, output


def gpu_tests() -> Row:
    code, output = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu or not gpu", "tests/training/test_gpu.py",
                        "tests/training/test_runtime.py", "-p", "no:cacheprovider"])
    summary = next((line for line in reversed(output.splitlines()) if " passed" in line or " failed" in line), "?")
    return ["GPU-marked tests and test_runtime.py", summary.strip("= "), "all pass" if code == 0 else "FAILED"]


def corpus_file(folder: str, documents: int = 200) -> Path:
    """A corpus file of `documents` short documents, written here: text that needs no package to read."""
    corpus = Path(folder) / "corpus.txt"
    corpus.write_text("\n\n".join(f"Document {d} begins here. It has a second sentence about item {d % 97}. And a "
                                  f"third one about topic {d % 7}, which is long enough to fill some tokens."
                                  for d in range(documents)))
    return corpus


def torchrun_ranks() -> Row:
    count = torch.cuda.device_count()
    if count < 2:
        return ["each torchrun rank on its own GPU", f"{count} GPU: not checkable here", "CPU test only"]
    with tempfile.TemporaryDirectory() as out:
        corpus = corpus_file(out)
        code, output = run(["torchrun", "--standalone", f"--nproc_per_node={count}", "-m", "bert_demo", "train",
                            "--preset", "tiny", "--corpus", str(corpus), "--steps", "10", "--batch-size", "8",
                            "--seq-len", "64", "--vocab-size", "300", "--device", "cuda", "--out", f"{out}/run"])
    return [f"torchrun, {count} ranks with --device cuda", "finished" if code == 0 else output.splitlines()[-1][:80],
            "ok" if code == 0 else "FAILED"]


def throughput(preset: str, vocab: int, batch: int, seq: int) -> Row:
    code, output = run([sys.executable, "benchmarks/bench_train.py", "--preset", preset, "--vocab", str(vocab),
                        "--batch", str(batch), "--seq", str(seq), "--steps", "20", "--warmup", "5", "--device", "cuda"])
    lines = output.splitlines()
    ratio = next((line.split(":")[1].strip() for line in lines if line.startswith("ratio tokens/s")), "?")
    ours = next((line.split() for line in lines if line.startswith("ours ")), [])
    share = f", {ours[5]} of the bf16 peak" if len(ours) > 5 else ""
    return [f"tokens/s ours / transformers, bf16, {preset} {batch}x{seq} V={vocab:,}", ratio + share,
            "ok" if code == 0 else "FAILED"]


def compiled() -> Row:
    """The trainer with --compile against without, the same mini run on a corpus file written here."""
    from bert_demo.training.pretraining import pretraining
    from bert_demo.training.settings import TrainConfig

    speed = {}
    for compile_ in (False, True):
        with tempfile.TemporaryDirectory() as out:
            config = TrainConfig(preset="mini", corpus=str(corpus_file(out, 5000)), vocab_size=2048, steps=200,
                                 log_every=50, eval_every=200, device="cuda", out=f"{out}/run", compile=compile_)
            records = [r for r in pretraining(config).run() if r["kind"] == "train"]
            speed[compile_] = statistics.median(r["tokens_per_s"] for r in records[1:])  # after the first compiles
    return ["trainer --compile / eager, mini 32x128, tokens/s after step 50",
            f"{speed[True]:,.0f} / {speed[False]:,.0f}", f"{speed[True] / speed[False]:.2f}x"]


def memory_at_caps() -> Row:
    """One training step of ours at the app's GPU caps, as the trainer takes it (bf16 autocast, AdamW, clipping)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_train import build, make_batches, model_config, step_fn

    args = argparse.Namespace(preset="base", vocab=32768, dropout=0.0)
    batches = [{k: v.cuda() for k, v in b.items()} for b in make_batches(2, 64, 512, 32768, mask_prob=0.25)]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = build("ours", model_config(args)).cuda().train()
    step, _ = step_fn("ours", model, batches, torch.device("cuda"))
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_reserved()
    del model, step
    torch.cuda.empty_cache()
    return ["peak GPU memory (reserved), base 64x512 V=32,768 (the caps)", f"{peak / 1e9:.1f} GB",
            f"{'fits' if peak < CARD_BYTES else 'does NOT fit'} 24 GB"]


def synchronisations() -> Row:
    """Our training step with its running metrics on the GPU, against reading five of them back every micro-step."""
    from bert_demo.config import PRESETS
    from bert_demo.model import BertForPreTraining
    from bert_demo.training.loop import Window
    from bert_demo.training.pretraining import _loss
    from bert_demo.training.recipe import make_optimizer
    from bert_demo.training.settings import TrainConfig
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_train import make_batches

    torch.manual_seed(0)
    model = BertForPreTraining(PRESETS["mini"].with_vocab(8192)).cuda().train()
    config = TrainConfig()
    optimizer = make_optimizer(model, config)
    batches = make_batches(4, 32, 128, 8192)
    window, state = Window(), {"i": 0}

    def step(read_back: bool) -> None:
        cpu = batches[state["i"] % len(batches)]
        state["i"] += 1
        b = {k: v.cuda(non_blocking=True) for k, v in cpu.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(**b)
        loss, metrics = _loss(config, out, cpu, cpu)  # what the trainer's loop does with each micro-batch
        loss.backward()
        window.add(metrics, int(cpu["attention_mask"].sum()))
        if read_back:  # what Window.add did before: five values read at every micro-step
            out.mlm_loss.item(), out.nsp_loss.item(), out.mlm_logits.argmax(-1).sum().item()
            out.nsp_logits.argmax(-1).sum().item(), b["attention_mask"].sum().item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = interleaved_times({"kept on the GPU": lambda: step(False), "read back": lambda: step(True)}, 30, 5,
                              torch.device("cuda"))
    kept, read = (statistics.median(times[name]) for name in ("kept on the GPU", "read back"))
    return ["training step, metrics on the GPU / read back each micro-step", f"{kept * 1e3:.1f} / {read * 1e3:.1f} ms",
            f"{read / kept:.2f}x"]


def app_default_run() -> list[Row]:
    from bert_demo.app.policy import APP_RUN
    from bert_demo.data.corpus import load_corpus, source_parts
    from bert_demo.training.evaluate import evaluate
    from bert_demo.training.pretraining import pretraining
    from bert_demo.training.settings import TrainConfig

    try:
        for part in source_parts(APP_RUN["corpus"]):
            load_corpus(part)
    except Exception as exc:  # noqa: BLE001  (no package, no registry: the row says which)
        return [["the app's default run on the GPU", "not run", f"its corpus cannot be read here: {exc}"[:120]]]

    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(**APP_RUN, out=f"{out}/run", device="cuda", log_every=20,
                             eval_every=APP_RUN["steps"] // 6)
        started = time.perf_counter()
        records = list(pretraining(config).run())
        seconds = time.perf_counter() - started
        done, val = records[-1], [r for r in records if r["kind"] == "val"][-1]
        speed = statistics.median(r["tokens_per_s"] for r in records if r["kind"] == "train")
        news = evaluate(f"{out}/run", "news", max_batches=50)["ours"]
    return [["the app's default run on the GPU (CPU: 145 s, news MLM 0.17)",
             f"{seconds:.0f} s, {speed:,.0f} tokens/s", done["reason"]],
            ["  its held-out MLM / NSP accuracy at the end", f"{val['mlm_acc']:.3f} / {val['nsp_acc']:.3f}", ""],
            ["  its held-out news MLM accuracy (evaluate)", f"{news['mlm_acc']:.3f}", ""]]


def endpoints() -> list[Row]:
    """Each backend function behind an endpoint, once on the GPU, its answer compared with the CPU's."""
    from bert_demo import inference
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.inspection import heads, neighbours

    on = {device: load_pretrained(SHIPPED, device=device) for device in ("cpu", "cuda")}
    text, a, b = "the capital of [MASK] is paris.", "The war ended in 1865.", "Lincoln was shot soon after."
    calls = {
        "fill_mask": lambda m, t: [g[0][0] for g in inference.fill_mask(m, t, text)],
        "layer_predictions": lambda m, t: [layer[0][0] for layer in inference.layer_predictions(m, t, text)[0]],
        "head_importance": lambda m, t: heads.head_importance(m, t, text)[1].argmax().item(),
        "next_sentence": lambda m, t: round(inference.next_sentence(m, t, a, b), 3),
        "attention": lambda m, t: inference.attention(m, t, a, b)[1].argmax().item(),
        "neighbours": lambda m, t: [n.token for n in neighbours.neighbours(m, t, "river", k=3)],
        "embedding_projection": lambda m, t: [round(abs(x), 2) for _, x, _ in
                                              neighbours.embedding_projection(m, t, ["river", "sea", "king"])],
    }
    rows = []
    for name, call in calls.items():
        answers = {}
        for device, (model, tokenizer) in on.items():
            call(model, tokenizer)  # warm-up
            torch.cuda.synchronize()
            started = time.perf_counter()
            answers[device] = call(model, tokenizer)
            torch.cuda.synchronize()
            answers[device + "_ms"] = (time.perf_counter() - started) * 1e3
        same = answers["cpu"] == answers["cuda"]
        rows.append([f"endpoint backend: {name}", f"GPU {answers['cuda_ms']:.1f} ms, CPU {answers['cpu_ms']:.1f} ms",
                     "same answer as the CPU" if same else f"DIFFERS: {answers['cpu']} / {answers['cuda']}"])
    try:
        import gradio  # noqa: F401
    except ImportError:
        rows.append(["the gradio app itself", "not started", "gradio is not installed here"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="leave out the app's default run")
    parser.add_argument("--json", help="also write the table to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine (torch.cuda.is_available() is False): nothing to check.")
        return 0
    carried = ROOT / "gpu-carry" / "corpus.tar.xz"
    if carried.is_file() and "BERT_DEMO_CACHE" not in os.environ:  # the corpus sent with the call: read, not fetched
        from gpu_pretrain import unpack

        os.environ["BERT_DEMO_CACHE"] = tempfile.mkdtemp(prefix="bert-demo-cache-")
        unpack(carried, Path(os.environ["BERT_DEMO_CACHE"]))
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability {props.major}.{props.minor}; "
          f"torch {torch.__version__}")
    rows = [gpu_tests(), torchrun_ranks(), throughput("mini", 8192, 32, 128), throughput("base", 32768, 64, 512),
            memory_at_caps(), synchronisations(), compiled()]
    if not args.quick:
        rows += app_default_run()
    rows += endpoints()
    print_table(["check", "measured", "verdict"], rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": props.name, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
