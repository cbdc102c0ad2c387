"""Inference latency: our fill_mask / attention against transformers on the same checkpoint folder.

Why: the app answers one sentence at a time, so per-call latency (tokenizing, the forward pass, top-k, Python
overhead) is what a user feels. References, loaded from the same folder:
- fill_mask  vs `transformers.pipeline("fill-mask", model=folder)` (top_k=5 both), for a ~20-token sentence with one
  [MASK] and for a 128-token input with one [MASK];
- attention  vs `transformers.BertForPreTraining` with eager attention and output_attentions=True, plus the same
  tokenizing and stacking to [layers, heads, T, T] that `attention()` does.
Calls are interleaved (ours, theirs, theirs, ours, ...) after a warm-up; p50 and p95 of N calls each.
Without --checkpoint, a random-weight checkpoint (weights do not change the work) is built in a temp folder with a
WordPiece tokenizer trained on a few hundred wiki documents.

--bf16 instead times our own calls under bf16 autocast against fp32, interleaved, and counts the checkpoint's
shipped Fill-mask examples (examples.json) on which bf16's top-5 guesses are fp32's, in the same order: the app
serves in fp32 unless bf16 is faster and gives the same guesses (the bf16 issue's rule).

    python benchmarks/bench_inference.py [--checkpoint DIR] [--preset mini] [-n 50]
    python benchmarks/bench_inference.py --bf16 --checkpoint checkpoints/mini-english
"""
from __future__ import annotations

import argparse
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from _common import cores, interleaved_times, make_random_checkpoint, ms, percentile, print_table

from bert_demo.app.folders import read_examples
from bert_demo.checkpoint import load_pretrained
from bert_demo.data.corpus import load_corpus
from bert_demo.inference import attention, fill_mask

SHORT = "the [MASK] of the united states is the head of state and the commander of the armed forces."


def long_text(tokenizer, length: int = 128) -> str:
    """Wiki text with one [MASK] in the middle, whose encoding ([CLS] ... [SEP]) is at most `length` tokens."""
    words = " ".join(s for d in load_corpus("wiki")[:50] for s in d).split()
    n = 1  # words kept; one token is left for the [MASK]
    while n < len(words) and len(tokenizer(" ".join(words[:n + 1]))["input_ids"]) <= length - 1:
        n += 1
    return " ".join([*words[:n // 2], "[MASK]", *words[n // 2:n]])


def reference_attention(model, tokenizer, text: str) -> torch.Tensor:
    """What `attention()` does, with transformers: tokenize, forward with probabilities, stack (L, A, T, T)."""
    batch = tokenizer(text, return_tensors="pt").to(model.device)
    with torch.inference_mode():
        attentions = model(**batch, output_attentions=True).attentions
    return torch.stack([a[0] for a in attentions]).float().cpu()


def bf16_against_fp32(model, tokenizer, folder: Path, texts: dict[str, str], args: argparse.Namespace,
                      device: torch.device) -> None:
    """Our fill_mask and attention in bf16 autocast against fp32, p50 and p95 of interleaved calls, and whether
    bf16 keeps fp32's top-5 guesses on the shipped Fill-mask examples."""
    def under(dtype):
        return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()

    def call(dtype, function, *call_args):
        def run():
            with under(dtype):
                return function(model, tokenizer, *call_args)
        return run

    rows = []
    tokens = {k: len(tokenizer(t)["input_ids"]) for k, t in texts.items()}
    for name, function, text in [*[(f"fill_mask {tokens[k]} tokens", fill_mask, t) for k, t in texts.items()],
                                 (f"attention {tokens['128']} tokens", attention, texts["128"])]:
        t = interleaved_times({d: call(d, function, text) for d in ("fp32", "bf16")}, args.n, args.warmup, device)
        f50, b50 = percentile(t["fp32"], 50), percentile(t["bf16"], 50)
        rows.append([name, ms(f50), ms(percentile(t["fp32"], 95)), ms(b50), ms(percentile(t["bf16"], 95)),
                     f"{f50 / b50:.2f}"])
    print(f"inference in bf16 autocast against fp32: {folder}, {args.n} interleaved calls each after {args.warmup} "
          f"warm-up, {args.threads} threads, {device.type}")
    print_table(["call", "fp32 p50 ms", "fp32 p95 ms", "bf16 p50 ms", "bf16 p95 ms", "speed-up p50 fp32/bf16"], rows)
    examples = read_examples(folder)
    if examples is None:
        print("no shipped examples (examples.json) to compare guesses on")
        return
    same5 = same1 = 0
    for text in examples.fill_mask:
        fp32, bf16 = call("fp32", fill_mask, text)(), call("bf16", fill_mask, text)()
        same5 += all([w for w, _ in a] == [w for w, _ in b] for a, b in zip(fp32, bf16))
        same1 += all(a[0][0] == b[0][0] for a, b in zip(fp32, bf16))
    print(f"shipped Fill-mask examples with bf16's top-5 guesses in fp32's order: {same5} of "
          f"{len(examples.fill_mask)}; the same first guess: {same1} of {len(examples.fill_mask)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: a random one, built now)")
    p.add_argument("--preset", default="mini", help="preset of the random checkpoint")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary of the random checkpoint's tokenizer")
    p.add_argument("-n", type=int, default=50, help="timed calls per function")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=cores())
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bf16", action="store_true", help="instead: our calls in bf16 autocast against fp32")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # the pipeline's load report (unused pooler/NSP weights)
    transformers.utils.logging.disable_progress_bar()
    device = torch.device(args.device)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.checkpoint or make_random_checkpoint(Path(tmp) / "model", args.preset, args.vocab)
        model, tokenizer = load_pretrained(folder, device=device)
        if args.bf16:
            bf16_against_fp32(model, tokenizer, folder, {"short": SHORT, "128": long_text(tokenizer)}, args, device)
            return
        pipe = transformers.pipeline("fill-mask", model=str(folder), device=device)
        eager = transformers.BertForPreTraining.from_pretrained(str(folder), attn_implementation="eager")
        eager = eager.to(device).eval()

        texts = {"short": SHORT, "128": long_text(tokenizer)}
        lengths = {k: len(tokenizer(t)["input_ids"]) for k, t in texts.items()}
        top1 = {lengths[k]: (fill_mask(model, tokenizer, t)[0][0][0], pipe(t, top_k=5)[0]["token_str"])
                for k, t in texts.items()}
        cases = {f"fill_mask {lengths[k]} tokens": (lambda t=t: fill_mask(model, tokenizer, t, top_k=5),
                                                    lambda t=t: pipe(t, top_k=5)) for k, t in texts.items()}
        cases[f"attention {lengths['128']} tokens"] = (lambda: attention(model, tokenizer, texts["128"]),
                                                       lambda: reference_attention(eager, tokenizer, texts["128"]))
        rows = []
        for name, (ours, theirs) in cases.items():
            t = interleaved_times({"ours": ours, "theirs": theirs}, args.n, args.warmup, device)
            o50, t50 = percentile(t["ours"], 50), percentile(t["theirs"], 50)
            rows.append([name, ms(o50), ms(percentile(t["ours"], 95)), ms(t50), ms(percentile(t["theirs"], 95)),
                         f"{o50 / t50:.2f}"])
        config = model.config
        print(f"inference: {'random ' + args.preset if args.checkpoint is None else folder} "
              f"(L{config.num_hidden_layers} H{config.hidden_size} V{config.vocab_size}), {args.n} interleaved calls "
              f"each after {args.warmup} warm-up, {args.threads} threads, {device.type}")
        print("reference: fill_mask -> transformers.pipeline('fill-mask'); attention -> transformers "
              "BertForPreTraining(eager, output_attentions=True) + tokenizing + stacking")
        print_table(["call", "ours p50 ms", "ours p95 ms", "ref p50 ms", "ref p95 ms", "ratio p50 ours/ref"], rows)
        print(f"same checkpoint, top-1 guess (ours, pipeline): {top1}")
        print("targets: fill_mask p50 <= 0.5 x pipeline, and < 20 ms for the short sentence on mini")


if __name__ == "__main__":
    main()
