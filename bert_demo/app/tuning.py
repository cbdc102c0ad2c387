"""The Fine-tune tab's events: the experiment that shows what pre-training buys, and questions to the classifier it
leaves behind.

The experiment fine-tunes the selected model on a labelled task and, with the same data, seed and steps, the same
architecture from random weights (and, if chosen, the selected model with its encoder frozen, and Google's
BERT-Mini, which read far more text). The runs take the training slot one after the other, as any run does; their
validation curves share one chart while they train. At the end one sentence states the gap, and a second chart plots
the test score against the number of labelled sentences over every finished run of this model (and of BERT-Mini) on
this task, so that a visitor who repeats the experiment with 100, 300, 1,000 and all labels sees how many labels
pre-training saves (Devlin et al. 2019, §5; Turc et al. 2019).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gradio as gr

from bert_demo import plots
from bert_demo.app import text, training
from bert_demo.app.backend import backend
from bert_demo.app.handlers import Outputs, friendly
from bert_demo.app.models import hub_id_of
from bert_demo.app.registry import Registry
from bert_demo.app.runs import UPLOAD_PREFIX, TrainingJob
from bert_demo.app.training import STOP_ACTIVE, STOP_IDLE, UPDATE_EVERY_S
from bert_demo.config import WEIGHTS_NAME, read_metadata
from bert_demo.records import Record
from bert_demo.train_config import APP_FINETUNE

ALL = "all"
LABEL_CHOICES = [str(n) if n else ALL for n in APP_FINETUNE["label_counts"]]  # what the radio offers
WELL_READ = "well-read"  # the start that read far more text than ours: APP_FINETUNE["well_read"], from the hub
COMPARISONS = {"random": "the same architecture from random weights", "frozen": "the selected model, encoder frozen",
               WELL_READ: f"Google's BERT-Mini, which read {APP_FINETUNE['well_read_words']} words (from the "
                          "Hugging Face Hub)"}
SMALL_GAP = 0.02  # a gap under two points is within what seeds alone change: said plainly
METRICS = {"f1": "F1", "matthews": "Matthews correlation", "acc": "accuracy"}  # GLUE's MRPC, CoLA; the rest


@friendly
def finetune(registry: Registry, model: str, task: str, upload: str | None, labels: str,
             compare: list[str] | None = None, owner: str | None = None) -> Iterator[Outputs]:
    """Fine-tune `model` on `task` (or an uploaded labelled file) with the first `labels` labelled sentences, then
    each start in `compare` ("random", "frozen", "well-read") with the same budget, one after the other in the
    training slot; stream one chart of their validation accuracy, and end with the gap in a sentence."""
    starts = ["pretrained", *_comparisons(compare)]
    with _private_copy(upload) as upload:
        configs = {start: _start_config(registry, model, task, _label_count(labels), start, upload, owner)
                   for start in starts}  # every refusal (an unreachable hub included) comes before the first run
        finished: dict[str, list[Record]] = {}
        for number, (start, config) in enumerate(configs.items(), start=1):
            job = yield from _take_slot(registry, config, owner)
            if job is None:
                yield {"ft_status": "You left the line: the experiment stopped.", "ft_stop": STOP_IDLE}
                return
            try:
                yield from _follow(job, finished, start, f"Run {number} of {len(configs)}, {plots.STARTS[start]}")
            finally:
                if job.done is None:  # the visitor went away: end the run, keep what it learned
                    job.stop()
            job.thread.join(timeout=10)
            finished[start] = list(job.records)
            if job.done.get("reason") == "error":
                raise ValueError(f"the {plots.STARTS[start]} run failed: {job.done.get('message')}")
            if job.done.get("reason") != "finished":
                yield {"ft_status": text.job_status(job) + " The experiment stopped here.", "ft_stop": STOP_IDLE,
                       "ft_curves": plots.finetune_figure(finished, _chance(finished.get("pretrained", [])))}
                return
        yield _ended(registry, model, configs, finished, owner)


def _start_config(registry: Registry, model: str, task: str, labels: int | None, start: str, upload: str | None,
                  owner: str | None):
    """The run of one start: the selected model fine-tuned (or frozen), its architecture from random weights, or
    the well-read model fine-tuned."""
    if start == WELL_READ:
        return registry.finetune_config(model, task, labels, "pretrained", upload, owner, well_read=True)
    return registry.finetune_config(model, task, labels, start, upload, owner)


def _take_slot(registry: Registry, config, owner: str | None) -> Iterator[Outputs]:
    """Wait in line for the training slot (showing the place in line); the started job, or None if the visitor
    left the line."""
    job = None
    for update in registry.run_in_line(config, owner):
        if isinstance(update, str):
            yield {"ft_status": update, "ft_stop": STOP_ACTIVE}
        else:
            job = update
    return job


def _follow(job: TrainingJob, finished: dict[str, list[Record]], start: str, title: str) -> Iterator[Outputs]:
    """The status line and the chart (the finished runs' curves and this one's) about once a second."""
    seen, last = 0, 0.0
    yield {"ft_status": f"{title}: {text.job_status(job)}", "ft_stop": STOP_ACTIVE, "ft_verdict": ""}
    while job.done is None:
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            yield {"ft_status": f"{title}: {text.job_status(job)}",
                   "ft_curves": plots.finetune_figure({**finished, start: job.records}, _chance(job.records))}


def _ended(registry: Registry, model: str, configs: dict, finished: dict[str, list[Record]], owner: str | None
           ) -> Outputs:
    """The last update: both curves, the sentence with the gap, the label-count chart, the new classifier chosen."""
    pretrained = configs["pretrained"]
    newest = f"runs/{Path(pretrained.out).name}"
    return {"ft_status": f"Done: {len(configs)} runs of {pretrained.steps} steps each. The fine-tuned model is "
                         f"saved as {newest}: try it below.",
            "ft_stop": STOP_IDLE, "ft_curves": plots.finetune_figure(finished, _chance(finished["pretrained"])),
            "ft_verdict": verdict(finished, pretrained.train_examples, pretrained.outside),
            "ft_counts": label_counts(registry, model, pretrained.task, owner)["ft_counts"],
            "ft_changes": plots.layer_change_figure(layer_changes(configs)),
            "ft_classifier": gr.Dropdown(choices=registry.classifier_choices(owner), value=newest),
            "model": gr.Dropdown(choices=registry.choices(owner))}


def layer_changes(configs: dict) -> dict[str, list[tuple[str, float]]]:
    """How far each part of every start's finished run moved from where it started: the weights it fine-tuned
    for a pre-trained, frozen or well-read start, the run's step-0 snapshot for a random one (a start is skipped
    when its "before" is gone: no snapshot, or a hub model pruned from the cache). `configs` maps each start to its
    run's config."""
    checkpoint, timeline = backend().checkpoint, backend().timeline
    changes = {}
    for start, config in configs.items():
        after = Path(config.out)
        if not (after / WEIGHTS_NAME).is_file():
            continue
        if config.init == "random":
            if 0 not in timeline.steps(after):
                continue
            before = timeline.load(after, 0)
        elif (Path(config.model) / WEIGHTS_NAME).is_file():
            before = checkpoint.read_weights(Path(config.model))
        else:
            continue
        changes[start] = backend().weight_change.relative_change(before, checkpoint.read_weights(after))
    return changes


def verdict(finished: dict[str, list[Record]], train_examples: int | None, outside: str | None) -> str:
    """One paragraph: each start's test score in the task's metric (accuracy, or GLUE's F1 or Matthews
    correlation, where always answering one class scores 0 however common it is), the gap pre-training made, and
    the gap outside the domain; a small gap said to be small."""
    scores = {init: final_record(records) for init, records in finished.items()}
    scores = {init: score for init, score in scores.items() if "test_acc" in score}
    if "pretrained" not in scores:
        return ""
    key = metric_key(scores["pretrained"])
    labels = f"{train_examples:,} labelled sentences" if train_examples else "every labelled sentence"
    lines = [f"**With {labels}**, on test sentences none of the runs saw ({METRICS[key]}): " + ", ".join(
        f"{plots.STARTS[init]} **{score[f'test_{key}']:.3f}**" for init, score in scores.items()) + "."]
    if "random" in scores:
        lines.append(_gap("Pre-training", scores["pretrained"][f"test_{key}"] - scores["random"][f"test_{key}"],
                          "in this domain"))
        lines.append(_head_start(finished["pretrained"], finished["random"], key))
        if outside and "outside_acc" in scores["random"]:
            lines.append(_gap("Pre-training", scores["pretrained"]["outside_acc"] - scores["random"]["outside_acc"],
                              f"on {outside}, a domain neither run trained on"))
            lines.append(_below_majority(scores, outside))
    if WELL_READ in scores:
        lines.append(_well_read(scores, key))
    if "frozen" in scores:
        frozen = scores["frozen"][f"test_{key}"]
        lines.append(f"The frozen encoder (only the classifier learned) reached {frozen:.3f}: "
                     "fine-tuning the whole encoder is what makes its features fit the task.")
    return " ".join(line for line in lines if line)


def _well_read(scores: dict[str, Record], key: str) -> str:
    """What the model that read far more text reached (in the task's metric `key`), beside the selected model and
    (if run) random weights: whether pre-training buys more the more a model read (Turc et al. 2019)."""
    well, selected = scores[WELL_READ][f"test_{key}"], scores["pretrained"][f"test_{key}"]
    line = (f"Google's BERT-Mini, pre-trained on {APP_FINETUNE['well_read_words']} words, reached "
            f"**{well:.3f}**")
    if "random" in scores:
        random = scores["random"][f"test_{key}"]
        line += (f": {(well - random) * 100:+.1f} points over random weights, against "
                 f"{(selected - random) * 100:+.1f} for the selected model")
    if well - selected >= SMALL_GAP:
        return line + ". The more text a model read before, the more its pre-training buys."
    return line + ": here all that reading bought no more than the selected model's."


def _below_majority(scores: dict[str, Record], outside: str) -> str:
    """A warning when the outside scores are no better than always answering that domain's commonest class."""
    majority = scores["pretrained"].get("outside_majority")
    if majority is None or any(score.get("outside_acc", 1.0) > majority for score in scores.values()):
        return ""
    return (f"On {outside} no start beats always answering its commonest class ({majority:.3f}): with this many "
            "labels none of them carries its skill to another domain.")


def metric_key(record: Record) -> str:
    """The task's metric in a run's final record: "f1" or "matthews" where it has one (GLUE's MRPC, CoLA), else
    "acc"."""
    return next(k for k in METRICS if f"test_{k}" in record or k == "acc")


def _head_start(pretrained: list[Record], random: list[Record], key: str) -> str:
    """What the first validation says, in the task's metric `key`, of how fast each start learned ("" when the
    two were level there)."""
    first = [next((r for r in records if r.get("kind") == "val"), None) for records in (pretrained, random)]
    if None in first or first[0][key] - first[1][key] < SMALL_GAP:
        return ""
    return (f"It learned faster: at the first validation (step {first[0]['step']}) the pre-trained start had "
            f"{first[0][key]:.3f} against {first[1][key]:.3f}.")


def _gap(subject: str, gap: float, where: str) -> str:
    points = f"{abs(gap) * 100:.1f} points"
    if abs(gap) < SMALL_GAP:
        return (f"{subject} made little difference {where} ({'+' if gap >= 0 else '-'}{points}, within what "
                "another seed can change).")
    return f"{subject} bought **{points}** {where}." if gap > 0 else f"{subject} cost {points} {where}."


def _chance(records: list[Record]) -> float | None:
    """The validation split's majority-class accuracy, the line the curves must rise above (None before the first
    validation)."""
    return next((r["majority"] for r in records if r.get("kind") == "val" and "majority" in r), None)


def final_record(records: list[Record]) -> Record:
    """The run's last validation record, which carries its test (and outside) scores."""
    return next((r for r in reversed(records) if r.get("kind") == "val"), {})


@friendly
def label_counts(registry: Registry, model: str, task: str, owner: str | None = None) -> Outputs:
    """The chart of the test score (the task's metric) against labelled sentences, over every finished run of
    `model`, and of the well-read start, on `task` that this visitor may see (the app's and the command line's)."""
    entry = registry.resolve(model, owner)
    selected = entry.folder.resolve() if entry.folder else None
    points: list[tuple[str, int, float]] = []
    if task not in backend().labelled.TASKS:  # a visitor's file: each upload is a task of its own
        return {"ft_counts": plots.label_count_figure(points)}
    key = {"accuracy": "acc"}.get(backend().labelled.TASKS[task].metric, backend().labelled.TASKS[task].metric)
    size = None
    for run in registry.list_models(owner):
        if run.folder is None or not run.name.startswith("runs/"):
            continue
        metadata = read_metadata(run.folder)
        config, final = metadata.get("train_config") or {}, final_record(metadata.get("history") or [])
        start = _start_of(config, selected)
        if config.get("task") != task or f"test_{key}" not in final or start is None:
            continue
        if config.get("train_examples") is None and size is None:
            size = _train_size(task)
        points.append((start, config.get("train_examples") or size, float(final[f"test_{key}"])))
    return {"ft_counts": plots.label_count_figure(points, METRICS[key])}


def _start_of(config: dict, selected: Path | None) -> str | None:
    """Which of the chart's starts a fine-tuning run was: its init for a run of the selected model, "well-read" for
    a pre-trained run of the well-read model (found by its folder in the hub's cache), else None."""
    model, init = Path(str(config.get("model"))), config.get("init")
    if init == "pretrained" and hub_id_of(model) == APP_FINETUNE["well_read"]:
        return WELL_READ
    return init if init in plots.STARTS and selected is not None and model.resolve() == selected else None


def _train_size(task: str) -> int:
    return len(backend().labelled.load_task(task)["train"])


def stop(registry: Registry, owner: str | None) -> Outputs:
    """Stop the visitor's run (the experiment ends with it), or take them out of the line."""
    return {"ft_status": training.stop(registry, owner)["status"]}


@friendly
def opened(registry: Registry, model: str | None, task: str | None, classifier: str | None,
           owner: str | None = None) -> Outputs:
    """When the tab opens or the task changes: the label-count chart for this model and task, and the fine-tuned
    models this visitor may ask (the one chosen stays chosen)."""
    choices = registry.classifier_choices(owner)
    names = [name for _, name in choices]
    counts = label_counts(registry, model, task, owner) if model and task else {"ft_counts": gr.skip()}
    return {**counts, "ft_classifier": gr.Dropdown(choices=choices, value=classifier if classifier in names else
                                                   default_classifier(registry, owner))}


@friendly
def classifier_chosen(registry: Registry, classifier: str | None, owner: str | None = None) -> Outputs:
    """The attention comparison's layer slider, fitted to the chosen classifier's layers (its top layer first:
    fine-tuning moves it most)."""
    if not classifier:
        return {"ft_att_layer": gr.skip()}
    layers = registry.config_of(classifier, owner)[1].num_hidden_layers
    return {"ft_att_layer": gr.Slider(maximum=layers, value=layers)}


def default_classifier(registry: Registry, owner: str | None = None) -> str | None:
    """The newest classifier fine-tuned from a pre-trained start (a random start's answers teach little), else the
    newest of any start."""
    names = [name for _, name in registry.classifier_choices(owner)]
    for name in names:
        folder = registry.resolve(name, owner).folder
        if (read_metadata(folder).get("train_config") or {}).get("init") == "pretrained":
            return name
    return names[0] if names else None


@friendly
def classify(registry: Registry, classifier: str, text_a: str, text_b: str = "", owner: str | None = None
             ) -> Outputs:
    """A fine-tuned classifier's probability for each of its classes, for a sentence or a pair."""
    loaded = registry.load_classifier(classifier, owner)
    probabilities = backend().inference.classify(loaded.model, loaded.tokenizer, text_a, text_b or None)
    return {"ft_label": dict(probabilities)}


@friendly
def attribution(registry: Registry, classifier: str, text_a: str, text_b: str = "", owner: str | None = None
                ) -> Outputs:
    """Which words drove the classifier's decision: integrated gradients (Sundararajan et al. 2017) as coloured
    words, with the completeness check in the caption."""
    loaded = registry.load_classifier(classifier, owner)
    backend().inference.classify(loaded.model, loaded.tokenizer, text_a, text_b or None)  # checks the texts
    result = backend().attribution.classification(loaded.model, loaded.tokenizer, text_a, text_b or None)
    return {"ft_words": gr.HighlightedText(value=text.attribution_spans(result.tokens, result.scores),
                                           label=text.attribution_caption(f"Towards “{result.target}”", result))}


@friendly
def attention_change(registry: Registry, classifier: str, text_a: str, text_b: str = "", layer: float = 1,
                     owner: str | None = None) -> Outputs:
    """The same input's attention in a fine-tuned model and in the model it started from (a layer's average over
    heads, side by side), and how much attention moved in each layer: half the summed absolute difference of each
    row, averaged over heads and tokens (0: unchanged, 1: looking somewhere else entirely)."""
    loaded = registry.load_classifier(classifier, owner)
    inference = backend().inference
    text_b = text_b or None
    tokens, after = inference.attention(loaded.model, loaded.tokenizer, text_a, text_b)
    _, before = inference.attention(_starting_model(loaded), loaded.tokenizer, text_a, text_b)
    moved = (after - before).abs().sum(-1).mul(0.5).mean(dim=(1, 2))  # (L,)
    shown = min(max(int(layer), 1), len(moved))
    per_layer = ", ".join(f"layer {i + 1}: {value:.2f}" for i, value in enumerate(moved.tolist()))
    was, now = before[shown - 1].mean(0), after[shown - 1].mean(0)  # (T, T): the layer's mean over heads
    top = max(plots.colour_top(was), plots.colour_top(now))  # one scale: the same colour means the same weight
    return {"ft_att_before": plots.attention_heatmap(tokens, was, f"Layer {shown}, before (mean of heads)",
                                                     top=top, paired=True),
            "ft_att_after": plots.attention_heatmap(tokens, now, f"Layer {shown}, after", top=top, paired=True),
            "ft_att_caption": f"Share of attention that moved, averaged over heads and tokens: {per_layer}."}


def _starting_model(loaded):
    """The weights a fine-tuned run started from: the model it fine-tuned (a pre-trained or frozen start), or its
    own step-0 snapshot (a random start). Either way a classifier of the run's shape, for its encoder."""
    config = read_metadata(loaded.folder).get("train_config") or {}
    model = type(loaded.model)(loaded.model.config)
    if config.get("init") in ("pretrained", "frozen") and config.get("model"):
        folder = Path(config["model"])
        if not (folder / WEIGHTS_NAME).is_file():
            start = "Google's BERT-Mini" if _start_of(config, None) == WELL_READ else folder.name
            raise ValueError(f"the model {loaded.entry.label} started from ({start}) is no longer here")
        start = backend().checkpoint.read_weights(folder)
    elif 0 in backend().timeline.steps(loaded.folder):
        start = backend().timeline.load(loaded.folder, 0)
    else:
        raise ValueError(f"{loaded.entry.label} does not say what it started from: only runs fine-tuned here or "
                         "with `python -m bert_demo finetune` can be compared with their start")
    model.load_state_dict({**loaded.model.state_dict(), **{k: v for k, v in start.items()
                                                           if k.startswith("bert.")}})
    return model.to(next(loaded.model.parameters()).device).eval()


def _comparisons(compare: list[str] | None) -> list[str]:
    chosen = list(compare or [])
    unknown = [c for c in chosen if c not in COMPARISONS]
    if unknown:
        raise ValueError(f"compare with {', '.join(list(COMPARISONS)[:-1])} or {list(COMPARISONS)[-1]}, not "
                         f"{unknown[0]!r}")
    return [c for c in COMPARISONS if c in chosen]


def _label_count(choice: str | int | None) -> int | None:
    """The radio's choice as a number of labelled sentences (None: all)."""
    if str(choice) not in LABEL_CHOICES:
        raise ValueError(f"labelled sentences: choose {', '.join(LABEL_CHOICES)}, not {choice!r}")
    return None if str(choice) == ALL else int(choice)


@contextmanager
def _private_copy(upload: str | None) -> Iterator[str | None]:
    """The visitor's labelled file copied under a name of ours for the experiment's runs, deleted when it ends
    (a killed app's copies are swept when it starts again)."""
    if not upload:
        yield None
        return
    source = Path(upload)
    if not source.is_file():
        raise ValueError("the labelled file is gone: upload it again")
    folder = Path(tempfile.mkdtemp(prefix=f"{UPLOAD_PREFIX}{os.getpid()}-"))
    try:
        target = folder / f"labelled{source.suffix.lower()}"
        if source.stat().st_size > backend().labelled.MAX_FILE_BYTES:
            raise ValueError(f"the labelled file is {source.stat().st_size / 2**20:.1f} MB; at most "
                             f"{backend().labelled.MAX_FILE_BYTES // 2**20} MB are allowed")
        shutil.copyfile(source, target)
        yield str(target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
