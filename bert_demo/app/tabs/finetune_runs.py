"""The Fine-tune tab's finished experiments, read back from their runs' records: how one ended (its curves, the
verdict, the label-count chart, how far each layer moved), the newest one a visitor may see (a reload loses
nothing), and how long the latest one took here.

An experiment's runs share the end of their folder names (the time it started, `Forms.finetune_config`'s stamp),
its task and its number of labelled sentences: that is how its runs are found again.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import gradio as gr

from bert_demo.app.handlers import Outputs, friendly
from bert_demo.app.policy import well_read_model, well_read_name
from bert_demo.app.runs.estimates import clock
from bert_demo.app.state.catalog import ModelEntry
from bert_demo.app.folders import hub_id_of, weights_time
from bert_demo.app.registry import Registry
from bert_demo.app.tabs.classifier import start_of
from bert_demo.app.tabs.train import START_IDLE, STOP_IDLE
from bert_demo.app.verdict import METRICS, WELL_READ, final_record, verdict
from bert_demo.config import has_weights, read_metadata
from bert_demo.inspection import curves
from bert_demo.training.records import Record
from bert_demo.training.settings import FinetuneConfig

UPLOAD_COUNTS = "drawn for the listed tasks:<br>an uploaded file is a task of its own"  # the empty chart's note
ORDER = ("pretrained", "random", "frozen", WELL_READ)  # an experiment's starts, in the order they train
ENDED = ("ft_status", "ft_curves", "ft_verdict", "ft_counts", "ft_changes", "ft_classifier", "ft_stop", "model",
         "ft_model")  # what an experiment's end shows
Run = tuple[ModelEntry, dict[str, Any]]  # a run's entry in the catalogue, and its records (bert_demo.json)


def ended(registry: Registry, configs: dict[str, FinetuneConfig], finished: dict[str, list[Record]],
          owner: str | None, status: str = "Done") -> Outputs:
    """The last update: every start's curves, the sentence with the gap, the label-count chart, the layer chart,
    the new classifier chosen, and the model it fine-tuned chosen to fine-tune again."""
    pretrained, google = configs["pretrained"], configs.get(WELL_READ)
    well_read = google and well_read_name(hub_id_of(google.model))
    newest = f"runs/{Path(pretrained.out).name}"
    runs = f"{len(configs)} runs of {pretrained.steps} steps each" if len(configs) > 1 else \
        f"1 run of {pretrained.steps} steps"
    model = model_name(registry, pretrained.model, owner)
    choices = registry.catalog.choices(owner)
    return {"ft_status": f"{status}: {runs}. The fine-tuned model is saved as {newest}: try it below.",
            "ft_stop": STOP_IDLE, "ft_start": START_IDLE,
            "ft_curves": curves.finetune_figure(finished, chance(finished["pretrained"])),
            "ft_verdict": verdict(finished, pretrained.train_examples, pretrained.outside, well_read),
            "ft_counts": label_counts(registry, model, pretrained.task, owner)["ft_counts"] if model else gr.skip(),
            "ft_changes": curves.layer_change_figure(layer_changes(configs)),
            "ft_classifier": gr.Dropdown(choices=registry.catalog.classifier_choices(owner), value=newest),
            "model": gr.Dropdown(choices=choices),
            "ft_model": gr.Dropdown(choices=choices, value=model) if model else gr.Dropdown(choices=choices)}


def model_name(registry: Registry, folder: str, owner: str | None) -> str | None:
    """The catalogue's name of the model in `folder` (None if it is gone, or not the visitor's to see)."""
    wanted = Path(folder).resolve()
    return next((entry.name for entry in registry.catalog.list_models(owner)
                 if entry.folder is not None and entry.folder.resolve() == wanted), None)


def _app_runs(registry: Registry, owner: str | None) -> list[Run]:
    """The fine-tuning runs the app trained that this visitor may see, newest first."""
    runs = [(entry, read_metadata(entry.folder)) for entry in registry.catalog.list_models(owner)
            if entry.folder is not None and entry.name.startswith("runs/")]
    return [(entry, metadata) for entry, metadata in runs
            if metadata.get("origin") == "app" and "task" in (metadata.get("train_config") or {})]


def _siblings(runs: list[Run], newest: Run) -> list[Run]:
    """The runs of `newest`'s experiment, in the order its starts train."""
    config = newest[1]["train_config"]
    found = [(e, m) for e, m in runs if _stamp(e.folder) == _stamp(newest[0].folder)
             and m["train_config"]["task"] == config["task"]
             and m["train_config"].get("train_examples") == config.get("train_examples")]
    return sorted(found, key=lambda run: ORDER.index(_start(run[1])) if _start(run[1]) in ORDER else len(ORDER))


def _stamp(folder: Path) -> list[str]:
    return folder.name.rsplit("-", 2)[-2:]


def _start(metadata: dict[str, Any]) -> str:
    config = metadata["train_config"]
    return WELL_READ if start_of(config, None) == WELL_READ else config.get("init", "pretrained")


@friendly
def last_experiment(registry: Registry, owner: str | None = None) -> Outputs:
    """The newest finished experiment this visitor may see, rebuilt from its runs' records when the page opens:
    its curves, verdict, label-count chart and layer chart stay after a reload (nothing, if there is none)."""
    runs = [(e, m) for e, m in _app_runs(registry, owner) if "test_acc" in final_record(m.get("history") or [])]
    newest = next((run for run in runs if _start(run[1]) == "pretrained"), None)
    if newest is None:
        return {name: gr.skip() for name in ENDED}
    configs, finished = {}, {}
    for _, metadata in _siblings(runs, newest):
        start = _start(metadata)
        configs.setdefault(start, FinetuneConfig.from_dict(metadata["train_config"]))
        finished.setdefault(start, metadata["history"])
    return ended(registry, configs, finished, owner, status="The last experiment here")


def latest_took(registry: Registry, owner: str | None) -> str:
    """How long the latest experiment here took, in all and each run by its start ("" if there is none)."""
    runs = [(e, m) for e, m in _app_runs(registry, owner) if m.get("elapsed")]
    if not runs:
        return ""
    each = [(_start(m), float(m["elapsed"])) for _, m in _siblings(runs, runs[0])]
    parts = ", ".join(f"{clock(took)} ({curves.START_NAMES.get(start, start)})" for start, took in each)
    return (f"The latest experiment here took {clock(sum(took for _, took in each))} of training: {parts}."
            if len(each) > 1 else f"The latest experiment here took {parts} of training.")


def layer_changes(configs: dict) -> dict[str, list[tuple[str, float]]]:
    """How far each part of every start's finished run moved from where it started: the weights it fine-tuned
    for a pre-trained, frozen or well-read start, the run's step-0 snapshot for a random one (a start is skipped
    when its "before" is gone: no snapshot, or a hub model pruned from the cache). `configs` maps each start to its
    run's config."""
    changes = {}
    for start, config in configs.items():
        folders = Path(config.out), Path(config.model)
        times = [weights_time(folder) if has_weights(folder) else 0.0 for folder in folders]
        moved = _moved(str(config.out), config.init == "random", str(config.model), *times)
        if moved is not None:
            changes[start] = list(moved)
    return changes


@functools.lru_cache(maxsize=64)
def _moved(after: str, from_snapshot: bool, model: str, after_time: float, model_time: float
           ) -> tuple[tuple[str, float], ...] | None:
    """One run's change (None when a side is gone), kept per the two weights files' times: every page load
    rebuilds the last experiment's layer chart, and reading both models' weights each time is the slow part."""
    from bert_demo import checkpoint
    from bert_demo.inspection import weight_change
    from bert_demo.training import timeline

    if not after_time:
        return None
    if from_snapshot:
        if 0 not in timeline.steps(Path(after)):
            return None
        before = timeline.load(Path(after), 0)
    elif model_time:
        before = checkpoint.read_weights(Path(model))
    else:
        return None
    return tuple(weight_change.relative_change(before, checkpoint.read_weights(Path(after))))


@friendly
def label_counts(registry: Registry, model: str, task: str, owner: str | None = None) -> Outputs:
    """The chart of the test score (the task's metric) against labelled sentences, over every finished run of
    `model`, and of the well-read start of its shape, on `task` that this visitor may see (the app's and the command
    line's)."""
    from bert_demo.data import labelled

    entry = registry.catalog.resolve(model, owner)
    selected = entry.folder.resolve() if entry.folder else None
    google = entry.config and well_read_model(entry.config.num_hidden_layers, entry.config.hidden_size)
    points: list[tuple[str, int, float]] = []
    if task not in labelled.TASKS:  # a visitor's file: each upload is a task of its own
        return {"ft_counts": curves.label_count_figure(points, empty=UPLOAD_COUNTS)}
    key = {"accuracy": "acc"}.get(labelled.TASKS[task].metric, labelled.TASKS[task].metric)
    size, floor = None, 0.5
    for run in registry.catalog.list_models(owner):
        if run.folder is None or not run.name.startswith("runs/"):
            continue
        metadata = read_metadata(run.folder)
        config, final = metadata.get("train_config") or {}, final_record(metadata.get("history") or [])
        start = start_of(config, selected)
        if config.get("task") != task or f"test_{key}" not in final or start is None:
            continue
        if start == WELL_READ and (not google or hub_id_of(str(config.get("model"))) != google[0]):
            continue  # Google's model of another shape
        if config.get("train_examples") is None and size is None:
            size = len(labelled.load_task(task)["train"])
        points.append((start, config.get("train_examples") or size, float(final[f"test_{key}"])))
        floor = min(floor, final.get("test_majority", floor)) if key == "acc" else 0.0  # F1, MCC: 0 is chance
    return {"ft_counts": curves.label_count_figure(points, METRICS[key], floor)}


def chance(records: list[Record]) -> float | None:
    """The validation split's majority-class accuracy, the line the curves must rise above (None before the first
    validation)."""
    return next((r["majority"] for r in records if r.get("kind") == "val" and "majority" in r), None)
