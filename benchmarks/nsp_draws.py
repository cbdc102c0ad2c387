"""Does a model's next-sentence head tell a continuation from a stranger, or one kind of text from another?

Why (issue 57): in a mix of very different sources (corpus v4: prose, chat, booking dialogue, news), a random B drawn
from any other document (the paper's draw) is often told by its style alone. This script scores checkpoints on the
documents their runs held out of a mix, twice on the same A segments and true continuations: once with each random
B from any other held-out document, once with it from another held-out document of A's source
(`--random-b same-source`, `pairs.RandomB`). A head that learnt "does B follow A?" scores the two alike;
one that learnt "is B the same kind of text?" falls towards chance on the second. Scored through
`transformers.BertForPreTraining` (every target [MASK]ed, as `compare_models.py` does), beside our model, which must
agree.

    python benchmarks/nsp_draws.py checkpoints/small-english runs/mini-any runs/mini-same --corpus v4 [--batches 20]
"""
from __future__ import annotations

import argparse
import dataclasses

import _common  # noqa: F401  (puts the repository root on sys.path)
import torch
import transformers

from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.data.pairs import PretrainingData, SpecialIds, tokenize_sourced
from bert_demo.training.evaluate import predict_transformers, validate
from bert_demo.training.pretraining import split_corpus
from bert_demo.training.settings import TrainConfig

DRAWS = {"any": "B from any document", "same-source": "B from A's source"}


def scores(folder: str, corpus: str, batches: int) -> dict[str, tuple[float, bool]]:
    """For each draw: NSP accuracy through transformers, and whether ours gave the same (and the same MLM)."""
    model, tokenizer = load_pretrained(folder)
    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    stored = TrainConfig.from_dict(read_metadata(folder).get("train_config", {}))
    _, (val_docs, val_sources) = split_corpus(dataclasses.replace(stored, corpus=corpus))
    held_out = tokenize_sourced(val_docs, val_sources, tokenizer)
    seq_len = min(stored.seq_len, model.config.max_position_embeddings)
    out = {}
    for draw in DRAWS:
        data = PretrainingData(held_out.documents, SpecialIds.from_tokenizer(tokenizer), max_seq_len=seq_len,
                               max_predictions=round(seq_len * 0.15) + 1, replace_mask=1.0, replace_random=0.0,
                               sources=held_out.sources if draw == "same-source" else None)
        fixed = data.fixed_batches(batches, seed=0)
        ref = validate(theirs, fixed, torch.device("cpu"), predict_transformers)
        ours = validate(model, fixed, torch.device("cpu"))
        same = all(abs(ours[k] - ref[k]) < 1e-4 for k in ("mlm_acc", "nsp_acc"))
        out[draw] = (ref["nsp_acc"], same)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--corpus", default="v4", help="the mix whose held-out documents are scored")
    parser.add_argument("--batches", type=int, default=20, help="batches of 32 pairs for each draw")
    args = parser.parse_args()
    print(f"| model | NSP, {DRAWS['any']} | NSP, {DRAWS['same-source']} | ours = transformers |")
    print("|---|---|---|---|")
    for folder in args.folders:
        result = scores(folder, args.corpus, args.batches)
        same = all(agree for _, agree in result.values())
        print(f"| {folder} | {result['any'][0]:.3f} | {result['same-source'][0]:.3f} | {'yes' if same else 'NO'} |",
              flush=True)


if __name__ == "__main__":
    main()
