"""The Fine-tune tab's experiment, which shows what pre-training buys: the layout, its wiring and its handlers.

The experiment fine-tunes the selected model on a labelled task and, with the same data, seed and steps, the same
architecture from random weights (and, if chosen, the selected model with its encoder frozen, and Google's BERT of
the same shape, which read far more text). The runs take the training slot one after the other, as any run does;
their validation curves share one chart while they train. At the end one sentence states the gap (`text.verdict`),
and a second chart plots the test score against the number of labelled sentences over every finished run of this
model (and of Google's of its shape) on this task, so that a visitor who repeats the experiment with 100, 300, 1,000
and all labels sees how many labels pre-training saves (Devlin et al. 2019, §5; Turc et al. 2019). Below the
experiment, questions to the classifier it leaves behind (`classifier`).
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gradio as gr

from bert_demo import plots
from bert_demo.app import text
from bert_demo.app.backend import backend
from bert_demo.app.folders import hub_id_of, weights_time
from bert_demo.app.handlers import Components, Outputs, friendly
from bert_demo.app.job import TrainingJob
from bert_demo.app.pace import checks as count_checks
from bert_demo.app.pace import pace, rounded_up
from bert_demo.app.registry import Registry
from bert_demo.app.slot import WAIT_POLL_S, Ticket
from bert_demo.app.tabs import classifier, train
from bert_demo.app.tabs.classifier import default_classifier, start_of
from bert_demo.app.tabs.train import START_BUSY, START_IDLE, STOP_ACTIVE, STOP_IDLE, UPDATE_EVERY_S
from bert_demo.app.text import WELL_READ
from bert_demo.app.uploads import discard, private_copy
from bert_demo.config import PRESETS, has_weights, read_config, read_metadata
from bert_demo.labelled import FILE_TYPES, TASKS
from bert_demo.records import Record
from bert_demo.train_config import APP_FINETUNE, WELL_READ_VOCAB, FinetuneConfig, well_read_model, well_read_name

ALL = "all"
UPLOAD_COUNTS = "drawn for the listed tasks:<br>an uploaded file is a task of its own"  # the empty chart's note
PIECES_PER_WORD = 1.3  # word pieces a word of English prose makes, about
LABEL_CHOICES = [str(n) if n else ALL for n in APP_FINETUNE["label_counts"]]  # what the radio offers
COMPARISONS = {"random": "the same architecture from random weights", "frozen": "the selected model, encoder frozen",
               WELL_READ: f"Google's BERT of the same shape, which read {APP_FINETUNE['well_read_words']} words "
                          "(from the Hugging Face Hub)"}


def layout(registry: Registry) -> Components:
    """The experiment (left: task, labels, what to compare with; right: live curves, the gap, the label-count chart)
    and, below, questions to a fine-tuned classifier (`classifier.layout`)."""
    with gr.Tab("Fine-tune", id="finetune", elem_id="tab-finetune") as tab:
        gr.Markdown("**What is pre-training for?** Fine-tune the model selected above on labelled sentences, beside "
                    "the same architecture from random weights, with the same data, seed and steps (Devlin et al. "
                    "2019, §4–5). The gap between the curves is what pre-training bought, and it grows with what "
                    "the model read: our models read a few million words (mini-english, quick to fine-tune here) "
                    "or 13 million (small-english); Google's BERTs of the same shapes read 3.3 billion (BERT-Mini "
                    "scores 85.9 on SST-2).")
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                c = {"ft_tab": tab,
                     "ft_task": gr.Dropdown(list(TASKS), value=APP_FINETUNE["task"], label="Task",
                                            elem_id="ft-task", allow_custom_value=True,  # names only: they fit
                                            info="The first four work offline; the GLUE tasks need the Hugging "
                                                 "Face Hub"),
                     "ft_task_about": gr.Markdown(task_about(APP_FINETUNE["task"]), elem_id="ft-task-about"),
                     "ft_upload": gr.File(label=f"…or your own labelled file instead ({', '.join(FILE_TYPES)}: "
                                                "columns text, optional text_b, label)", file_types=list(FILE_TYPES),
                                          type="filepath", elem_id="ft-upload", height=130),
                     "ft_labels": gr.Radio(LABEL_CHOICES, value=str(APP_FINETUNE["train_examples"]),
                                           label="Labelled sentences to train on", elem_id="ft-labels",
                                           info="The first N of a fixed shuffle: repeat with other counts to fill "
                                                "the chart of what pre-training saves"),
                     "ft_compare": gr.CheckboxGroup([(words, init) for init, words in COMPARISONS.items()],
                                                    value=["random"], label="Compare with", elem_id="ft-compare")}
                with gr.Row():
                    c["ft_start"] = gr.Button("Fine-tune and compare", variant="primary", elem_id="ft-start")
                    c["ft_stop"] = gr.Button("Stop", variant="secondary", elem_id="ft-stop", interactive=False)
                c["ft_estimate"] = gr.Markdown(elem_id="ft-estimate")
            with gr.Column(scale=2):
                c["ft_status"] = gr.Markdown(text.FINETUNE_IDLE, elem_id="ft-status")
                c["ft_curves"] = gr.Plot(plots.empty_figure("Accuracy, live while fine-tuning"),
                                         elem_id="ft-curves", show_label=False)
                c["ft_verdict"] = gr.Markdown(elem_id="ft-verdict")
                c["ft_counts"] = gr.Plot(plots.label_count_figure([]), elem_id="ft-counts", show_label=False)
                c["ft_changes"] = gr.Plot(plots.empty_figure("How far each layer moved", height=260),
                                          elem_id="ft-changes", show_label=False)
                gr.Markdown("<small>How far fine-tuning moved each part of the encoder from where it started "
                            "(‖after − before‖ / ‖before‖). Studies of BERT find the top layers move most and the "
                            "bottom ones little (Merchant et al. 2020): here you see what ours do.</small>")
        c.update(classifier.layout(registry))
    return c



def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Fine-tune and compare (no gradio concurrency limit: its runs wait in the registry's line), Stop, the
    label-count chart when the tab opens or the task changes, and, when the page opens, the visitor's own experiment
    followed on (`reopened`)."""
    outputs = [c[name] for name in ("ft_status", "ft_curves", "ft_verdict", "ft_counts", "ft_changes",
                                    "ft_classifier", "ft_stop", "model", "ft_start")]
    c["ft_start"].click(bound(finetune), [c[name] for name in ("model", "ft_task", "ft_upload", "ft_labels",
                                                                "ft_compare")],
                        outputs, api_name="finetune", concurrency_limit=None, trigger_mode="once",
                        show_progress="minimal", show_progress_on=[c["ft_status"]])
    c["ft_stop"].click(bound(stop), None, c["ft_status"], api_visibility="private", queue=False)
    gr.on([c["ft_tab"].select, c["ft_task"].change], bound(opened), [c["model"], c["ft_task"], c["ft_classifier"]],
          [c["ft_counts"], c["ft_classifier"], c["ft_task_about"]], api_visibility="private")
    form = [c[name] for name in ("ft_task", "ft_upload", "ft_labels", "ft_compare")]
    gr.on([c["ft_tab"].select, *(setting.change for setting in form)], bound(estimate), [c["model"], *form],
          c["ft_estimate"], api_visibility="private", trigger_mode="always_last", show_progress="hidden")
    c["page"].load(bound(reopened), None, outputs, api_visibility="private", concurrency_limit=None,
                   show_progress="minimal", show_progress_on=[c["ft_status"]])  # what a reload would otherwise lose


@friendly
def finetune(registry: Registry, model: str, task: str, upload: str | None, labels: str,
             compare: list[str] | None = None, owner: str | None = None) -> Iterator[Outputs]:
    """Fine-tune `model` on `task` (or an uploaded labelled file) with the first `labels` labelled sentences, then
    each start in `compare` ("random", "frozen", "well-read") with the same budget, one after the other in the
    training slot (one place in line for them all); stream one chart of their validation accuracy, and end with the
    gap in a sentence. The slot starts the runs, so a page that reloads finds the experiment again (`reopened`)."""
    starts, stamp = ["pretrained", *_comparisons(compare)], time.strftime("%Y%m%d-%H%M%S")
    copy = _labelled_copy(upload)
    try:
        labelled = str(copy) if copy else None
        configs = {start: _start_config(registry, model, task, _label_count(labels), start, labelled, owner, stamp)
                   for start in starts}  # every refusal (an unreachable hub included) comes before the first run
        ticket = registry.slot.join(configs, owner, cleanup=functools.partial(discard, copy))
    except BaseException:
        discard(copy)
        raise
    yield from follow(registry, ticket, owner)


@friendly
def reopened(registry: Registry, owner: str | None = None) -> Iterator[Outputs]:
    """When the page opens: the visitor's own experiment, waiting in line or training, followed on with Stop enabled
    (a reload loses nothing); else the last experiment here that they may see."""
    ticket = registry.slot.ticket_of(owner)
    if ticket is not None and ticket.fine_tuning:
        yield from follow(registry, ticket, owner)
        return
    outputs, others = last_experiment(registry, owner), registry.slot.others_text(owner)
    if others:  # someone else's run has the slot: said first (the Train tab's watch keeps it up to date)
        ended = outputs["ft_status"]
        outputs["ft_status"] = others if ended == gr.skip() else f"{others}\n\n{ended}"
    yield outputs


def _start_config(registry: Registry, model: str, task: str, labels: int | None, start: str, upload: str | None,
                  owner: str | None, stamp: str):
    """The run of one start: the selected model fine-tuned (or frozen), its architecture from random weights, or
    the well-read model fine-tuned."""
    forms = registry.forms
    if start == WELL_READ:
        return forms.finetune_config(model, task, labels, "pretrained", upload, owner, well_read=True, stamp=stamp)
    return forms.finetune_config(model, task, labels, start, upload, owner, stamp=stamp)


def follow(registry: Registry, ticket: Ticket, owner: str | None) -> Iterator[Outputs]:
    """An experiment's place in line, then each run's curves as it trains, then the gap in a sentence."""
    configs, finished = ticket.configs, {}
    for number, start in enumerate(configs, start=1):
        job = yield from _wait_for_run(registry, ticket, number)
        if job is None:
            yield {"ft_status": "You left the line: the experiment stopped.", "ft_stop": STOP_IDLE,
                   "ft_start": START_IDLE}
            if ticket.error:
                raise ValueError(ticket.error)
            return
        yield from _follow(ticket, job, finished, start, f"Run {number} of {len(configs)}, {plots.STARTS[start]}",
                           len(configs) - number)
        job.thread.join(timeout=10)
        finished[start] = list(job.records)
        if job.done.get("reason") == "error":
            yield {"ft_stop": STOP_IDLE, "ft_start": START_IDLE}
            raise ValueError(f"the {plots.STARTS[start]} run failed: {job.done.get('message')}")
        if job.done.get("reason") != "finished":
            yield {"ft_status": text.job_status(job) + " The experiment stopped here.", "ft_stop": STOP_IDLE,
                   "ft_start": START_IDLE,
                   "ft_curves": plots.finetune_figure(finished, _chance(finished.get("pretrained", [])))}
            return
    yield _ended(registry, configs["pretrained"].model, configs, finished, owner)


def _wait_for_run(registry: Registry, ticket: Ticket, number: int) -> Iterator[Outputs]:
    """The place in line until the experiment's `number`th run starts; that run, or None if it never will (the
    visitor left the line, or a run could not start)."""
    while (job := ticket.wait_for_run(number, timeout=WAIT_POLL_S)) is None and not ticket.ended.is_set():
        ticket.followed()
        yield {"ft_status": registry.slot.waiting_text(ticket) or "Starting the next run…", "ft_stop": STOP_ACTIVE,
               "ft_start": START_BUSY}
    return job


def _follow(ticket: Ticket, job: TrainingJob, finished: dict[str, list[Record]], start: str, title: str,
            rest: int) -> Iterator[Outputs]:
    """The status line and the chart (the finished runs' curves and this one's) about once a second; `rest` runs
    of the experiment come after this one."""
    seen, last = 0, 0.0
    yield {"ft_status": f"{title}: {text.job_status(job)}", "ft_stop": STOP_ACTIVE, "ft_start": START_BUSY,
           "ft_verdict": ""}
    while job.done is None:
        ticket.followed()
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            yield {"ft_status": f"{title}: {text.job_status(job)}{_experiment_left(job, rest)}",
                   "ft_curves": plots.finetune_figure({**finished, start: job.records}, _chance(job.records))}


def _experiment_left(job: TrainingJob, rest: int) -> str:
    """The experiment's time left, its runs to come each taken to last as long as this one at its measured pace."""
    left = job.seconds_left
    if not rest or left is None:
        return ""
    return f" · about {text.clock(left + rest * job.seconds_total)} left for the whole experiment"


def _ended(registry: Registry, model: str, configs: dict, finished: dict[str, list[Record]], owner: str | None,
           status: str = "Done") -> Outputs:
    """The last update: both curves, the sentence with the gap, the label-count chart, the new classifier chosen."""
    pretrained, google = configs["pretrained"], configs.get(WELL_READ)
    well_read = google and well_read_name(hub_id_of(google.model))
    newest = f"runs/{Path(pretrained.out).name}"
    runs = f"{len(configs)} runs of {pretrained.steps} steps each" if len(configs) > 1 else \
        f"1 run of {pretrained.steps} steps"
    return {"ft_status": f"{status}: {runs}. The fine-tuned model is saved as {newest}: try it below.",
            "ft_stop": STOP_IDLE, "ft_start": START_IDLE,
            "ft_curves": plots.finetune_figure(finished, _chance(finished["pretrained"])),
            "ft_verdict": text.verdict(finished, pretrained.train_examples, pretrained.outside, well_read),
            "ft_counts": label_counts(registry, model, pretrained.task, owner)["ft_counts"],
            "ft_changes": plots.layer_change_figure(layer_changes(configs)),
            "ft_classifier": gr.Dropdown(choices=registry.catalog.classifier_choices(owner), value=newest),
            "model": gr.Dropdown(choices=registry.catalog.choices(owner))}


@friendly
def last_experiment(registry: Registry, owner: str | None = None) -> Outputs:
    """The newest finished experiment this visitor may see, rebuilt from its runs' records when the page opens:
    its curves, verdict, label-count chart and layer chart stay after a reload (nothing, if there is none)."""
    runs = [(entry, read_metadata(entry.folder)) for entry in registry.catalog.list_models(owner)
            if entry.folder is not None and entry.name.startswith("runs/")]
    runs = [(entry, metadata) for entry, metadata in runs if metadata.get("origin") == "app"
            and "task" in (metadata.get("train_config") or {}) and "test_acc" in text.final_record(
                metadata.get("history") or [])]
    newest = next(((e, m) for e, m in runs if m["train_config"].get("init") == "pretrained"
                   and start_of(m["train_config"], None) != WELL_READ), None)
    if newest is None:
        return {name: gr.skip() for name in ("ft_status", "ft_curves", "ft_verdict", "ft_counts", "ft_changes",
                                             "ft_classifier", "ft_stop", "model")}
    stamp = newest[0].folder.name.rsplit("-", 2)[-2:]  # the experiment's runs share the end of their names
    siblings = [(e, m) for e, m in runs if e.folder.name.rsplit("-", 2)[-2:] == stamp
                and m["train_config"]["task"] == newest[1]["train_config"]["task"]
                and m["train_config"].get("train_examples") == newest[1]["train_config"].get("train_examples")]
    configs, finished = {}, {}
    for _, metadata in siblings:
        config = FinetuneConfig.from_dict(metadata["train_config"])
        start = WELL_READ if start_of(metadata["train_config"], None) == WELL_READ else config.init
        configs.setdefault(start, config)
        finished.setdefault(start, metadata["history"])
    order = [start for start in ("pretrained", "random", "frozen", WELL_READ) if start in configs]  # as it ran
    configs, finished = {start: configs[start] for start in order}, {start: finished[start] for start in order}
    return _ended(registry, newest[1]["train_config"]["model"], configs, finished, owner,
                  status="The last experiment here")


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
    checkpoint, timeline = backend().checkpoint, backend().timeline
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
    return tuple(backend().weight_change.relative_change(before, checkpoint.read_weights(Path(after))))


@friendly
def label_counts(registry: Registry, model: str, task: str, owner: str | None = None) -> Outputs:
    """The chart of the test score (the task's metric) against labelled sentences, over every finished run of
    `model`, and of the well-read start of its shape, on `task` that this visitor may see (the app's and the command
    line's)."""
    entry = registry.catalog.resolve(model, owner)
    selected = entry.folder.resolve() if entry.folder else None
    google = entry.config and well_read_model(entry.config.num_hidden_layers, entry.config.hidden_size)
    points: list[tuple[str, int, float]] = []
    if task not in backend().labelled.TASKS:  # a visitor's file: each upload is a task of its own
        return {"ft_counts": plots.label_count_figure(points, empty=UPLOAD_COUNTS)}
    key = {"accuracy": "acc"}.get(backend().labelled.TASKS[task].metric, backend().labelled.TASKS[task].metric)
    size, floor = None, 0.5
    for run in registry.catalog.list_models(owner):
        if run.folder is None or not run.name.startswith("runs/"):
            continue
        metadata = read_metadata(run.folder)
        config, final = metadata.get("train_config") or {}, text.final_record(metadata.get("history") or [])
        start = start_of(config, selected)
        if config.get("task") != task or f"test_{key}" not in final or start is None:
            continue
        if start == WELL_READ and (not google or hub_id_of(str(config.get("model"))) != google[0]):
            continue  # Google's model of another shape
        if config.get("train_examples") is None and size is None:
            size = _train_size(task)
        points.append((start, config.get("train_examples") or size, float(final[f"test_{key}"])))
        floor = min(floor, final.get("test_majority", floor)) if key == "acc" else 0.0  # F1, MCC: 0 is chance
    return {"ft_counts": plots.label_count_figure(points, text.METRICS[key], floor)}


def _train_size(task: str) -> int:
    return len(backend().labelled.load_task(task)["train"])


def stop(registry: Registry, owner: str | None) -> Outputs:
    """Stop the visitor's run (the experiment ends with it), or take them out of the line."""
    return {"ft_status": train.stop(registry, owner)["status"]}


@friendly
def opened(registry: Registry, model: str | None, task: str | None, chosen: str | None,
           owner: str | None = None) -> Outputs:
    """When the tab opens or the task changes: what the task is, the label-count chart for this model and task,
    and the fine-tuned models this visitor may ask (the one chosen stays chosen)."""
    choices = registry.catalog.classifier_choices(owner)
    names = [name for _, name in choices]
    counts = label_counts(registry, model, task, owner) if model and task else {"ft_counts": gr.skip()}
    return {**counts, "ft_classifier": gr.Dropdown(choices=choices, value=chosen if chosen in names else
                                                   default_classifier(registry, owner)),
            "ft_task_about": task_about(task)}


def task_about(task: str | None) -> str:
    """What a task's sentences are, under its name (in the list, a whole sentence was cut off, and on a phone ran
    under the list's arrow)."""
    about = TASKS[task].about if task in TASKS else "your own labelled file" if task else ""
    return f"<small>{about}</small>" if about else ""


@friendly
def estimate(registry: Registry, model: str | None, task: str | None, upload: str | None, labels: str,
             compare: list[str] | None = None, owner: str | None = None) -> Outputs:
    """How long the experiment the form describes would take on this machine now, its runs timed before the visitor
    starts it (`pace`), whether the machine is busy, and how long the latest fine-tuning runs here took, each named
    by its start. Settings that are not allowed get no estimate but the reason (`_not_here`)."""
    latest = _latest_runs(registry, owner)
    try:
        starts = ["pretrained", *_comparisons(compare)]
        config = registry.forms.finetune_config(model, task, _label_count(labels), "pretrained", upload, owner)
        data = backend().labelled.load_file(upload) if upload else backend().labelled.load_task(task)
        shape = read_config(Path(config.model))
    except ValueError as exc:
        return {"ft_estimate": _not_here(registry, exc, task, upload, labels, owner)
                + (f"<br><small>{latest}</small>" if latest else "")}
    length = min(config.max_seq_len, _typical_length(data["train"]))
    validation, checks = len(data["validation"]), count_checks(config.steps, config.eval_every)
    final = _final_examples(config, data)
    paces = [pace(shape.with_vocab(WELL_READ_VOCAB) if start == WELL_READ else shape,
                  config.batch_size, length, config.precision, config.device, classifier=True) for start in starts]
    seconds = sum(measured.seconds(config.steps, checks, validation, final) for measured in paces)
    runs = f"{len(starts)} runs" if len(starts) > 1 else "1 run"
    parts = (f"{runs} of {config.steps} steps at {text.seconds(paces[0].step_s)} each, {checks} checks on "
             f"{validation:,} held-out sentences and {final:,} test sentences at the end")
    job = registry.slot.job
    line = text.estimate_text("The experiment", seconds, parts, paces[0], job is not None and job.running,
                              after=", after loading each model")
    return {"ft_estimate": line + (f"<br><small>{latest}</small>" if latest else "")}


def _not_here(registry: Registry, reason: ValueError, task: str | None, upload: str | None, labels: str,
              owner: str | None) -> str:
    """Why the form's experiment cannot run, said before Start is pressed; where it is the model (the shipped
    small-english is bigger than a CPU trains live), the start that can: FinetuneConfig's default, mini-english."""
    said = f"{reason}"
    quick = FinetuneConfig.model
    try:
        registry.forms.finetune_config(quick, task, _label_count(labels), "pretrained", upload, owner)
    except ValueError:
        return f"<small>{said}</small>"
    return f"<small>{said}: choose **{Path(quick).name}** in the Model box above to fine-tune it here.</small>"


def _final_examples(config: FinetuneConfig, data) -> int:
    """The sentences a run scores at its end besides its validation split: the task's test split and, where the
    run has one, the other domain's."""
    outside = config.outside_task
    return len(data["test"]) + (len(backend().labelled.load_task(outside)["test"]) if outside else 0)


def _typical_length(train) -> int:
    """A training batch's length in tokens, about: the mean example's words (both sentences), as word pieces."""
    words = [len(str(a).split()) + len(str(b or "").split()) for a, b in zip(train["text"], train["text_b"])]
    return rounded_up(PIECES_PER_WORD * sum(words) / max(len(words), 1) + 3)  # [CLS] and the [SEP]s


def _latest_runs(registry: Registry, owner: str | None) -> str:
    """How long the latest fine-tuning runs here took, each named by its start, or ""."""
    took = []
    for entry in registry.catalog.list_models(owner):
        metadata = read_metadata(entry.folder) if entry.folder is not None and entry.name.startswith("runs/") else {}
        config = metadata.get("train_config") or {}
        if "task" in config and metadata.get("elapsed"):
            start = start_of(config, Path(config["model"]).resolve()) or config.get("init")
            took.append(f"{text.clock(float(metadata['elapsed']))} ({plots.STARTS.get(start, start)})")
    return f"The latest fine-tuning runs here took {', '.join(took[:4])}." if took else ""


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


def _chance(records: list[Record]) -> float | None:
    """The validation split's majority-class accuracy, the line the curves must rise above (None before the first
    validation)."""
    return next((r["majority"] for r in records if r.get("kind") == "val" and "majority" in r), None)


def _labelled_copy(upload: str | None) -> Path | None:
    """The visitor's labelled file copied under a name of ours for the experiment's runs, deleted when the
    experiment ends (a killed app's copies are swept when it starts again)."""
    if not upload:
        return None
    return private_copy(Path(upload), f"labelled{Path(upload).suffix.lower()}", backend().labelled.MAX_FILE_BYTES)
