"""Pre-training: BERT's masked-LM + next-sentence objective (Devlin et al. 2019, §3.1 and Appendix A.2).

`Trainer.run()` is a generator of plain-dict records (progress, validation, probe predictions, the end of the run)
that the app and the CLI both consume. A run can be stopped from another thread at any step; stopping, finishing or
diverging all leave a Hugging Face-format checkpoint with the training config and metrics history beside it, and the
AdamW state (in safetensors, never pickle) so that `resume` continues where it left off.

Under `torchrun --nproc_per_node N` the same code trains with DistributedDataParallel: every rank draws its own
share of the examples, gradients are averaged, and rank 0 alone logs, validates and writes checkpoints.
"""
from __future__ import annotations

import copy
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Iterator
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import Tensor
from transformers import BertTokenizerFast

from bert_demo import timeline
from bert_demo.checkpoint import (
    TIED_KEYS,
    check_writable,
    load_optimizer_tensors,
    load_pretrained,
    optimizer_tensors,
    read_metadata,
    save_pretrained,
)
from bert_demo.config import PRESETS, trained_on
from bert_demo.corpus import load_corpus
from bert_demo.evaluate import frequency_baseline, readout, readout_items, validate
from bert_demo.inference import fill_mask
from bert_demo.model import IGNORE_INDEX, BertForPreTraining
from bert_demo.pretraining_data import (
    PretrainingData,
    SpecialIds,
    split_documents,
    token_counts,
    tokenize_documents,
)
from bert_demo.recipe import initialise, lr_multiplier, make_optimizer, set_dropout, unigram_log_probs
from bert_demo.records import DoneRecord, ProbeRecord, ReadoutRecord, Record
from bert_demo.runtime import (
    Batch,
    Distributed,
    autocast,
    describe_hardware,
    pick_device,
    release_free_memory,
    resolve_precision,
    set_cpu_threads,
    to_device,
    wrap_for_training,
)
from bert_demo.tokenizer import (
    load_tokenizer,
    tokenizer_from_vocab,
    train_tokenizer,
    vocabulary,
)
from bert_demo.train_config import TrainConfig

OPTIMIZER_NAME = "optimizer.safetensors"
TRIM_EVERY = 50  # steps between handing freed heap memory back to the operating system (see release_free_memory)


class Trainer:
    """One pre-training run. Create it, iterate `run()`, and call `stop()` from anywhere to end it early."""

    def __init__(self, config: TrainConfig, resume: str | Path | None = None, origin: str = "cli",
                 visible_to: str | None = None):
        """`origin` is stored with the checkpoint: the app deletes its own old runs ("app"), never others.
        `visible_to`, also stored, makes an app run private to one browser session (one trained on an upload)."""
        config.validate()
        self.origin, self.visible_to = origin, visible_to
        self.config = config
        self.resume = Path(resume) if resume else None
        if self.resume and not (self.resume / "config.json").is_file():
            raise ValueError(f"cannot resume from {self.resume}: it is not a checkpoint folder")
        self.dist = Distributed.from_env()
        if self.dist.is_main:
            check_writable(config.out)
        self.device = pick_device(config.device, self.dist)
        self.precision = resolve_precision(config.precision, self.device)
        self.lock = threading.Lock()  # held while weights change; `snapshot` takes it to copy a consistent model
        self._stop = threading.Event()
        self._made_group = False  # whether run() started the torchrun process group (close() ends it)
        self.after_step: Callable[[], None] | None = None  # called in the training thread after each step
        self.model: BertForPreTraining | None = None
        self.tokenizer: BertTokenizerFast | None = None
        self.metadata = read_metadata(self.resume) if self.resume else {}
        self.history: list[Record] = list(self.metadata.get("history", []))
        self.step = int(self.metadata.get("step", 0))
        self.snapshots: dict[int, timeline.State] = {}  # taken since the last save, written with the next one
        # the output folder's timeline is this run's own when it resumes there, or once this run has saved there;
        # a new run writing over an old folder must not inherit that folder's snapshots
        self._owns_timeline = self.resume is not None and self.resume.resolve() == Path(config.out).resolve()

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called."""
        return self._stop.is_set()

    def snapshot(self) -> BertForPreTraining | None:
        """An eval-mode copy of the current weights, safe to use while training continues."""
        if self.model is None:
            return None
        with self.lock:
            return copy.deepcopy(self.model).eval()

    def run(self) -> Iterator[Record]:
        """Prepare data and model, train, and yield records; the last one has kind "done"."""
        started = time.perf_counter()
        set_cpu_threads()
        torch.manual_seed(self.config.seed)
        if self.dist.world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
            self._made_group = True
        prepared = yield from self._prepare()
        if prepared is None:
            yield self._nothing_written()
            return
        yield from self._train(*prepared, started)

    def close(self) -> None:
        """End the torchrun process group this run made, once its caller is done with it (the CLI, at exit)."""
        if self._made_group and dist.is_initialized():
            dist.destroy_process_group()
            self._made_group = False

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
        train_ids = tokenize_documents(train_docs, self.tokenizer)
        train_data = self._data(train_ids, special, seed, cfg.batch_size, self.dist.rank, self.dist.world_size,
                                mask_prob=cfg.mask_prob)
        batches = train_data.batches()
        if self.step < cfg.short_seq_steps:  # a length curriculum: short examples first, then full-length ones
            short = self._data(train_ids, special, seed, cfg.batch_size, self.dist.rank, self.dist.world_size,
                               mask_prob=cfg.mask_prob, seq_len=cfg.short_seq_len)
            batches = itertools.chain(itertools.islice(short.batches(), cfg.short_seq_steps - self.step), batches)
        val_batches = self._data(tokenize_documents(val_docs, self.tokenizer), special, 0, 32).fixed_batches(
            cfg.eval_batches, seed=0)
        counts = token_counts(train_ids, len(self.tokenizer))
        self._baseline = frequency_baseline(counts, val_batches, self.tokenizer.all_special_ids)
        self._readout_items = readout_items(val_docs, self.tokenizer)
        optimizer, schedule = self._model_and_optimizer(counts)
        yield {"kind": "status", "message": f"training on {self.device.type} in {self.precision} ({self.dist.world_size} process(es)) "
                                            f"with {self.model.num_parameters():,} parameters"}
        return batches, val_batches, optimizer, schedule

    def _nothing_written(self) -> DoneRecord:
        """The last record of a run stopped before its first step: the output folder keeps what it held."""
        return {"kind": "done", "reason": "stopped", "step": self.step, "checkpoint": None,
                "message": f"stopped before the first step: nothing was written to {self.config.out}"}

    def _tokenizer(self, train_docs: list[list[str]]) -> BertTokenizerFast:
        if self.resume:
            return load_tokenizer(self.resume)
        if self.config.tokenizer or self.config.init_from:
            return load_tokenizer(self.config.tokenizer or self.config.init_from)
        if not self.dist.is_main:
            return self._broadcast_vocabulary(None)
        # min_frequency=1: on a small corpus words seen once still get whole-word entries; on a large one the
        # vocabulary size, not the frequency floor, decides what is kept
        tokenizer = train_tokenizer(train_docs, vocab_size=self.config.vocab_size, min_frequency=1)
        return self._broadcast_vocabulary(tokenizer) if self.dist.world_size > 1 else tokenizer

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
                       cfg.local_heads, output_bias=bias)
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

    def _train(self, batches: Iterator[Batch], val_batches: list[Batch], optimizer, schedule, started: float
               ) -> Iterator[Record]:
        cfg, model, main = self.config, self.model, self.dist.is_main
        forward = wrap_for_training(model, self.device, self.dist.world_size, cfg.compile)
        window, first_step = Window(), self.step
        tokens_seen = int(self.history[-1]["tokens"]) if self.history else 0
        taken = timeline.steps(cfg.out) if self._owns_timeline else []  # a resumed run's: never taken twice
        due = set(timeline.snapshot_steps(cfg.steps)) - set(taken)
        if main and self.step in due:
            yield from self._take_snapshot()
        while self.step < cfg.steps and not self._stopping():
            batch = next(batches)
            optimizer.zero_grad(set_to_none=True)
            try:
                out = self._accumulate(forward, batch, window)
            except torch.OutOfMemoryError:
                optimizer.zero_grad(set_to_none=True)  # free this step's gradients before saving
                torch.cuda.empty_cache()
                yield self._finish("out of memory", started, optimizer, f"step {self.step + 1} ran out of memory on "
                                   f"{self.device}: the run stopped and the weights from before that step were saved. "
                                   "Try a smaller batch, sequence length or model.")
                return
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if not torch.isfinite(grad_norm):
                yield self._finish("diverged", started, optimizer, f"the loss became {out.loss.item():.4g} at step "
                                   f"{self.step + 1}: the run stopped and the weights from before that step were "
                                   "saved. Try a lower learning rate.")
                return
            with self.lock:  # the step counts with the weights: a reader of both never sees one without the other
                optimizer.step()
                schedule.step()
                self.step += 1
            if self.after_step is not None:
                self.after_step()
            if main and self.step in due:
                yield from self._take_snapshot()
            if self.step % TRIM_EVERY == 0:
                release_free_memory()
            tokens_seen += int(batch["attention_mask"].sum()) * self.dist.world_size
            if main and (self.step % cfg.log_every == 0 or self.step == cfg.steps):
                yield self._log(window.flush(self.dist.world_size), tokens_seen, started,
                                lr=schedule.get_last_lr()[0])
            if main and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                metrics = {**validate(model, val_batches, self.device), "mlm_baseline_acc": self._baseline[1]}
                yield self._log(metrics, tokens_seen, started, kind="val")
                yield self._probe()
                yield self._readout()
            if self.step % cfg.save_every == 0 and self.step < cfg.steps:
                try:
                    self._save(optimizer, started)
                except OSError as exc:  # disk full, say: keep training; the final save tries again
                    yield {"kind": "status", "step": self.step,
                           "message": f"could not save the checkpoint at step {self.step} to {cfg.out}: "
                                      f"{exc.strerror or exc}; training goes on"}
        if self.step == first_step < cfg.steps:
            yield self._nothing_written()
            return
        if main and self.step < cfg.steps and self.step % cfg.eval_every:  # stopped between two validations:
            yield self._probe()  # show the guesses of the weights it keeps
            yield self._readout()
        yield self._finish("finished" if self.step >= cfg.steps else "stopped", started, optimizer)

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

    def _stopping(self) -> bool:
        """Whether to stop before the next step. Under torchrun the ranks agree (any rank asked, all stop): a rank
        that stopped alone would leave the others waiting for ever in the next gradient all-reduce."""
        if self.dist.world_size == 1:
            return self._stop.is_set()
        flag = torch.tensor([float(self._stop.is_set())], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _log(self, metrics: dict[str, float], tokens: int, started: float, kind: str = "train",
             lr: float | None = None) -> Record:
        record = {"kind": kind, "step": self.step, "tokens": tokens, **metrics,
                  "elapsed": round(time.perf_counter() - started, 3)}
        if lr is not None:
            record["lr"] = lr
        self.history.append(record)
        return record

    def _probe(self) -> ProbeRecord:
        """The current model's guesses for a fixed sentence, so one can watch it learn."""
        try:
            guesses = fill_mask(self.model, self.tokenizer, self.config.probe, top_k=5)[0]
        except ValueError as exc:
            return {"kind": "probe", "step": self.step, "text": self.config.probe, "error": str(exc)}
        return {"kind": "probe", "step": self.step, "text": self.config.probe, "predictions": guesses}

    def _take_snapshot(self) -> Iterator[Record]:
        """Keep this step's weights for the timeline, unless the run's snapshots would pass their disk budget."""
        size = sum(t.numel() * 2 for name, t in self.model.state_dict().items() if name not in TIED_KEYS)  # fp16
        written = timeline.used_bytes(self.config.out) if self._owns_timeline else 0
        if written + sum(map(timeline.size, self.snapshots.values())) + size > timeline.BUDGET_BYTES:
            yield {"kind": "status", "step": self.step,
                   "message": f"no timeline snapshot at step {self.step}: this model's snapshots would pass their "
                              f"{timeline.BUDGET_BYTES // 2**20} MB budget"}
            return
        self.snapshots[self.step] = timeline.snapshot(self.model, skip=frozenset(TIED_KEYS))

    def _readout(self) -> ReadoutRecord:
        """The guesses for a few fixed held-out sentences (kept out of the history: the app shows the latest)."""
        return {"kind": "readout", "step": self.step, "items": readout(self.model, self.tokenizer, self._readout_items),
                "baseline_token": self.tokenizer.convert_ids_to_tokens(self._baseline[0]),
                "baseline_acc": self._baseline[1]}

    def _save(self, optimizer, started: float) -> Path | None:
        """Rank 0 writes the checkpoint (atomically); the other ranks wait for it."""
        if not self.dist.is_main:
            dist.barrier()
            return None
        elapsed = float(self.metadata.get("elapsed", 0.0)) + time.perf_counter() - started
        hardware, here = trained_on(self.metadata), describe_hardware(self.device, self.dist.world_size)
        metadata = {"train_config": asdict(self.config), "step": self.step, "history": self.history,
                    "elapsed": round(elapsed, 3), "device": self.device.type, "precision": self.precision,
                    "hardware": hardware if here in hardware else [*hardware, here],
                    "world_size": self.dist.world_size, "parameters": self.model.num_parameters(),
                    "origin": self.origin, "visible_to": self.visible_to}
        try:
            extra = {timeline.file_name(step): state for step, state in self.snapshots.items()}
            if optimizer is not None and self.origin != "app":  # the app never resumes its runs (it continues one
                extra[OPTIMIZER_NAME] = optimizer_tensors(optimizer)  # with a new optimizer): 2/3 of a run's bytes
            with self.lock:
                saved = save_pretrained(self.model, self.tokenizer, self.config.out, metadata=metadata,
                                        extra_files=extra,
                                        keep=(timeline.FOLDER,) if self._owns_timeline else ())
            self.snapshots.clear()
            self._owns_timeline = True
            return saved
        finally:  # a failed save (disk full) must not leave the other ranks waiting at the barrier for ever
            if self.dist.world_size > 1:
                dist.barrier()

    def rescue(self, model: BertForPreTraining, tokenizer: BertTokenizerFast, step: int, history: list[Record],
               message: str) -> DoneRecord:
        """Save weights that outlived the process that trained them (the app's shared copy of a run whose process
        was killed) as this run's checkpoint, stopped at `step`, with the records it had sent."""
        self.model, self.tokenizer, self.step, self.history = model, tokenizer, step, history
        elapsed = float(history[-1]["elapsed"]) if history else 0.0
        return self._finish("stopped", time.perf_counter() - elapsed, None, message)

    def _finish(self, reason: str, started: float, optimizer, message: str | None = None) -> DoneRecord:
        record: DoneRecord = {"kind": "done", "reason": reason, "step": self.step, "message": message}
        try:
            saved = self._save(optimizer, started)
            record["checkpoint"] = str(saved) if saved else None
        except OSError as exc:
            record["checkpoint"] = None
            record["message"] = f"{message or ''} The checkpoint could not be written to {self.config.out}: " \
                                f"{exc.strerror or exc}".strip()
        return record


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


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """Cut a batch into `parts` equal micro-batches along the batch dimension (gradient accumulation)."""
    if parts == 1:
        return [batch]
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]


