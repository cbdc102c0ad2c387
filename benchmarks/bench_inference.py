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

    python benchmarks/bench_inference.py [--checkpoint DIR] [--preset mini] [-n 50]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import cores, interleaved_times, make_random_checkpoint, ms, percentile, print_table

import torch
import transformers

from bert_demo.checkpoint import load_pretrained
from bert_demo.corpus import load_corpus
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: a random one, built now)")
    p.add_argument("--preset", default="mini", help="preset of the random checkpoint")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary of the random checkpoint's tokenizer")
    p.add_argument("-n", type=int, default=50, help="timed calls per function")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=cores())
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # the pipeline's load report (unused pooler/NSP weights)
    transformers.utils.logging.disable_progress_bar()
    device = torch.device(args.device)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.checkpoint or make_random_checkpoint(Path(tmp) / "model", args.preset, args.vocab)
        model, tokenizer = load_pretrained(folder, device=device)
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
