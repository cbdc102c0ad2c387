"""Held-out metrics of several checkpoints side by side, on the same documents, scored through `transformers`.

Why: a new shipped model replaces the old one only if it is better on every held-out text, and the numbers must be
measured at the same time, on the same documents, outside this project's model code. For each corpus, each model
scores the documents its run held out (the split is by a hash of each document and the run's seed, so two runs
with the same seed and fraction hold out the same documents of a corpus); texts reserved for evaluation (lee,
parlspeech) are scored whole. Every target is replaced by [MASK]; NSP pairs are balanced. The batches go through
`transformers.BertForPreTraining` and through our model, which must agree (the last column).

    python benchmarks/compare_models.py checkpoints/mini-english runs/mini-english-v3 \\
        --corpora news,wiki,sotu,brown,moby-dick,lee,parlspeech [--batches 50]
"""
from __future__ import annotations

import argparse

import _common  # noqa: F401  (puts the repository root on sys.path)

from bert_demo.training.evaluate import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--corpora", default="news,wiki,sotu,brown,moby-dick,lee,parlspeech")
    parser.add_argument("--batches", type=int, default=50, help="at most this many batches of 32 per text")
    args = parser.parse_args()
    header = "| text | " + " | ".join(f"{f}: MLM | NSP" for f in args.folders) + " | ours = transformers |"
    print(header)
    print("|" + "---|" * (2 + 2 * len(args.folders)))
    for corpus in args.corpora.split(","):
        cells, same = [], True
        for folder in args.folders:
            result = evaluate(folder, corpus, max_batches=args.batches, reference=True)
            theirs, ours = result["transformers"], result["ours"]
            same &= all(abs(ours[k] - theirs[k]) < 1e-4 for k in ("mlm_acc", "nsp_acc"))
            cells += [f"{theirs['mlm_acc']:.3f}", f"{theirs['nsp_acc']:.3f}"]
        print(f"| {corpus} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
