"""Pre-training: BERT's masked-LM + next-sentence objective (Devlin et al. 2019, §3.1 and Appendix A.2).

`Trainer` is a `loop.Run`: the loop, stopping, saving and snapshots are shared with fine-tuning; this module holds
what pre-training adds: a corpus made into sentence pairs with a trained WordPiece vocabulary, the model started
with the recipe's initial values (or continued from a checkpoint, or resumed with its AdamW state), the two
objectives, and what a validation shows (held-out metrics, a probe sentence's guesses, a few held-out sentences).
"""
from __future__ import annotations

import functools
import itertools
import time
from collections import defaultdict
from collections.abc import Generator, Iterator
from contextlib import nullcontext

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo.checkpoint import load_optimizer_tensors, load_pretrained
from bert_demo.config import PRESETS
from bert_demo.corpus import is_named, load_corpus
from bert_demo.evaluate import frequency_baseline, readout, readout_items, validate
from bert_demo.inference import fill_mask
from bert_demo.loop import OPTIMIZER_NAME, Run, split_batch
from bert_demo.model import IGNORE_INDEX, BertForPreTraining
from bert_demo.prepared import cached_ids, cached_vocabulary
from bert_demo.pretraining_data import (
    PretrainingData,
    SpecialIds,
    split_documents,
    token_counts,
    tokenize_documents,
)
from bert_demo.recipe import initialise, lr_multiplier, make_optimizer, set_dropout, unigram_log_probs
from bert_demo.records import ProbeRecord, ReadoutRecord, Record
from bert_demo.runtime import Batch, autocast, to_device
from bert_demo.tokenizer import (
    load_tokenizer,
    tokenizer_from_vocab,
    train_tokenizer,
    vocabulary,
)


class Trainer(Run):
    """One pre-training run (see `loop.Run`): masked-LM and next-sentence prediction over a corpus's sentence pairs,
    with a probe sentence's guesses and a few held-out sentences' read at every validation."""

    def _prepare(self) -> Generator[Record, None, tuple | None]:
        """Batches, validation batches, optimizer and schedule, one status record per phase; None if a stop was
        asked for: it takes effect at the next phase, not after the whole preparation."""
        cfg = self.config
        yield {"kind": "status", "message": f"loading corpus {cfg.corpus!r}"}
        if self._stopping():
            return None
        train_docs, val_docs = split_documents(load_corpus(cfg.corpus), cfg.val_fraction, cfg.seed)
        yield {"kind": "status", "message": "preparing the tokenizer"}
        if self._stopping():
            return None
        self.tokenizer = self._tokenizer(train_docs)
        yield {"kind": "status", "message": f"building pre-training examples from {len(train_docs):,} documents"}
        if self._stopping():
            return None
        special = SpecialIds.from_tokenizer(self.tokenizer)
        seed = cfg.seed + self.step  # a resumed run draws new batches, not the ones it already saw
        train_ids = self._ids(train_docs, "train")
        train_data = self._data(train_ids, special, seed, cfg.batch_size, self.dist.rank, self.dist.world_size,
                                mask_prob=cfg.mask_prob)
        batches = train_data.batches()
        if self.step < cfg.short_seq_steps:  # a length curriculum: short examples first, then full-length ones
            short = self._data(train_ids, special, seed, cfg.batch_size, self.dist.rank, self.dist.world_size,
                               mask_prob=cfg.mask_prob, seq_len=cfg.short_seq_len)
            batches = itertools.chain(itertools.islice(short.batches(), cfg.short_seq_steps - self.step), batches)
        self._val_batches = self._data(self._ids(val_docs, "validation"), special, 0, 32).fixed_batches(
            cfg.eval_batches, seed=0)
        counts = token_counts(train_ids, len(self.tokenizer))
        self._baseline = frequency_baseline(counts, self._val_batches, self.tokenizer.all_special_ids)
        self._readout_items = readout_items(val_docs, self.tokenizer)
        optimizer, schedule = self._model_and_optimizer(counts)
        yield {"kind": "status", "message": f"training on {self.device.type} in {self.precision} "
                                            f"({self.dist.world_size} process(es)) with "
                                            f"{self.model.num_parameters():,} parameters"}
        return batches, optimizer, schedule

    def _tokenizer(self, train_docs: list[list[str]]) -> BertTokenizerFast:
        if self.resume:
            return load_tokenizer(self.resume)
        if self.config.tokenizer or self.config.init_from:
            return load_tokenizer(self.config.tokenizer or self.config.init_from)
        if not self.dist.is_main:
            return self._broadcast_vocabulary(None)
        # min_frequency=1: on a small corpus words seen once still get whole-word entries; on a large one the
        # vocabulary size, not the frequency floor, decides what is kept
        def make() -> BertTokenizerFast:
            return train_tokenizer(train_docs, vocab_size=self.config.vocab_size, min_frequency=1)

        key = self._kept_as("train")
        tokenizer = make() if key is None else cached_vocabulary(f"{key}|{self.config.vocab_size}", make)
        return self._broadcast_vocabulary(tokenizer) if self.dist.world_size > 1 else tokenizer

    def _ids(self, documents: list[list[str]], split: str) -> list:
        """A split's documents as token ids: read back from the cache for a named corpus (`prepared`)."""
        key = self._kept_as(split)
        make = functools.partial(tokenize_documents, documents, self.tokenizer)
        return make() if key is None else cached_ids(key, self.tokenizer, make)

    def _kept_as(self, split: str) -> str | None:
        """What a split of this run's corpus is kept under in the cache; None for a visitor's file (never kept)."""
        cfg = self.config
        return f"{cfg.corpus}|{split}|{cfg.val_fraction}|{cfg.seed}" if is_named(cfg.corpus) else None

    def _broadcast_vocabulary(self, tokenizer: BertTokenizerFast | None) -> BertTokenizerFast:
        """Rank 0's trained vocabulary, sent to every rank as UTF-8 bytes (training it again could differ)."""
        data = "\n".join(vocabulary(tokenizer)).encode() if tokenizer else b""
        size = torch.tensor([len(data)], device=self.device)
        dist.broadcast(size, src=0)
        buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=self.device)
        if tokenizer:
            buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        dist.broadcast(buffer, src=0)
        return tokenizer or tokenizer_from_vocab(bytes(buffer.cpu().tolist()).decode().split("\n"))

    def _data(self, documents, special: SpecialIds, seed: int, batch_size: int, rank: int = 0, world: int = 1,
              mask_prob: float = 0.15, seq_len: int | None = None) -> PretrainingData:
        cfg = self.config
        seq_len = seq_len or cfg.seq_len
        max_predictions = cfg.max_predictions or round(seq_len * mask_prob) + 1
        return PretrainingData(documents, special, max_seq_len=seq_len, batch_size=batch_size,
                               max_predictions=max_predictions, seed=seed, rank=rank, world_size=world,
                               mask_prob=mask_prob)

    def _model_and_optimizer(self, counts: torch.Tensor):
        """The model (resumed, or new with the recipe's initial values), AdamW and the schedule."""
        cfg = self.config
        if self.resume:
            self.model, _ = load_pretrained(self.resume, device=self.device)
        elif cfg.init_from:  # continued pre-training: the checkpoint's weights, a fresh optimizer and schedule
            self.model, _ = load_pretrained(cfg.init_from, device=self.device)
        else:
            self.model = BertForPreTraining(PRESETS[cfg.preset].with_vocab(len(self.tokenizer)))
            bias = unigram_log_probs(counts) if cfg.unigram_bias else None
            initialise(self.model, cfg.qk_scale, cfg.mimetic, cfg.sinusoid_positions, cfg.position_scale,
                       cfg.local_heads, output_bias=bias, global_cls=cfg.global_cls)
            self.model.to(self.device)
        if cfg.dropout is not None:  # the recipe's rate, whatever the preset or the continued checkpoint had
            set_dropout(self.model, cfg.dropout)
        self.model.train()
        optimizer = make_optimizer(self.model, cfg)
        if self.resume and (self.resume / OPTIMIZER_NAME).is_file():
            load_optimizer_tensors(optimizer, load_file(str(self.resume / OPTIMIZER_NAME), device=str(self.device)))
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else cfg.steps // 10
        done = self.step  # a resumed run picks the schedule up where it stopped
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                     lambda s: lr_multiplier(s + done, warmup, cfg.steps, cfg.schedule))
        return optimizer, schedule

    def _accumulate(self, forward, batch: Batch, window: "Window"):
        """Forward and backward passes over the batch's micro-batches (gradient accumulation); the last output.

        Only the forward pass runs under autocast, as PyTorch advises; backward runs outside it, inside DDP's
        `no_sync` for every micro-batch but the last. Targets and token counts are read from the batch while it
        is still on the CPU, so that no step waits on the GPU for them."""
        cfg = self.config
        n_targets = int((batch["mlm_labels"] != IGNORE_INDEX).sum())
        for micro, part in enumerate(split_batch(batch, cfg.grad_accum)):
            labels = part["mlm_labels"]
            targets, tokens = labels[labels != IGNORE_INDEX], int(part["attention_mask"].sum())
            part = to_device(part, self.device)
            last = micro == cfg.grad_accum - 1
            with nullcontext() if last or self.dist.world_size == 1 else forward.no_sync():
                with autocast(self.device, self.precision):
                    out = forward(**part)
                # weight by targets, so that the sum over micro-batches equals the whole batch's loss
                share = targets.numel() / max(n_targets, 1)
                (out.mlm_loss * share + cfg.nsp_weight * out.nsp_loss / cfg.grad_accum).backward()
            window.add(out, part["nsp_labels"], targets.to(self.device, non_blocking=True), tokens)
        return out

    def _window(self) -> "Window":
        return Window()

    def _evaluate(self, tokens: int, started: float) -> Iterator[Record]:
        """Held-out MLM and NSP metrics beside the frequent-token baseline, the probe's guesses, the readout."""
        metrics = {**validate(self.model, self._val_batches, self.device), "mlm_baseline_acc": self._baseline[1]}
        yield self._log(metrics, tokens, started, kind="val")
        yield self._probe()
        yield self._readout()

    def _look(self) -> Iterator[Record]:
        yield self._probe()
        yield self._readout()

    def _probe(self) -> ProbeRecord:
        """The current model's guesses for a fixed sentence, so one can watch it learn."""
        try:
            guesses = fill_mask(self.model, self.tokenizer, self.config.probe, top_k=5)[0]
        except ValueError as exc:
            return {"kind": "probe", "step": self.step, "text": self.config.probe, "error": str(exc)}
        return {"kind": "probe", "step": self.step, "text": self.config.probe, "predictions": guesses}

    def _readout(self) -> ReadoutRecord:
        """The guesses for a few fixed held-out sentences (kept out of the history: the app shows the latest)."""
        return {"kind": "readout", "step": self.step, "items": readout(self.model, self.tokenizer, self._readout_items),
                "baseline_token": self.tokenizer.convert_ids_to_tokens(self._baseline[0]),
                "baseline_acc": self._baseline[1]}

class Window:
    """Running sums of the training metrics between two log records. They stay tensors on the device and are read
    (one synchronisation) when a record is written, not at every micro-step."""

    def __init__(self):
        self.sums: dict[str, Tensor | float] = defaultdict(float)
        self.started = time.perf_counter()

    def add(self, out, nsp_labels: Tensor, targets: Tensor, tokens: int) -> None:
        """One micro-batch: `targets` are the labels of its masked tokens, in the order of `out.mlm_logits`'s rows;
        `tokens` counts its real (not padding) tokens."""
        s = self.sums
        s["micro_steps"] += 1
        s["mlm_loss"] += out.mlm_loss.detach()
        s["nsp_loss"] += out.nsp_loss.detach()
        s["mlm_correct"] += (out.mlm_logits.detach().argmax(-1) == targets).sum()
        s["mlm_targets"] += targets.numel()
        s["nsp_correct"] += (out.nsp_logits.detach().argmax(-1) == nsp_labels).sum()
        s["pairs"] += nsp_labels.numel()
        s["tokens"] += tokens

    def flush(self, world_size: int = 1) -> dict[str, float]:
        """Averages since the last flush; tokens/s counts every process (they all run at the same pace)."""
        s = {key: float(value) for key, value in self.sums.items()}
        seconds = time.perf_counter() - self.started
        metrics = {"mlm_loss": s["mlm_loss"] / s["micro_steps"], "nsp_loss": s["nsp_loss"] / s["micro_steps"],
                   "mlm_acc": s["mlm_correct"] / max(s["mlm_targets"], 1), "nsp_acc": s["nsp_correct"] / s["pairs"],
                   "tokens_per_s": s["tokens"] * world_size / max(seconds, 1e-9)}
        self.__init__()
        return metrics
