"""How fast does a recipe leave BERT's frequent-token plateau? One row per variant, same data, seed and budget.

    python benchmarks/learning_speed.py                       # every variant in VARIANTS, the issue's mini budget
    python benchmarks/learning_speed.py --only baseline,structured+fast  # some of them
    python benchmarks/learning_speed.py --steps 300 --preset tiny --corpus wiki   # a quicker screen
    python benchmarks/learning_speed.py --app-default         # the app's default run, from the click

Each variant is a set of `TrainConfig` overrides: a recipe is a config, not a code edit. Every row gives the tokens
trained on, wall time and tokens/s, the last validation MLM loss and accuracy (its held-out documents, 15% masked),
NSP accuracy, the step at which validation MLM accuracy first reached 0.20, and MLM accuracy on held-out news
documents with every target replaced by [MASK] (`python -m bert_demo eval`'s numbers). Rows are also appended as
JSON lines to --log, so a long sweep can be read while it runs. Run nothing else meanwhile: wall times are shared.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
from _common import print_table

from bert_demo.training.evaluate import evaluate
from bert_demo.training.pretraining import pretraining
from bert_demo.training.settings import BERT_RECIPE, TrainConfig, default

TARGET = 0.20
OLD = {**BERT_RECIPE, "lr": 1e-3, "warmup": 0.1, "dropout": 0.1}  # the recipe before this benchmark: BERT's
STRUCTURED = {  # attention that starts out local: mimetic query/key, sinusoid positions
    "qk_scale": 2.0, "mimetic": True, "sinusoid_positions": True}
FAST = {  # more targets per step, nothing dropped, Adam's eps below the plateau's gradients
    "dropout": 0.0, "adam_eps": 1e-12, "mask_prob": 0.4}
LOCAL = {  # positions that outweigh the words, mimetic query/key: first-layer heads start out local
    "qk_scale": 4.0, "mimetic": True, "sinusoid_positions": True, "position_scale": 8.0}
NEIGHBOURS = {"local_heads": 2, "position_scale": 4.0}  # two heads per layer start on the previous / next token
DEFAULT = {key: default(key) for key in OLD if key not in ("warmup", "short_seq_steps")}  # TrainConfig's own
APP = {**DEFAULT, "lr": 3e-3}  # the app's default run's recipe (app/policy.APP_RUN)
VARIANTS: dict[str, dict] = {
    "baseline": {},
    "default": DEFAULT,  # the recipe `python -m bert_demo train` uses
    "structured": STRUCTURED,
    "fast": FAST,
    "structured+fast": {**STRUCTURED, **FAST},
    "sf+triangle-2e-3": {**STRUCTURED, **FAST, "lr": 2e-3, "schedule": "triangle", "warmup": 0.3},
    "sf+short-seq": {**STRUCTURED, **FAST, "short_seq": 0.3},
    "qk3+eps": {"qk_scale": 3.0, "adam_eps": 1e-12},
    "mask40": {"mask_prob": 0.4},
    "sf+nsp0.1": {**STRUCTURED, **FAST, "nsp_weight": 0.1},
    "local+fast": {**LOCAL, **FAST},
    "local+fast-mask15": {**LOCAL, **FAST, "mask_prob": 0.15},
    "local": LOCAL,
    "local+fast-mask25-lr2e-3": {**LOCAL, **FAST, "mask_prob": 0.25, "lr": 2e-3},
    "neighbours": NEIGHBOURS,
    "fast25+unigram": {**FAST, "mask_prob": 0.25, "unigram_bias": True},
    "neighbours+fast25": {**NEIGHBOURS, **FAST, "mask_prob": 0.25},
    "neighbours+fast15": {**NEIGHBOURS, **FAST, "mask_prob": 0.15},
    "neighbours+fast15+unigram": {**NEIGHBOURS, **FAST, "mask_prob": 0.15, "unigram_bias": True},
    "neighbours+fast25+unigram": {**NEIGHBOURS, **FAST, "mask_prob": 0.25, "unigram_bias": True},
    "neighbours+fast15+unigram+lr2e-3": {**NEIGHBOURS, **FAST, "mask_prob": 0.15, "unigram_bias": True, "lr": 2e-3},
    "local+fast-mask15+unigram": {**LOCAL, **FAST, "mask_prob": 0.15, "unigram_bias": True},
    "local+fast-mask15+unigram+vocab4096": {**LOCAL, **FAST, "mask_prob": 0.15, "unigram_bias": True,
                                            "vocab_size": 4096},
    # next-sentence prediction at chance in the app's tiny default run: tiny has 2 heads a layer, and 2 local heads
    # start every head of every layer on its neighbours, so [CLS] sees no further than a few tokens at the start
    "default-local1": {**DEFAULT, "local_heads": 1},
    "default-local0": {**DEFAULT, "local_heads": 0},
    "default-nsp3": {**DEFAULT, "nsp_weight": 3.0},
    "default-local1-nsp3": {**DEFAULT, "local_heads": 1, "nsp_weight": 3.0},
    "default-globalcls": {**DEFAULT, "global_cls": True},
    "default-globalcls-nsp3": {**DEFAULT, "global_cls": True, "nsp_weight": 3.0},
    "default-globalcls-nsp10": {**DEFAULT, "global_cls": True, "nsp_weight": 10.0},
    # issue 71: the app's default run, sooner to its masked words (each against "default" at the same budget)
    "default-lr2e-3": {**DEFAULT, "lr": 2e-3},
    "default-lr3e-3": {**DEFAULT, "lr": 3e-3},
    "default-short-seq50": {**DEFAULT, "short_seq": 0.5},
    "default-lr2e-3-short-seq50": {**DEFAULT, "lr": 2e-3, "short_seq": 0.5},
    "default-lr3e-3-short-seq50": {**DEFAULT, "lr": 3e-3, "short_seq": 0.5},
    "default-lr4e-3": {**DEFAULT, "lr": 4e-3},
    "default-lr5e-3": {**DEFAULT, "lr": 5e-3},
    # issue 71: the app's default recipe (lr 3e-3) against a masking rate that falls over the run, a higher one,
    # and runs of consecutive tokens masked (GPT-BERT 2024: 30% to 15%, runs of 1-3; Wettig et al. 2022: 40%)
    "app-mask30-15": {**APP, "mask_prob_start": 0.3, "mask_prob": 0.15},
    "app-mask40-15": {**APP, "mask_prob_start": 0.4, "mask_prob": 0.15},
    "app-mask40-25": {**APP, "mask_prob_start": 0.4},
    "app-mask40": {**APP, "mask_prob": 0.4},
    "app-span3": {**APP, "mask_span": 3},
    "app-lr2e-3": {**APP, "lr": 2e-3},
    # issue 71: LAMB (You et al. 2020), GPT-BERT's optimizer (at 1.4e-2), against the app's AdamW at 3e-3
    "app-lamb-5e-3": {**APP, "optimizer": "lamb", "lr": 5e-3},
    "app-lamb-1e-2": {**APP, "optimizer": "lamb", "lr": 1e-2},
    "app-lamb-3e-2": {**APP, "optimizer": "lamb", "lr": 3e-2},
    # issue 71: every picked token made [MASK] (Wettig et al. 2022: 80/10/10 buys nothing), as validation asks
    "app-all-mask": {**APP, "mask_replace": 1.0},
    "app-warmup5": {**APP, "warmup": 0.05},
    "app-local1": {**APP, "local_heads": 1},
    "app-compile": {**APP, "compile": True},  # torch.compile's fused kernels against its compile time
}


def scaled(overrides: dict, steps: int) -> dict:
    """Overrides with "warmup" and "short_seq" (shares of the run) turned into TrainConfig step counts."""
    out = {k: v for k, v in overrides.items() if k not in ("warmup", "short_seq")}
    if "warmup" in overrides:
        out["warmup_steps"] = round(overrides["warmup"] * steps)
    if "short_seq" in overrides:
        out["short_seq_steps"] = round(overrides["short_seq"] * steps)
    return out


def run_variant(name: str, overrides: dict, args: argparse.Namespace, folder: Path) -> dict:
    settings = dict(preset=args.preset, corpus=args.corpus, steps=args.steps, batch_size=args.batch_size,
                    seq_len=args.seq_len, vocab_size=args.vocab_size, eval_every=args.eval_every,
                    eval_batches=args.eval_batches, save_every=10**9, log_every=args.eval_every, seed=args.seed,
                    out=str(folder), precision=args.precision)
    config = TrainConfig(**{**settings, **scaled({**OLD, **overrides}, args.steps)})
    reached, last, started = None, {}, time.perf_counter()
    for record in pretraining(config).run():
        if record["kind"] == "val":
            last = record
            print(f"  {name} step {record['step']}: validation MLM loss {record['mlm_loss']:.3f} "
                  f"acc {record['mlm_acc']:.3f}, NSP acc {record['nsp_acc']:.3f}", flush=True)
            if reached is None and record["mlm_acc"] >= TARGET:
                reached = record["step"]
    seconds = time.perf_counter() - started
    news = evaluate(folder, "news", max_batches=args.news_batches)["ours"]
    return {"variant": name, "overrides": overrides, "tokens": last.get("tokens", 0), "seconds": round(seconds, 1),
            "tokens_per_s": round(last.get("tokens", 0) / seconds), "val_mlm_loss": round(last["mlm_loss"], 3),
            "val_mlm_acc": round(last["mlm_acc"], 4), "val_nsp_acc": round(last["nsp_acc"], 3),
            "step_to_0.20": reached, "news_mlm_acc": round(news["mlm_acc"], 4)}


def run_app_default(args: argparse.Namespace) -> dict:
    """The app's default run as the Train tab starts it (APP_RUN through `Registry.start_training`), timed from the
    click: corpus, tokenizer and examples included. Then MLM accuracy on held-out news documents, all [MASK]ed."""
    from bert_demo.app.policy import APP_RUN
    from bert_demo.app.registry import Registry

    with tempfile.TemporaryDirectory() as runs:
        started = time.perf_counter()
        job = Registry(runs_dir=runs, device="cpu").start_training()
        job.thread.join()
        seconds = time.perf_counter() - started
        if job.done.get("reason") != "finished":
            raise SystemExit(f"the app's default run did not finish: {job.done}")
        last = [r for r in job.records if r["kind"] == "val"][-1]
        news = evaluate(job.trainer.config.out, "news", max_batches=args.news_batches)["ours"]
    return {"variant": "app default", "overrides": APP_RUN, "tokens": last["tokens"], "seconds": round(seconds, 1),
            "tokens_per_s": round(last["tokens"] / seconds), "val_mlm_loss": round(last["mlm_loss"], 3),
            "val_mlm_acc": round(last["mlm_acc"], 4), "val_nsp_acc": round(last["nsp_acc"], 3),
            "val_nsp_acc_any": round(last["nsp_acc_any"], 3), "val_nsp_acc_same": round(last["nsp_acc_same"], 3),
            "step_to_0.20": None, "news_mlm_acc": round(news["mlm_acc"], 4)}


BY_HEART = "\n\n".join([  # six paragraphs a visitor might type (written for this benchmark)
    "My grandmother kept bees behind her house in the hills. "
    "Every summer she gave honey to the neighbours. She wore a white hat with a long veil.",
    "The village had one shop and one school. The shop sold bread, milk and newspapers. "
    "The school had forty children and two teachers.",
    "On Sundays we walked to the lake with our dog. The dog was called Pepper and loved to swim. "
    "We ate sandwiches on the grass near the water.",
    "In winter the road to the village was closed by snow. "
    "The farmers used tractors to bring food to the shop. "
    "The children built a snowman in front of the school.",
    "My grandfather repaired clocks in his workshop. He had a drawer full of tiny springs and gears. "
    "He said that every clock has its own voice.",
    "At night the sky over the hills was full of stars. My grandmother knew the names of many of them. "
    "She taught me to find the north star.",
])
BY_HEART_PROBES = [("the dog was called pepper and loved to [MASK].", "swim"),
                   ("my grandfather repaired [MASK] in his workshop.", "clocks")]


def run_by_heart() -> dict:
    """A few typed paragraphs learned by heart, as the Train tab runs them (tiny, 200 steps, vocabulary 512), timed
    from the click; then training against held-out MLM accuracy, and the guesses for two of its sentences."""
    from bert_demo.app.registry import Registry
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.inference import fill_mask

    with tempfile.TemporaryDirectory() as runs:
        text = Path(runs) / "typed.txt"
        text.write_text(BY_HEART)
        started = time.perf_counter()
        job = Registry(runs_dir=runs, device="cpu").start_training(corpus=[], upload=str(text), steps=200,
                                                                   vocab_size=512)
        job.thread.join()
        seconds = time.perf_counter() - started
        if job.done.get("reason") != "finished":
            raise SystemExit(f"the run did not finish: {job.done}")
        train = [r for r in job.records if r["kind"] == "train"][-1]
        val = [r for r in job.records if r["kind"] == "val"][-1]
        model, tokenizer = load_pretrained(job.done["checkpoint"])
        guesses = {probe: fill_mask(model, tokenizer, probe, top_k=3)[0] for probe, _ in BY_HEART_PROBES}
    return {"variant": "by heart", "seconds": round(seconds, 1), "train_mlm_acc": round(train["mlm_acc"], 3),
            "val_mlm_acc": round(val["mlm_acc"], 3),
            "guesses": {probe: [token for token, _ in guesses[probe]] for probe in guesses},
            "right": sum(guesses[probe][0][0] == answer for probe, answer in BY_HEART_PROBES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated variant names (default: all)")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--corpus", default="news,wiki")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--news-batches", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="compute precision of every variant (TrainConfig.precision)")
    parser.add_argument("--log", default="benchmarks/results/learning_speed.jsonl",
                        help="append one JSON line per variant here")
    parser.add_argument("--app-default", action="store_true",
                        help="instead: the app's default run, timed from the click (target: at most 5 minutes and "
                             "0.15 MLM accuracy on held-out news)")
    parser.add_argument("--by-heart", action="store_true",
                        help="instead: six typed paragraphs learned by heart, timed from the click (target: within "
                             "a minute, with its sentences' words guessed right)")
    args = parser.parse_args()
    if args.app_default or args.by_heart:
        row = run_by_heart() if args.by_heart else run_app_default(args)
        with open(args.log, "a") as log:
            log.write(json.dumps(row) + "\n")
        print(json.dumps(row))
        return
    names = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            row = run_variant(name, VARIANTS[name], args, Path(folder) / "run")
        rows.append(row)
        with open(args.log, "a") as log:
            log.write(json.dumps({**row, "preset": args.preset, "corpus": args.corpus, "steps": args.steps,
                                  "precision": args.precision,
                                  "batch_size": args.batch_size, "seq_len": args.seq_len}) + "\n")
        print(json.dumps(row), flush=True)
    print_table(["variant", "tokens", "seconds", "tok/s", "val MLM loss", "val MLM acc", "val NSP acc",
                 f"step to {TARGET}", "news MLM acc"],
                [[r["variant"], f"{r['tokens']:,}", r["seconds"], f"{r['tokens_per_s']:,}", r["val_mlm_loss"],
                  r["val_mlm_acc"], r["val_nsp_acc"], r["step_to_0.20"] or "-", r["news_mlm_acc"]] for r in rows])


if __name__ == "__main__":
    main()
