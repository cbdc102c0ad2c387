"""Command line: `python -m bert_demo train|eval|fill-mask|nsp ...` (the same backend functions the app calls).

    python -m bert_demo train --preset tiny --corpus wiki --steps 200 --out checkpoints/tiny-wiki
    torchrun --nproc_per_node 2 -m bert_demo train ...        # DistributedDataParallel, one process per device
    python -m bert_demo eval checkpoints/tiny-wiki --corpus wiki --reference
    python -m bert_demo card checkpoints/tiny-wiki                       # the model card, measured
    python -m bert_demo fill-mask checkpoints/tiny-wiki "the [MASK] of france is paris."
    python -m bert_demo nsp checkpoints/tiny-wiki "The sun rose." "Birds began to sing."
    python -m bert_demo finetune --model checkpoints/mini-english --out runs/mini-movies   # [--init random|frozen]
    python -m bert_demo classify runs/mini-movies "A gripping, beautifully acted film."
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable

from tqdm import tqdm

from bert_demo.training.records import Record
from bert_demo.training.settings import FinetuneConfig, TrainConfig, add_flags, given_flags


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.command(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bert_demo", description="Pre-train and query a BERT.")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    train = commands.add_parser("train", help="pre-train with masked-LM and next-sentence prediction")
    add_flags(train)  # one flag per TrainConfig setting
    train.add_argument("--resume", help="continue the run saved in this checkpoint folder (written back there "
                                        "unless --out is given)")
    train.set_defaults(command=train_command)
    finetune = commands.add_parser("finetune", help="fine-tune a checkpoint (or the same architecture from random "
                                                    "weights) on labelled sentences")
    add_flags(finetune, FinetuneConfig)
    finetune.add_argument("--resume", help="continue the fine-tuning run saved in this folder (written back there "
                                           "unless --out is given)")
    finetune.set_defaults(command=finetune_command)
    classify = commands.add_parser("classify", help="class probabilities of a fine-tuned model for a sentence (pair)")
    classify.add_argument("folder")
    classify.add_argument("text_a")
    classify.add_argument("text_b", nargs="?")
    classify.set_defaults(command=classify_command)
    card = commands.add_parser("card", help="measure a checkpoint and write its model card and learning curve")
    card.add_argument("folder")
    card.add_argument("--corpora", help="corpora whose held-out documents to score (default: those it trained on)")
    card.add_argument("--outside", default="lee,parlspeech",
                      help="texts reserved for evaluation, which it never saw, scored whole (comma-separated)")
    card.add_argument("--batches", type=int, default=50, help="at most this many batches of 32 per corpus")
    card.set_defaults(command=card_command)
    evaluate = commands.add_parser("eval", help="held-out masked-LM and NSP metrics of a checkpoint")
    evaluate.add_argument("folder")
    evaluate.add_argument("--corpus", default="wiki", help="its held-out documents; lee (never trained on): all of it")
    evaluate.add_argument("--batches", type=int, default=200, help="at most this many batches of 32")
    evaluate.add_argument("--reference", action="store_true", help="also score with transformers")
    evaluate.set_defaults(command=eval_command)
    fill = commands.add_parser("fill-mask", help="top predictions for each [MASK]")
    fill.add_argument("folder")
    fill.add_argument("text")
    fill.add_argument("--top-k", type=int, default=5)
    fill.set_defaults(command=fill_mask_command)
    nsp = commands.add_parser("nsp", help="probability that sentence B follows sentence A")
    nsp.add_argument("folder")
    nsp.add_argument("text_a")
    nsp.add_argument("text_b")
    nsp.set_defaults(command=nsp_command)
    return parser


def train_command(args: argparse.Namespace) -> int:
    from bert_demo.checkpoint import read_metadata
    from bert_demo.training.pretraining import pretraining

    overrides = given_flags(args)
    if args.resume:  # continue in the resumed folder and on this machine's device, unless --out / --device say
        stored = {**read_metadata(args.resume).get("train_config", {}), "out": args.resume, "device": None}
        config = TrainConfig.from_stored({**stored, **overrides})
    else:
        config = TrainConfig.from_dict(overrides)
    trainer = pretraining(config, resume=args.resume)
    signal.signal(signal.SIGINT, lambda *_: trainer.stop())  # Ctrl-C: finish the step, save, exit
    progress = tqdm(total=config.steps, initial=trainer.step, unit="step",
                    disable=None if trainer.dist.is_main else True)  # None: no bar where there is no terminal
    done = {}
    try:
        for record in trainer.run():
            done = report(record, progress, tqdm.write if trainer.dist.is_main else lambda _: None)
    finally:
        progress.close()
        trainer.close()
    return 0 if done.get("reason") in ("finished", "stopped") else 1


RESUME_MAY_CHANGE = {"steps", "eval_every", "log_every", "save_every", "out", "device"}  # the rest define the run


def finetune_command(args: argparse.Namespace) -> int:
    from bert_demo.checkpoint import read_metadata
    from bert_demo.training.finetuning import finetuning

    overrides = given_flags(args, FinetuneConfig)
    if args.resume:  # continue in the resumed folder and on this machine's device, unless --out / --device say
        stored = {**read_metadata(args.resume).get("train_config", {}), "out": args.resume, "device": None}
        changed = sorted(key for key, value in overrides.items() if key not in RESUME_MAY_CHANGE
                         and stored.get(key) != value)
        if changed:  # the data, the model or the optimizer would no longer be the run's: its state would not fit
            flags = lambda keys: ", ".join("--" + key.replace("_", "-") for key in keys)  # noqa: E731
            raise ValueError(f"a resumed run keeps its settings: leave out {flags(changed)} (only "
                             f"{flags(sorted(RESUME_MAY_CHANGE))} may change)")
        overrides = {**stored, **overrides}
    tuner = finetuning(FinetuneConfig.from_dict(overrides), resume=args.resume)
    signal.signal(signal.SIGINT, lambda *_: tuner.stop())  # Ctrl-C: finish the step, save, exit
    done: Record = {}
    for record in tuner.run():
        done, kind = record, record["kind"]
        if kind == "status":
            print(record["message"])
        elif kind in ("train", "val"):
            numbers = " ".join(f"{key} {value:.4f}" for key, value in record.items()
                               if key not in ("kind", "step", "tokens", "elapsed", "lr", "tokens_per_s"))
            print(f"step {record['step']} {kind}: {numbers}")
        elif kind == "done":
            print(f"{record['reason']} at step {record['step']}; checkpoint: {record.get('checkpoint')}")
            if record.get("message"):
                print(record["message"])
    return 0 if done.get("reason") in ("finished", "stopped") else 1


def classify_command(args: argparse.Namespace) -> int:
    from bert_demo.checkpoint import load_classifier
    from bert_demo.inference import classify

    model, tokenizer, _, _ = load_classifier(args.folder)
    for label, probability in classify(model, tokenizer, args.text_a, args.text_b):
        print(f"{label}: {probability:.4f}")
    return 0


def report(record: Record, progress: tqdm, write: Callable[[str], None]) -> Record:
    """Show one trainer record on the terminal; return it."""
    kind = record["kind"]
    if kind == "status":
        write(record["message"])
        if "steps" in record:  # a run on a time budget has set its length
            progress.total = record["steps"]
    elif kind == "train" and progress.disable:  # no terminal (a log file): a line a record
        write(f"step {record['step']}: MLM loss {record['mlm_loss']:.3f} acc {record['mlm_acc']:.3f} | NSP loss "
              f"{record['nsp_loss']:.3f} | {record['tokens_per_s']:,.0f} tokens/s")
    elif kind == "train":
        progress.update(record["step"] - progress.n)
        progress.set_postfix(mlm=f"{record['mlm_loss']:.3f}", nsp=f"{record['nsp_loss']:.3f}",
                             acc=f"{record['mlm_acc']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}")
    elif kind == "val":
        write(f"step {record['step']}: validation MLM loss {record['mlm_loss']:.3f} acc {record['mlm_acc']:.3f} "
              f"ppl {record['mlm_ppl']:.1f} | NSP loss {record['nsp_loss']:.3f} acc {record['nsp_acc']:.3f}")
    elif kind == "probe" and "predictions" in record:
        write(f"  {record['text']} -> " + ", ".join(f"{t} {p:.2f}" for t, p in record["predictions"]))
    elif kind == "done":
        write(f"{record['reason']} at step {record['step']}; checkpoint: {record.get('checkpoint')}")
        if record.get("message"):
            write(record["message"])
    return record


def eval_command(args: argparse.Namespace) -> int:
    from bert_demo.training.evaluate import evaluate

    results = evaluate(args.folder, args.corpus, max_batches=args.batches, reference=args.reference)
    for name, metrics in results.items():
        print(f"{name:>12}: MLM loss {metrics['mlm_loss']:.4f} acc {metrics['mlm_acc']:.4f} "
              f"ppl {metrics['mlm_ppl']:.2f} ({metrics['targets']} targets) | NSP loss {metrics['nsp_loss']:.4f} "
              f"acc {metrics['nsp_acc']:.4f} ({metrics['pairs']} pairs)")
    print(json.dumps(results))
    return 0


def card_command(args: argparse.Namespace) -> int:
    from bert_demo.inspection.card import write_card

    corpora = [c.strip() for c in (args.corpora or "").split(",") if c.strip()]
    outside = [c.strip() for c in args.outside.split(",") if c.strip()]
    card = write_card(args.folder, corpora or None, outside, args.batches)
    print(f"wrote {card} and its learning curve")
    return 0


def fill_mask_command(args: argparse.Namespace) -> int:
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.inference import fill_mask

    model, tokenizer = load_pretrained(args.folder)
    for index, guesses in enumerate(fill_mask(model, tokenizer, args.text, top_k=args.top_k), start=1):
        print(f"[MASK] {index}: " + ", ".join(f"{token} ({p:.3f})" for token, p in guesses))
    return 0


def nsp_command(args: argparse.Namespace) -> int:
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.inference import next_sentence

    model, tokenizer = load_pretrained(args.folder)
    print(f"P(B follows A) = {next_sentence(model, tokenizer, args.text_a, args.text_b):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
