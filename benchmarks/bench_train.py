"""Training throughput: our BertForPreTraining against transformers.BertForPreTraining (SDPA), same everything.

Why: the model claims to train faster than the reference (sparse MLM prediction, SDPA). Both models start from the
same weights, see the same batches (random token ids, two segments, padding in every fourth row, BERT masking by our
MaskingCollator), take the same AdamW steps (make_optimizer) with gradient clipping, in train mode (dropout on).
Steps are interleaved (ours, theirs, then theirs, ours, ...) so background load hits both alike; the table gives
median step times, tokens/s, their ratio, and achieved FLOP/s as a share of this machine's matmul peak measured in
the same run, in the precision that --precision names (auto: bf16 autocast where the device computes bf16 natively,
a GPU from Ampere on or a CPU with AVX-512 BF16 or AMX; fp32 elsewhere), the peak in that precision. On a GPU MFU is
also given against --peak-tflops.

`--rss` instead trains each model alone in a fresh subprocess and reports that process's peak RSS (and CUDA peak).

    python benchmarks/bench_train.py --preset mini --vocab 8192 --batch 32 --seq 128 --steps 10 --warmup 3
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from array import array
from dataclasses import replace

import torch
import transformers
from _common import cores, interleaved_times, matmul_peak_flops, print_table

from bert_demo.config import PRESETS, BertConfig
from bert_demo.data.collator import Example, MaskingCollator, SpecialIds
from bert_demo.model import IGNORE_INDEX, BertForPreTraining
from bert_demo.training.recipe import make_optimizer
from bert_demo.training.runtime import autocast, resolve_precision
from bert_demo.training.settings import TrainConfig, default

PAD, CLS, SEP, MASK = 0, 2, 3, 4  # our tokenizer's special ids ([UNK] = 1)
TARGETS = {8192: 1.5, 30522: 2.5}  # tokens/s ratio ours / transformers wanted on mini, batch 32 x 128


def make_batches(n: int, batch: int, seq: int, vocab: int, mask_prob: float = 0.15, seed: int = 0
                 ) -> list[dict[str, torch.Tensor]]:
    """n masked batches of [CLS] A [SEP] B [SEP] with random ids; every fourth row is shorter (padding)."""
    g = torch.Generator().manual_seed(seed)
    special = SpecialIds(cls=CLS, sep=SEP, mask=MASK, pad=PAD, vocab_size=vocab, special=(0, 1, 2, 3, 4))
    collate = MaskingCollator(special, max_predictions=round(seq * mask_prob) + 1,  # the trainer's cap
                              mask_prob=mask_prob)
    randint = lambda low, high: int(torch.randint(low, high, (), generator=g))  # noqa: E731  [low, high)
    batches = []
    for _ in range(n):
        examples = []
        for row in range(batch):
            length = randint(seq // 4, seq) if row % 4 == 0 else seq
            a = randint(1, length - 3)  # segment A tokens; B gets the rest
            ids = torch.randint(5, vocab, (length - 3,), generator=g).tolist()
            examples.append(Example(input_ids=array("i", [CLS, *ids[:a], SEP, *ids[a:], SEP]),
                                    token_type_ids=array("b", [0] * (a + 2) + [1] * (length - a - 2)),
                                    nsp_label=randint(0, 2)))
        batches.append(collate(examples, g))
    return batches


def build(side: str, config: BertConfig, source: BertForPreTraining | None = None) -> torch.nn.Module:
    """Our model, or Hugging Face's with SDPA attention; with `source`, a copy of its weights."""
    if side == "ours":
        return BertForPreTraining(config)
    hf_config = transformers.BertConfig(**config.to_hf_dict(), attn_implementation="sdpa")
    model = transformers.BertForPreTraining(hf_config)
    if source is not None:
        result = model.load_state_dict(source.state_dict(), strict=False)
        # HF keeps the decoder bias under two names (tied to cls.predictions.bias): only that one may be missing.
        assert not result.unexpected_keys and set(result.missing_keys) <= {"cls.predictions.decoder.bias"}, result
        assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
        assert sum(p.numel() for p in model.parameters()) == source.num_parameters()
    return model


def step_fn(side: str, model: torch.nn.Module, batches: list, device: torch.device, precision: str = "auto"):
    """One optimizer step per call, cycling through `batches`: forward (in the run's precision), backward, clip,
    AdamW, zero_grad. Ours is told each batch's count of masked-LM targets, as a run's step is (counted here once,
    before any timing)."""
    optimizer = make_optimizer(model, TrainConfig())  # the default recipe: AdamW, lr 1e-3, decay on matrices
    precision = resolve_precision(precision, device)
    state = {"i": 0, "loss": float("nan")}
    counts = [int((b["mlm_labels"] != -100).sum()) for b in batches]

    def step() -> None:
        b, count = batches[state["i"] % len(batches)], counts[state["i"] % len(batches)]
        state["i"] += 1
        with autocast(device, precision):
            if side == "ours":
                loss = model(**b, mlm_count=count).loss
            else:
                loss = model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                             attention_mask=b["attention_mask"], labels=b["mlm_labels"],
                             next_sentence_label=b["nsp_labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state["loss"] = loss.detach()

    return step, state


def training_flops(config: BertConfig, batch: dict[str, torch.Tensor]) -> float:
    """Matmul FLOPs one training step needs (2 per multiply-add), 3 x forward for forward + backward.

    Forward, with n real (unpadded) tokens, t_b the real length of row b, m masked-LM targets, B rows:
      encoder linears  L * n * 2 * (4 H^2 + 2 H FF)    Q, K, V, output projection; the two FFN matrices
      attention        L * sum_b t_b^2 * 2 * 2 * H      QK^T and probs @ V over each row's real length
      MLM head         m * 2 * (H^2 + H V)              transform dense + vocabulary projection, targets only
      pooler + NSP     B * 2 * (H^2 + 2 H)
    Not counted: embeddings, LayerNorm, softmax, GELU, losses, the optimizer (not matmuls), and padding.
    """
    H, FF, L, V = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    lengths = batch["attention_mask"].sum(1).double()
    n, m, B = float(lengths.sum()), float((batch["mlm_labels"] != IGNORE_INDEX).sum()), lengths.numel()
    forward = (L * n * 2 * (4 * H * H + 2 * H * FF) + L * float((lengths**2).sum()) * 4 * H
               + m * 2 * (H * H + H * V) + B * 2 * (H * H + 2 * H))
    return 3 * forward


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 1024**2)


def run_child(args: argparse.Namespace, device: torch.device) -> None:
    """--child SIDE: train that model alone and print one JSON line of memory numbers (for --rss)."""
    batches = make_batches(min(args.steps + args.warmup, 4), args.batch, args.seq, args.vocab, args.mask_prob)
    baseline = peak_rss_mb()
    torch.manual_seed(0)
    model = build(args.child, model_config(args)).to(device).train()
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    step, _ = step_fn(args.child, model, batches, device, args.precision)
    times = interleaved_times({args.child: step}, args.steps, args.warmup, device)[args.child]
    cuda = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_rss_mb(), "cuda_mb": cuda,
                      "step_s": statistics.median(times)}))


def run_rss(args: argparse.Namespace) -> None:
    """Each model in its own fresh process, so its peak RSS is its own (imports included, shown as baseline)."""
    rows = []
    for side in ("ours", "transformers"):
        argv = [sys.executable, __file__, "--child", side, "--preset", args.preset, "--vocab", str(args.vocab),
                "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
                "--warmup", str(args.warmup), "--threads", str(args.threads), "--device", args.device,
                "--dropout", str(args.dropout), "--mask-prob", str(args.mask_prob), "--precision", args.precision]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"{side} child failed:\n{done.stderr}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append([side, f"{r['baseline_mb']:.0f}", f"{r['peak_mb']:.0f}", f"{r['peak_mb'] - r['baseline_mb']:.0f}",
                     "-" if r["cuda_mb"] is None else f"{r['cuda_mb']:.0f}", f"{r['step_s'] * 1000:.1f}"])
    print(f"peak memory, {args.preset} V={args.vocab} batch {args.batch}x{args.seq}, {args.steps} steps, "
          f"{args.threads} threads, {args.device} (target: ours < 2048 MB peak RSS on mini)")
    print_table(["model", "RSS after imports MB", "peak RSS MB", "training adds MB", "CUDA max alloc MB",
                 "median step ms"], rows)
    print(f"ratio peak RSS ours/transformers: {float(rows[0][2]) / float(rows[1][2]):.2f}")


def model_config(args: argparse.Namespace) -> BertConfig:
    """The preset at this vocabulary, with the recipe's dropout (the default recipe trains without; BERT's is 0.1)."""
    config = PRESETS[args.preset].with_vocab(args.vocab)
    return replace(config, hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--dropout", type=float, default=default("dropout"),
                   help="dropout of both models (default: the default recipe's; BERT's recipe: 0.1)")
    p.add_argument("--mask-prob", type=float, default=default("mask_prob"),
                   help="masking rate of the batches (default: the default recipe's; BERT's recipe: 0.15)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--threads", type=int, default=cores())
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                   help="compute precision of both models (auto: bf16 where the device has it natively)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="GPU peak for MFU (H100 SXM bf16 dense)")
    p.add_argument("--peak-n", type=int, default=0, help="matrix size for the matmul peak (default 2048; GPU 8192)")
    p.add_argument("--rss", action="store_true", help="peak memory of each model alone, in fresh processes")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile both models (the trainer's --compile); warm-up covers the recompiles")
    p.add_argument("--child", choices=["ours", "transformers"], help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.child:
        return run_child(args, device)
    if args.rss:
        return run_rss(args)

    config = model_config(args)
    batches = [{k: v.to(device) for k, v in b.items()}
               for b in make_batches(4, args.batch, args.seq, args.vocab, args.mask_prob)]
    torch.manual_seed(0)
    ours = build("ours", config).to(device)
    theirs = build("transformers", config, source=ours).to(device)
    with torch.no_grad():  # same weights => same function (eval mode, fp32): we are timing the same model
        b = batches[0]
        a = ours.eval()(**b)
        t = theirs.eval()(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                          attention_mask=b["attention_mask"])
        diff = max((a.mlm_logits - t.prediction_logits[b["mlm_labels"] != IGNORE_INDEX]).abs().max().item(),
                   (a.nsp_logits - t.seq_relationship_logits).abs().max().item())
    ours.train(), theirs.train()
    if args.compile:  # each of the 4 batches has its own number of masked tokens: let every shape compile untimed
        ours, theirs = torch.compile(ours), torch.compile(theirs)
        args.warmup = max(args.warmup, 8)
    steps = {name: step_fn(name, model, batches, device, args.precision)
             for name, model in (("ours", ours), ("transformers", theirs))}
    times = interleaved_times({name: s[0] for name, s in steps.items()}, args.steps, args.warmup, device)

    peak = matmul_peak_flops(device, torch.bfloat16 if resolve_precision(args.precision, device) == "bf16"
                             else torch.float32,
                             n=args.peak_n or (8192 if device.type == "cuda" else 2048))
    flops = statistics.mean(training_flops(config, b) for b in batches)  # steps cycle through these batches
    tokens = statistics.mean(float(b["attention_mask"].sum()) for b in batches)
    rows, speed = [], {}
    for name, values in times.items():
        median = statistics.median(values)
        speed[name] = tokens / median
        row = [name, f"{median * 1000:.1f}", f"{min(values) * 1000:.1f}", f"{speed[name]:.0f}",
               f"{flops / median / 1e12:.3f}", f"{100 * flops / median / peak:.1f}%",
               f"{float(steps[name][1]['loss']):.3f}"]
        if device.type == "cuda":
            row.append(f"{100 * flops / median / (args.peak_tflops * 1e12):.1f}%")
        rows.append(row)
    print(f"training: {args.preset} (L{config.num_hidden_layers} H{config.hidden_size}) V={args.vocab}, "
          f"batch {args.batch}x{args.seq}, {args.steps} timed + {args.warmup} warm-up steps each, interleaved; "
          f"{args.threads} threads; {device.type} {resolve_precision(args.precision, device)}"
          f"{'; torch.compile' if args.compile else ''}")
    print(f"same weights: max |logit difference| in eval = {diff:.2e}; real tokens per batch {tokens:.0f}; "
          f"matmul FLOPs per step {flops / 1e9:.2f} G; measured matmul peak {peak / 1e12:.3f} TFLOP/s")
    header = ["model", "median step ms", "best ms", "tokens/s", "TFLOP/s", "% of measured peak", "last loss"]
    print_table(header + ([f"MFU vs {args.peak_tflops:g} TFLOP/s"] if device.type == "cuda" else []), rows)
    ratio = speed["ours"] / speed["transformers"]
    target = TARGETS.get(args.vocab) if args.preset == "mini" else None
    print(f"ratio tokens/s ours/transformers: {ratio:.2f}x" + (f" (target >= {target}x)" if target else ""))
    print(f"process peak RSS (both models, this process): {peak_rss_mb():.0f} MB; use --rss for each alone")


if __name__ == "__main__":
    main()
