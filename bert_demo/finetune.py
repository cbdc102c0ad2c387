"""Fine-tuning: a classifier on a checkpoint's encoder, trained on labelled sentences (Devlin et al. 2019, §4).

`FineTuner` is a `loop.Run`, so it stops, saves, snapshots and reports as pre-training does; this module holds what
fine-tuning adds. The run starts from the checkpoint's weights (`pretrained`), from the same architecture and
vocabulary with random weights (`random`: what pre-training bought is the difference), or from the checkpoint's
encoder kept fixed (`frozen`: the paper's feature-based approach, §5.3). A pre-trained start can begin its pooler
anew (`reinit_pooler`) and let lower layers learn more slowly (`layer_decay`, in `recipe.make_optimizer`). Batches
are grouped by length, so that short sentences do not pay for padding to the longest. Validation reports the task's
metric; the last one also scores the test split and, where given, a task from another domain. The folder it writes
is a Hugging Face `BertForSequenceClassification` that `pipeline("text-classification")` loads.
"""
from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import datasets
import torch
import torch.nn.functional as F
from safetensors.torch import load_file as load_tensors
from torch import Tensor

from bert_demo.checkpoint import load_classifier
from bert_demo.labelled import FILE_TYPES, TASKS, first, load_file, load_task, score
from bert_demo.checkpoint import load_optimizer_tensors
from bert_demo.loop import OPTIMIZER_NAME, Run, split_batch
from bert_demo.model import BertForSequenceClassification, init_weights
from bert_demo.records import Record
from bert_demo.recipe import lr_multiplier, make_optimizer, set_dropout
from bert_demo.runtime import Batch, autocast, to_device
from bert_demo.train_config import FinetuneConfig

LENGTH_GROUP = 50  # batches whose examples are sorted by length together: padding shrinks, order stays random
EVAL_BATCH = 64
Encoded = list[tuple[list[int], list[int], int]]  # (input ids, segment ids, label) per example


class FineTuner(Run):
    """One fine-tuning run. Create it, iterate `run()`, and call `stop()` from anywhere to end it early."""

    def __init__(self, config: FinetuneConfig, resume: str | Path | None = None, origin: str = "cli",
                 visible_to: str | None = None):
        """`resume` names a folder this kind of run saved: its classifier, AdamW state and step carry on."""
        super().__init__(config, resume=resume, origin=origin, visible_to=visible_to)
        if self.dist.world_size > 1:
            raise ValueError("fine-tuning runs in one process: start it without torchrun")
        self.model: BertForSequenceClassification | None = None

    def _prepare(self) -> Generator[Record, None, tuple | None]:
        cfg = self.config
        yield {"kind": "status", "message": f"loading the labelled examples of {Path(cfg.task).name!r}"}
        task = load_file(cfg.task) if Path(cfg.task).suffix.lower() in FILE_TYPES else load_task(cfg.task)
        labels = tuple(task["train"].features["label"].names)
        self._metric = TASKS[cfg.task].metric if cfg.task in TASKS else "accuracy"
        yield {"kind": "status", "message": f"starting the classifier from {Path(cfg.model).name} ({cfg.init})"}
        if self._stopping():
            return None
        self.model, self.tokenizer = self._classifier(labels)
        encode = functools.partial(_encode, self.tokenizer, cfg.max_seq_len)
        train = encode(first(task["train"], cfg.train_examples))
        self._validation, self._test = encode(task["validation"]), encode(task["test"])
        self._outside = self._outside_examples(labels, encode)
        if cfg.steps is None:  # the epochs decide: stored with the run, so its records say how long it was
            cfg.steps = max(1, math.ceil(cfg.epochs * len(train) / cfg.batch_size))
        optimizer = make_optimizer(self.model, cfg)
        if self.resume and (self.resume / OPTIMIZER_NAME).is_file():
            load_optimizer_tensors(optimizer, load_tensors(str(self.resume / OPTIMIZER_NAME), device=str(self.device)))
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else cfg.steps // 10
        done = self.step  # a resumed run picks the schedule up where it stopped
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_multiplier(s + done, warmup, cfg.steps, cfg.schedule))
        yield {"kind": "status", "message": f"fine-tuning on {len(train):,} labelled examples ({', '.join(labels)}) "
                                            f"for {cfg.steps:,} steps on {self.device.type} in {self.precision}"
                                            + (f", from step {done:,}" if done else "")}
        batches = _length_grouped(train, cfg.batch_size, cfg.seed, self.tokenizer.pad_token_id)
        return itertools.islice(batches, done, None), optimizer, schedule  # a resumed run sees the batches next due

    def _classifier(self, labels: tuple[str, ...]):
        """The model the run starts from, and its tokenizer (see the module's docstring for the three inits)."""
        cfg = self.config
        if self.resume:
            model, tokenizer, _, _ = load_classifier(self.resume)
            if model.config.labels != labels:
                raise ValueError(f"cannot resume: {self.resume} classifies {', '.join(model.config.labels)}, the task "
                                 f"{', '.join(labels)}")
        else:
            model, tokenizer, _, _ = load_classifier(cfg.model, labels=labels)
            if cfg.init == "random":
                model.apply(functools.partial(init_weights, std=model.config.initializer_range))
            elif cfg.reinit_pooler:  # the pooler learnt next-sentence prediction: start it new, like the classifier
                model.bert.pooler.apply(functools.partial(init_weights, std=model.config.initializer_range))
        if cfg.init == "frozen":
            model.bert.requires_grad_(False)
        if cfg.dropout is not None:
            set_dropout(model, cfg.dropout)
        return model.to(self.device).train(), tokenizer

    def _outside_examples(self, labels: tuple[str, ...], encode) -> Encoded:
        """The test split of `outside`, a task from another domain with the same classes (none: nothing)."""
        name = self.config.outside
        if not name or name.lower() == "none" or name == self.config.task:
            return []
        outside = load_task(name)
        if tuple(outside["test"].features["label"].names) != labels:
            raise ValueError(f"the outside task {name!r} has other classes than {self.config.task!r}: "
                             f"{', '.join(outside['test'].features['label'].names)}")
        return encode(outside["test"])

    def _accumulate(self, forward: torch.nn.Module, batch: Batch, window: "Window") -> object:
        """Forward under autocast, backward outside it, over the batch's micro-batches (weighted equally)."""
        parts = self.config.grad_accum
        for part in split_batch(batch, parts):
            examples, tokens = len(part["labels"]), int(part["attention_mask"].sum())
            part = to_device(part, self.device)
            with autocast(self.device, self.precision):
                out = forward(**part)
            (out.loss / parts).backward()
            window.add(out, part["labels"], tokens, examples)
        return out

    def _window(self) -> "Window":
        return Window()

    def _evaluate(self, tokens: int, started: float) -> Iterator[Record]:
        """The validation split's loss, accuracy and the task's metric; at the end also the test split's and the
        outside domain's."""
        final = self.step >= self.config.steps
        if final:  # the last scoring takes longer than a validation: say what the run is doing
            yield {"kind": "status", "message": "scoring the validation and test splits"
                                                + (f" and {self.config.outside}" if self._outside else "")}
        metrics = self._scores(self._validation, "")
        if final:
            metrics |= self._scores(self._test, "test_")
            if self._outside:
                metrics |= self._scores(self._outside, "outside_")
        yield self._log(metrics, tokens, started, kind="val")

    @torch.no_grad()
    def _scores(self, examples: Encoded, prefix: str) -> dict[str, float]:
        """Loss, accuracy and the task's metric over `examples`, in fp32 and eval mode, and the accuracy of always
        answering the commonest class there (`majority`: what an accuracy must beat to mean anything)."""
        model, predictions, loss = self.model, [], 0.0
        was_training = model.training
        model.eval()
        for start in range(0, len(examples), EVAL_BATCH):
            batch = to_device(_collate(examples[start:start + EVAL_BATCH], self.tokenizer.pad_token_id), self.device)
            logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits.float()
            loss += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
            predictions += logits.argmax(-1).tolist()
        model.train(was_training)
        truth = [label for _, _, label in examples]
        metrics = {f"{prefix}loss": loss / len(examples), f"{prefix}acc": score("accuracy", predictions, truth),
                   f"{prefix}majority": max(map(truth.count, set(truth))) / len(truth)}
        if self._metric != "accuracy":
            metrics[f"{prefix}{self._metric}"] = score(self._metric, predictions, truth)
        return metrics


class Window:
    """Running sums of a fine-tuning run's training metrics between two log records, kept on the device."""

    def __init__(self):
        self.sums: dict[str, Tensor | float] = {"loss": 0.0, "correct": 0.0, "examples": 0.0, "micro_steps": 0.0,
                                                "tokens": 0.0}
        self.started = time.perf_counter()

    def add(self, out, labels: Tensor, tokens: int, examples: int) -> None:
        """One micro-batch: its output, labels (on the device), real tokens and examples."""
        s = self.sums
        s["loss"] += out.loss.detach()
        s["correct"] += (out.logits.detach().argmax(-1) == labels).sum()
        s["examples"] += examples
        s["micro_steps"] += 1
        s["tokens"] += tokens

    def flush(self, world_size: int = 1) -> dict[str, float]:
        """Averages since the last flush: loss per micro-batch, accuracy per example, tokens/s of every process."""
        s = {key: float(value) for key, value in self.sums.items()}
        seconds = time.perf_counter() - self.started
        metrics = {"loss": s["loss"] / max(s["micro_steps"], 1), "acc": s["correct"] / max(s["examples"], 1),
                   "tokens_per_s": s["tokens"] * world_size / max(seconds, 1e-9)}
        self.__init__()
        return metrics


def _encode(tokenizer, max_len: int, data: datasets.Dataset) -> Encoded:
    """Each example as [CLS] A [SEP] (B [SEP]) token and segment ids, cut to `max_len`, with its label."""
    texts_b = list(data["text_b"])
    encoded = tokenizer(list(data["text"]), texts_b if any(b is not None for b in texts_b) else None,
                        truncation=True, max_length=max_len, return_token_type_ids=True)
    return list(zip(encoded["input_ids"], encoded["token_type_ids"], list(data["label"])))


def _collate(examples: Encoded, pad: int) -> Batch:
    """Examples padded to the longest of them, with the attention mask that hides the padding."""
    length = max(len(ids) for ids, _, _ in examples)
    input_ids = torch.full((len(examples), length), pad, dtype=torch.long)
    token_type_ids = torch.zeros((len(examples), length), dtype=torch.long)
    attention_mask = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (ids, segments, _) in enumerate(examples):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        token_type_ids[row, :len(ids)] = torch.tensor(segments)
        attention_mask[row, :len(ids)] = 1
    labels = torch.tensor([label for _, _, label in examples])
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "labels": labels}


def _length_grouped(examples: Encoded, batch_size: int, seed: int, pad: int) -> Iterator[Batch]:
    """Batches for ever, epoch after epoch: each epoch shuffles the examples, sorts every LENGTH_GROUP batches'
    worth by length, cuts them into batches and shuffles the batches, so a batch holds sentences of about one
    length (little padding) while the order of the epoch stays random."""
    generator = torch.Generator().manual_seed(seed)
    group = batch_size * LENGTH_GROUP
    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start:start + group], key=lambda i: len(examples[i][0]))
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield _collate([examples[i] for i in batches[index]], pad)
