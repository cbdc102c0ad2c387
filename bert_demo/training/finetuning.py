"""Fine-tuning: a classifier on a checkpoint's encoder, trained on labelled sentences (Devlin et al. 2019, §4).

`finetuning(config)` is a `loop.Run` whose `prepare` is this module's, so it stops, saves, snapshots and reports as
pre-training does; this module holds what fine-tuning adds. The run starts from the checkpoint's weights (`pretrained`),
from the same architecture and vocabulary with random weights (`random`: what pre-training bought is the difference), or
from the checkpoint's encoder kept fixed (`frozen`: the paper's feature-based approach, §5.3). A pre-trained start can
begin its pooler anew (`reinit_pooler`) and let lower layers learn more slowly (`layer_decay`, in
`recipe.make_optimizer`). Batches are grouped by length, so that short sentences do not pay for padding to the longest.
Validation reports the task's metric; the last one also scores the test split and, where given, a task from another
domain. The folder it writes is a Hugging Face `BertForSequenceClassification` that `pipeline("text-classification")`
loads."""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Generator, Iterator
from pathlib import Path

import datasets
import torch
import torch.nn.functional as F
from torch import Tensor

from bert_demo.checkpoint import load_classifier
from bert_demo.data.labelled import FILE_TYPES, TASKS, first, load_file, load_task, score
from bert_demo.model import in_eval_mode, init_weights
from bert_demo.training.loop import Control, Run, Training
from bert_demo.training.step import Metrics
from bert_demo.training.recipe import optimizer_and_schedule, set_dropout
from bert_demo.training.records import Record
from bert_demo.training.runtime import Batch, to_device
from bert_demo.training.settings import FinetuneConfig

LENGTH_GROUP = 50  # batches whose examples are sorted by length together: padding shrinks, order stays random
EVAL_BATCH = 64
Encoded = list[tuple[list[int], list[int], int]]  # (input ids, segment ids, label) per example


def finetuning(config: FinetuneConfig, resume: str | Path | None = None, origin: str = "cli",
               visible_to: str | None = None, control: Control | None = None) -> Run:
    """A fine-tuning run (see `loop.Run`); `resume` names a folder this kind of run saved: its classifier, AdamW
    state and step carry on."""
    run = Run(config, prepare, resume, origin, visible_to, control)
    if run.dist.world_size > 1:
        raise ValueError("fine-tuning runs in one process: start it without torchrun")
    return run


def prepare(run: Run) -> Generator[Record, None, Training | None]:
    """The run's task: the labelled examples, the classifier it starts from, AdamW and the schedule; None if a stop
    was asked for meanwhile."""
    cfg = run.config
    yield {"kind": "status", "message": f"loading the labelled examples of {Path(cfg.task).name!r}"}
    task = load_file(cfg.task) if Path(cfg.task).suffix.lower() in FILE_TYPES else load_task(cfg.task)
    labels = tuple(task["train"].features["label"].names)
    metric = TASKS[cfg.task].metric if cfg.task in TASKS else "accuracy"
    yield {"kind": "status", "message": f"starting the classifier from {Path(cfg.model).name} ({cfg.init})"}
    if run.stopping_now():
        return None
    run.model, run.tokenizer = _classifier(run, labels)
    encode = functools.partial(_encode, run.tokenizer, cfg.max_seq_len)
    train = encode(first(task["train"], cfg.train_examples))
    splits = {"": encode(task["validation"]), "test_": encode(task["test"]),
              "outside_": _outside_examples(cfg, labels, encode)}
    if cfg.steps is None:  # the epochs decide: saved with the run (its `planned_steps`)
        run.total_steps = max(1, math.ceil(cfg.epochs * len(train) / cfg.batch_size))
    optimizer, schedule = optimizer_and_schedule(run.model, cfg, lambda: run.total_steps, run.step, run.resume)
    done = run.step  # a resumed run picks the schedule up where it stopped
    yield {"kind": "status", "message": f"fine-tuning on {len(train):,} labelled examples ({', '.join(labels)}) "
                                        f"for {run.total_steps:,} steps on {run.device.type} in {run.precision}"
                                        + (f", from step {done:,}" if done else "")}
    batches = _length_grouped(train, cfg.batch_size, cfg.seed, run.tokenizer.pad_token_id)
    return Training(model=run.model, batches=itertools.islice(batches, done, None),  # the batches next due
                    optimizer=optimizer, schedule=schedule, loss=functools.partial(_loss, cfg.grad_accum),
                    evaluate=functools.partial(_evaluate, run, splits, metric))


def _classifier(run: Run, labels: tuple[str, ...]):
    """The model the run starts from, and its tokenizer (see the module's docstring for the three inits)."""
    cfg = run.config
    if run.resume:
        model, tokenizer, _, _ = load_classifier(run.resume)
        if model.config.labels != labels:
            raise ValueError(f"cannot resume: {run.resume} classifies {', '.join(model.config.labels)}, the task "
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
    return model.to(run.device).train(), tokenizer


def _outside_examples(cfg: FinetuneConfig, labels: tuple[str, ...], encode) -> Encoded:
    """The test split of `outside`, a task from another domain with the same classes (none: nothing)."""
    name = cfg.outside_task
    if name is None:
        return []
    outside = load_task(name)
    if tuple(outside["test"].features["label"].names) != labels:
        raise ValueError(f"the outside task {name!r} has other classes than {cfg.task!r}: "
                         f"{', '.join(outside['test'].features['label'].names)}")
    return encode(outside["test"])


def _loss(parts: int, out, part: Batch, batch: Batch) -> tuple[Tensor, Metrics]:
    """A micro-batch's share of the classification loss (each of the `parts` micro-batches weighted equally), and
    its metrics."""
    labels = part["labels"].to(out.logits.device, non_blocking=True)
    metrics = {"loss": (out.loss.detach(), 1), "acc": ((out.logits.detach().argmax(-1) == labels).sum(), len(labels))}
    return out.loss / parts, metrics


def _evaluate(run: Run, splits: dict[str, Encoded], metric: str) -> Iterator[Record]:
    """The validation split's loss, accuracy and the task's metric; at the run's last step also the test split's and
    the outside domain's."""
    final = run.step >= run.total_steps
    if final:  # the last scoring takes longer than a validation: say what the run is doing
        yield {"kind": "status", "message": "scoring the validation and test splits"
                                            + (f" and {run.config.outside}" if splits["outside_"] else "")}
    metrics = {}
    for prefix, examples in splits.items():
        if examples and (final or not prefix):
            metrics |= _scores(run, examples, prefix, metric)
    yield {"kind": "val", **metrics}


@torch.no_grad()
def _scores(run: Run, examples: Encoded, prefix: str, metric: str) -> dict[str, float]:
    """Loss, accuracy and the task's metric over `examples`, in fp32 and eval mode, and the accuracy of always
    answering the commonest class there (`majority`: what an accuracy must beat to mean anything). Scored in batches
    of similar length: a batch pads to its longest sentence, and in the split's own order half of what the model
    computed was padding (the same logits in half the time)."""
    examples = sorted(examples, key=lambda example: len(example[0]))
    model, predictions, loss = in_eval_mode(run.model), [], 0.0
    for start in range(0, len(examples), EVAL_BATCH):
        batch = to_device(_collate(examples[start:start + EVAL_BATCH], run.tokenizer.pad_token_id), run.device)
        logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits.float()
        loss += float(F.cross_entropy(logits, batch["labels"], reduction="sum"))
        predictions += logits.argmax(-1).tolist()
    truth = [label for _, _, label in examples]
    metrics = {f"{prefix}loss": loss / len(examples), f"{prefix}acc": score("accuracy", predictions, truth),
               f"{prefix}majority": max(map(truth.count, set(truth))) / len(truth)}
    if metric != "accuracy":
        metrics[f"{prefix}{metric}"] = score(metric, predictions, truth)
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
