"""Pre-training: BERT's masked-LM + next-sentence objective (Devlin et al. 2019, §3.1 and Appendix A.2).

`pretraining(config)` is a `loop.Run` whose `prepare` is this module's: the loop, stopping, saving and snapshots are
shared with fine-tuning, and this module holds what pre-training adds. A corpus is made into sentence pairs with a
trained WordPiece vocabulary, the model starts with the recipe's initial values (or continues from a checkpoint, or
resumes with its AdamW state), the loss is the two objectives', and a validation shows held-out metrics, a probe
sentence's guesses and a few held-out sentences.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.checkpoint import load_pretrained
from bert_demo.config import PRESETS
from bert_demo.data.corpus import document_sources, is_named, load_corpus, source_parts, word_count
from bert_demo.data.masking import MASK_PROB, Fate, fate_shares, max_predictions
from bert_demo.data.pairs import (
    PretrainingData,
    SpecialIds,
    Tokenized,
    held_out,
    partition,
    token_counts,
    tokenize_sourced,
)
from bert_demo.data.token_cache import cached_ids, cached_vocabulary
from bert_demo.inference import fill_mask
from bert_demo.model import IGNORE_INDEX, BertForPreTraining
from bert_demo.tokenizer import load_tokenizer, tokenizer_from_vocab, train_tokenizer, vocabulary
from bert_demo.training.evaluate import frequency_baseline, readout, readout_items, validate
from bert_demo.training.loop import Control, Run, Training
from bert_demo.training.step import Metrics
from bert_demo.training.recipe import initialise, optimizer_and_schedule, set_dropout, unigram_log_probs
from bert_demo.training.records import ProbeRecord, ReadoutRecord, Record
from bert_demo.training.runtime import Batch, data_workers
from bert_demo.training.settings import RANDOM_B, VAL_BATCH_SIZE, TrainConfig

Baseline = tuple[int, float]  # the most frequent training token, and its accuracy on the validation targets
Split = tuple[list[list[str]], list[int]]  # documents of sentences, and each one's source (`corpus.document_sources`)


def pretraining(config: TrainConfig, resume: str | Path | None = None, origin: str = "cli",
                visible_to: str | None = None, control: Control | None = None) -> Run:
    """A pre-training run: masked-LM and next-sentence prediction over a corpus's sentence pairs (see `loop.Run`
    for the other arguments; `resume` names a folder this kind of run saved)."""
    return Run(config, prepare, resume, origin, visible_to, control)


def prepare(run: Run) -> Generator[Record, None, Training | None]:
    """The run's task, one status record per phase; None if a stop was asked for: it takes effect at the next
    phase, not after the whole preparation."""
    cfg = run.config
    yield {"kind": "status", "message": f"loading corpus {cfg.corpus!r}"}
    if run.stopping_now():
        return None
    (train_docs, train_sources), (val_docs, val_sources) = split_corpus(cfg)
    run.training_words = word_count(train_docs)  # what the model reads, kept in its record (`Saving`)
    yield {"kind": "status", "message": "preparing the tokenizer"}
    if run.stopping_now():
        return None
    run.tokenizer = _tokenizer(run, train_docs)
    yield {"kind": "status", "message": f"building pre-training examples from {len(train_docs):,} documents "
                                        f"({run.training_words:,} words)", "training_words": run.training_words}
    if run.stopping_now():
        return None
    special = SpecialIds.from_tokenizer(run.tokenizer)
    train_ids = _ids(cfg, run.tokenizer, train_docs, train_sources, "train")
    val_ids = _ids(cfg, run.tokenizer, val_docs, val_sources, "validation")
    val_batches = sentence_pairs(cfg, val_ids, special, 0, VAL_BATCH_SIZE).fixed_batches(cfg.eval_batches, seed=0)
    other_draw = replace(cfg, random_b=next(draw for draw in RANDOM_B if draw != cfg.random_b))
    other_batches = sentence_pairs(other_draw, val_ids, special, 0, VAL_BATCH_SIZE).fixed_batches(
        cfg.eval_batches, seed=0)  # the other random B, to show what each draw lets NSP learn (ALBERT's finding)
    counts = token_counts(train_ids.documents, len(run.tokenizer))
    baseline = frequency_baseline(counts, val_batches, run.tokenizer.all_special_ids)
    items = readout_items(val_docs, run.tokenizer)
    run.model = _model(run, counts)
    optimizer, schedule = optimizer_and_schedule(run.model, cfg, lambda: run.total_steps, run.step, run.resume)
    processes = f" in {run.dist.world_size} processes" if run.dist.world_size > 1 else ""
    yield {"kind": "status", "message": f"training on {run.device.type} in {run.precision}{processes} with "
                                        f"{run.model.num_parameters():,} parameters"}
    if run.dist.is_main:
        yield _probe(run)  # the probe's guesses before the first step: what a model knows when it knows nothing
    guesses = functools.partial(_guesses, run, items, baseline)
    return Training(model=run.model, batches=_batches(run, train_ids, special), optimizer=optimizer,
                    schedule=schedule, loss=functools.partial(micro_batch_loss, cfg),
                    evaluate=functools.partial(_evaluate, run, val_batches, other_batches, baseline, guesses),
                    guesses=guesses,
                    forward_extras=_forward_extras)


def split_corpus(cfg: TrainConfig) -> tuple[Split, Split]:
    """The run's training and validation documents (`held_out`), each beside its source (`document_sources`)."""
    documents, sources = load_corpus(cfg.corpus), document_sources(cfg.corpus)
    held = held_out(documents, cfg.val_fraction, cfg.seed)
    (train_docs, val_docs), (train_sources, val_sources) = partition(documents, held), partition(sources, held)
    return (train_docs, train_sources), (val_docs, val_sources)


def _tokenizer(run: Run, train_docs: list[list[str]]) -> BertTokenizerFast:
    """The resumed or continued run's tokenizer, or one trained on the training documents (kept in the cache for a
    named corpus), the same on every rank."""
    cfg = run.config
    if run.resume:
        return load_tokenizer(run.resume)
    if cfg.tokenizer or cfg.init_from or run.dist.world_size == 1:
        return run_tokenizer(cfg, train_docs)
    return _broadcast_vocabulary(run, corpus_tokenizer(cfg, train_docs) if run.dist.is_main else None)


def run_tokenizer(cfg: TrainConfig, train_docs: list[list[str]]) -> BertTokenizerFast:
    """The tokenizer a new run trains with: the one of the checkpoint it starts from (or names), else one trained on
    its training documents (`corpus_tokenizer`)."""
    given = cfg.tokenizer or cfg.init_from
    return load_tokenizer(given) if given else corpus_tokenizer(cfg, train_docs)


def corpus_tokenizer(cfg: TrainConfig, train_docs: list[list[str]]) -> BertTokenizerFast:
    """A WordPiece vocabulary of the run's size trained on its training documents; for a named corpus, kept in the
    cache (`data.token_cache`) and read back from there, by this run and any later one on the same corpus and split."""

    def make() -> BertTokenizerFast:
        # min_frequency=1: on a small corpus words seen once still get whole-word entries; on a large one the
        # vocabulary size, not the frequency floor, decides what is kept
        return train_tokenizer(train_docs, vocab_size=cfg.vocab_size, min_frequency=1)

    key = vocabulary_key(cfg)
    return make() if key is None else cached_vocabulary(key, make)


def vocabulary_key(cfg: TrainConfig) -> str | None:
    """What the run's vocabulary is kept under in the cache (`data.token_cache`); None for a visitor's file."""
    key = _kept_as(cfg, "train")
    return None if key is None else f"{key}|{cfg.vocab_size}"


def _broadcast_vocabulary(run: Run, tokenizer: BertTokenizerFast | None) -> BertTokenizerFast:
    """Rank 0's trained vocabulary, sent to every rank as UTF-8 bytes (training it again could differ)."""
    data = "\n".join(vocabulary(tokenizer)).encode() if tokenizer else b""
    size = torch.tensor([len(data)], device=run.device)
    dist.broadcast(size, src=0)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=run.device)
    if tokenizer:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    dist.broadcast(buffer, src=0)
    return tokenizer or tokenizer_from_vocab(bytes(buffer.cpu().tolist()).decode().split("\n"))


def _ids(cfg: TrainConfig, tokenizer: BertTokenizerFast, documents: list[list[str]], sources: list[int], split: str
         ) -> Tokenized:
    """A split's documents as token ids, with their sources: read back from the cache for a named corpus
    (`data.token_cache`)."""
    key = _kept_as(cfg, split)
    make = functools.partial(tokenize_sourced, documents, sources, tokenizer)
    return make() if key is None else cached_ids(key, tokenizer, make)


def prepare_data(cfg: TrainConfig) -> None:
    """Make what a run on a named corpus reads before its first step, and keep it in the cache: its vocabulary and
    its two splits as token ids. A ZeroGPU run has this done on the app's CPU, so that its GPU call spends none of
    its time on it (app/runs/zerogpu.py)."""
    (train_docs, train_sources), (val_docs, val_sources) = split_corpus(cfg)
    tokenizer = run_tokenizer(cfg, train_docs)
    _ids(cfg, tokenizer, train_docs, train_sources, "train")
    _ids(cfg, tokenizer, val_docs, val_sources, "validation")


def _kept_as(cfg: TrainConfig, split: str) -> str | None:
    """What a split of the run's corpus is kept under in the cache; None for a visitor's file (never kept)."""
    if not is_named(cfg.corpus):
        return None
    return f"{','.join(source_parts(cfg.corpus))}|{split}|{cfg.val_fraction}|{cfg.seed}"  # a mix by what it holds


def sentence_pairs(cfg: TrainConfig, tokenized: Tokenized, special: SpecialIds, seed: int, batch_size: int,
                   rank: int = 0, world: int = 1, seq_len: int | None = None, first_step: int | None = None
                   ) -> PretrainingData:
    """The run's sentence pairs, their random B drawn as `cfg.random_b` says (validation's too, so that it measures
    what training asks): the stream training batches come from (from `first_step` on, masked as the recipe says),
    and the example `pretraining_example` shows; without `first_step`, validation's, masked as the paper says."""
    seq_len = seq_len or cfg.seq_len
    sources = tokenized.sources if cfg.random_b == "same-source" else None
    training, fates = first_step is not None, fate_shares(cfg.mask_replace)
    masking = {"mask_prob": cfg.mask_prob, "span": cfg.mask_span, "first_rate": cfg.mask_prob_start,
               "steps": cfg.steps, "first_step": first_step, "replace_mask": fates[Fate.MASK],
               "replace_random": fates[Fate.RANDOM]} if training else {}
    most_rate = max(cfg.mask_prob, cfg.mask_prob_start or 0.0) if training else MASK_PROB
    return PretrainingData(tokenized.documents, special, max_seq_len=seq_len, batch_size=batch_size,
                           max_predictions=cfg.max_predictions or max_predictions(seq_len, most_rate), seed=seed,
                           rank=rank, world_size=world, sources=sources, **masking)


def _batches(run: Run, train_ids: Tokenized, special: SpecialIds) -> Iterator[Batch]:
    """Training batches for ever, this rank's share, built ahead of the step by the run's data workers; with a
    length curriculum, short examples first (their workers end when the curriculum does)."""
    cfg, rank, world = run.config, run.dist.rank, run.dist.world_size
    seed = cfg.seed + run.step  # a resumed run draws new batches, not the ones it already saw
    workers = data_workers(cfg.data_workers, run.device, world)
    pin = run.device.type == "cuda"
    if run.step < cfg.short_seq_steps:
        short = sentence_pairs(cfg, train_ids, special, seed, cfg.batch_size, rank, world, cfg.short_seq_len,
                               first_step=run.step)
        yield from itertools.islice(short.batches(workers, pin), cfg.short_seq_steps - run.step)
    first_step = max(run.step, cfg.short_seq_steps)
    yield from sentence_pairs(cfg, train_ids, special, seed, cfg.batch_size, rank, world,
                              first_step=first_step).batches(workers, pin)


def _model(run: Run, counts: Tensor) -> BertForPreTraining:
    """The model in training mode on the run's device: resumed, continued from a checkpoint, or new with the
    recipe's initial values."""
    cfg = run.config
    if run.resume or cfg.init_from:  # continued: the checkpoint's weights with a fresh optimizer and schedule
        model, _ = load_pretrained(run.resume or cfg.init_from, device=run.device)
    else:
        model = BertForPreTraining(PRESETS[cfg.preset].with_vocab(len(run.tokenizer)))
        bias = unigram_log_probs(counts) if cfg.unigram_bias else None
        initialise(model, cfg.qk_scale, cfg.mimetic, cfg.sinusoid_positions, cfg.position_scale, cfg.local_heads,
                   output_bias=bias, global_cls=cfg.global_cls)
        model.to(run.device)
    if cfg.dropout is not None:  # the recipe's rate, whatever the preset or the continued checkpoint had
        set_dropout(model, cfg.dropout)
    return model.train()


def _forward_extras(part: Batch) -> dict[str, int]:
    """What the model is told about a micro-batch from its CPU copy: how many masked-LM targets it has."""
    return {"mlm_count": int((part["mlm_labels"] != IGNORE_INDEX).sum())}


def micro_batch_loss(cfg: TrainConfig, out, part: Batch, batch: Batch) -> tuple[Tensor, Metrics]:
    """A micro-batch's share of the two objectives, and its metrics. The masked-LM loss is weighted by the
    micro-batch's share of the batch's targets, so that the sum over micro-batches is the whole batch's loss.
    The batch's targets are counted on its CPU copy, and the micro-batch's are the ones the model scored (their
    number is known to the host): no step waits on the GPU for them, and none copies from unpinned memory."""
    share = out.mlm_targets.numel() / (batch["mlm_labels"] != IGNORE_INDEX).sum().clamp(min=1)  # a CPU scalar
    targets, nsp_labels = out.mlm_targets, part["nsp_labels"].to(out.nsp_logits.device, non_blocking=True)
    metrics = {"mlm_loss": (out.mlm_loss.detach(), 1), "nsp_loss": (out.nsp_loss.detach(), 1),
               "mlm_acc": ((out.mlm_logits.detach().argmax(-1) == targets).sum(), targets.numel()),
               "nsp_acc": ((out.nsp_logits.detach().argmax(-1) == nsp_labels).sum(), nsp_labels.numel())}
    return out.mlm_loss * share + cfg.nsp_weight * out.nsp_loss / cfg.grad_accum, metrics


def _evaluate(run: Run, val_batches: list[Batch], other_batches: list[Batch], baseline: Baseline,
              guesses) -> Iterator[Record]:
    """Held-out MLM and NSP metrics beside the frequent-token baseline, and NSP's accuracy under each random B (the
    run's, and the other: `other_batches`, the same documents); then the probe's and the readout's guesses."""
    metrics = validate(run.model, val_batches, run.device)
    draws = {run.config.random_b: metrics["nsp_acc"]}
    draws.update({draw: validate(run.model, other_batches, run.device)["nsp_acc"]
                  for draw in RANDOM_B if draw not in draws})
    yield {"kind": "val", **metrics, "mlm_baseline_acc": baseline[1], "nsp_acc_any": draws["any"],
           "nsp_acc_same": draws["same-source"]}
    yield from guesses()


def _guesses(run: Run, items: list, baseline: Baseline) -> Iterator[Record]:
    """What the weights guess now: the probe sentence's words and a few held-out sentences' (a run stopped between
    two validations shows these too)."""
    yield _probe(run)
    yield _readout(run, items, baseline)


def _probe(run: Run) -> ProbeRecord:
    """The current model's guesses for a fixed sentence, so one can watch it learn."""
    probe = run.config.probe
    try:
        guesses = fill_mask(run.model, run.tokenizer, probe, top_k=5)[0]
    except ValueError as exc:
        return {"kind": "probe", "step": run.step, "text": probe, "error": str(exc)}
    return {"kind": "probe", "step": run.step, "text": probe, "predictions": guesses}


def _readout(run: Run, items: list, baseline: Baseline) -> ReadoutRecord:
    """The guesses for a few fixed held-out sentences (kept out of the history: the app shows the latest)."""
    return {"kind": "readout", "step": run.step, "items": readout(run.model, run.tokenizer, items),
            "baseline_token": run.tokenizer.convert_ids_to_tokens(baseline[0]), "baseline_acc": baseline[1]}
