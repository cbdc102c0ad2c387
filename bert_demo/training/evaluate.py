"""Held-out metrics: masked-LM loss, accuracy and perplexity, and NSP accuracy, through our model or `transformers`;
and the readout a run shows while it trains (held-out sentences' guesses, the frequency baseline).

`validate` scores fixed batches during training; `evaluate` scores a saved checkpoint on the documents its run held
out, with every target replaced by [MASK], and can score the same batches through
`transformers.BertForPreTraining.from_pretrained`, which must give the same numbers.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.data.corpus import load_corpus
from bert_demo.data.masking import max_predictions
from bert_demo.data.pairs import (
    PretrainingData,
    SpecialIds,
    split_documents,
    tokenize_documents,
)
from bert_demo.data.sources import SOURCES
from bert_demo.inference import fill_mask
from bert_demo.model import IGNORE_INDEX, BertForPreTraining, in_eval_mode
from bert_demo.training.runtime import Batch, to_device
from bert_demo.training.settings import TrainConfig

Predict = Callable[[torch.nn.Module, Batch], tuple[Tensor, Tensor]]


def predict_ours(model: BertForPreTraining, batch: Batch) -> tuple[Tensor, Tensor]:
    """MLM logits at the labelled positions [N, V] and NSP logits [B, 2] from our model (sparse prediction)."""
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], mlm_labels=batch["mlm_labels"])
    return out.mlm_logits, out.nsp_logits


def predict_transformers(model: torch.nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
    """The same two outputs from a `transformers.BertForPreTraining` (which scores every position)."""
    out = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"])
    return out.prediction_logits[batch["mlm_labels"] != IGNORE_INDEX], out.seq_relationship_logits


@torch.no_grad()
def validate(model: torch.nn.Module, batches: list[Batch], device: torch.device, predict: Predict = predict_ours
             ) -> dict[str, float]:
    """Masked-LM loss/accuracy/perplexity (per target token) and NSP loss/accuracy (per pair) on fixed batches.

    Always in fp32, whatever precision the run trains in: an argmax over bf16 logits would tie and round, and the
    metrics of a GPU run and a CPU run would not compare."""
    model = in_eval_mode(model)
    sums: dict[str, float] = defaultdict(float)
    for batch in batches:
        batch = to_device(batch, device)
        mlm_logits, nsp_logits = predict(model, batch)
        targets = batch["mlm_labels"][batch["mlm_labels"] != IGNORE_INDEX]
        sums["mlm_loss"] += F.cross_entropy(mlm_logits.float(), targets, reduction="sum").item()
        sums["mlm_correct"] += (mlm_logits.argmax(-1) == targets).sum().item()
        sums["targets"] += targets.numel()
        sums["nsp_loss"] += F.cross_entropy(nsp_logits.float(), batch["nsp_labels"], reduction="sum").item()
        sums["nsp_correct"] += (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum().item()
        sums["pairs"] += batch["nsp_labels"].numel()
    mlm_loss = sums["mlm_loss"] / max(sums["targets"], 1)
    return {"mlm_loss": mlm_loss, "mlm_acc": sums["mlm_correct"] / max(sums["targets"], 1),
            "mlm_ppl": math.exp(min(mlm_loss, 50.0)), "nsp_loss": sums["nsp_loss"] / max(sums["pairs"], 1),
            "nsp_acc": sums["nsp_correct"] / max(sums["pairs"], 1), "targets": int(sums["targets"]),
            "pairs": int(sums["pairs"])}


def evaluate(folder: str | Path, corpus: str, max_batches: int = 200, batch_size: int = 32, seed: int = 0,
             reference: bool = False) -> dict[str, dict[str, float]]:
    """Held-out metrics of a checkpoint: the documents its run held out of `corpus`, 15% of tokens all [MASK]ed.

    A corpus reserved for outside evaluation ("lee") was never trained on, so all of it is scored: the
    out-of-domain test. NSP pairs are balanced, negatives from other held-out documents. With reference=True the
    same batches also go through `transformers.BertForPreTraining.from_pretrained(folder)`, which must give the
    same numbers.
    """
    if isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1:
        raise ValueError(f"the number of batches must be a positive whole number, got {max_batches!r}")
    model, tokenizer = load_pretrained(folder)
    train_config = TrainConfig.from_dict(read_metadata(folder).get("train_config", {}))
    if corpus in SOURCES and not SOURCES[corpus].training:
        val_docs = load_corpus(corpus, reserved_ok=True)
    else:
        _, val_docs = split_documents(load_corpus(corpus), train_config.val_fraction, train_config.seed)
    seq_len = min(train_config.seq_len, model.config.max_position_embeddings)
    data = PretrainingData(tokenize_documents(val_docs, tokenizer), SpecialIds.from_tokenizer(tokenizer),
                           max_seq_len=seq_len, batch_size=batch_size, max_predictions=max_predictions(seq_len),
                           replace_mask=1.0, replace_random=0.0)
    batches = data.fixed_batches(max_batches, seed=seed)
    results = {"ours": validate(model, batches, torch.device("cpu"))}
    if reference:
        import transformers

        theirs = transformers.BertForPreTraining.from_pretrained(str(folder)).eval()
        results["transformers"] = validate(theirs, batches, torch.device("cpu"), predict_transformers)
    return results


# ----------------------------------------------------------------------------------------------------------------
# the readout a visitor watches while a run trains: a few held-out sentences, and the frequency baseline

READOUT_SENTENCES = 3
_READOUT_WORDS = (6, 18)  # short enough to read at a glance, long enough to give context


def frequency_baseline(counts: Tensor, val_batches: list[Batch], special_ids: list[int]) -> tuple[int, float]:
    """The most frequent token of the training text (`counts`: `pairs.token_counts`; special tokens
    aside), and the validation accuracy of always guessing it: what a model on BERT's early plateau scores, and what
    real learning must beat."""
    ordinary = counts.clone()
    ordinary[special_ids] = -1
    top = int(ordinary.argmax())
    labels = torch.cat([batch["mlm_labels"][batch["mlm_labels"] != IGNORE_INDEX] for batch in val_batches])
    return top, float((labels == top).float().mean()) if len(labels) else 0.0


def readout_items(val_docs: list[list[str]], tokenizer, n: int = READOUT_SENTENCES) -> list[tuple[str, str]]:
    """(sentence with one [MASK], the hidden word) for the first held-out sentence of a readable length in each of
    the first `n` held-out documents: its longest word that the vocabulary holds whole is hidden (a content word,
    not "the")."""
    items = []
    for document in val_docs:  # one sentence per document: different topics
        for sentence in document:
            words = sentence.split()
            whole = [w for w in words if w.isalpha() and len(w) >= 4 and len(tokenizer.tokenize(w)) == 1]
            if _READOUT_WORDS[0] <= len(words) <= _READOUT_WORDS[1] and whole:
                answer = max(whole, key=len)
                items.append((sentence.replace(answer, tokenizer.mask_token, 1), answer.lower()))
                break
        if len(items) == n:
            break
    return items


def readout(model: torch.nn.Module, tokenizer, items: list[tuple[str, str]], top_k: int = 3) -> list[dict]:
    """The model's top guesses for each readout sentence, and whether the first one is the hidden word."""
    results = []
    for text, answer in items:
        guesses = fill_mask(model, tokenizer, text, top_k=top_k)[0]
        results.append({"text": text, "answer": answer, "guesses": guesses, "right": guesses[0][0] == answer})
    return results
