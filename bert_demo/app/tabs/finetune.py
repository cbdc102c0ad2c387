"""The Fine-tune tab's experiment, which shows what pre-training buys: the layout, its wiring and its handlers.

The experiment fine-tunes a pre-trained model on a labelled task and, with the same data, seed and steps, the same
architecture from random weights (and, if chosen, the model with its encoder frozen, and Google's BERT of the same
shape, which read far more text). The model is the tab's own choice: the one selected above where this machine can
fine-tune it, else the start `FinetuneConfig` names (mini-english: a CPU fine-tunes the tiny and mini shapes only).
The runs take the training slot one after the other, as any run does; their validation curves share one chart while
they train. At the end one sentence states the gap (`verdict.verdict`), and a second chart plots the test score
against the number of labelled sentences over every finished run of this model (and of Google's of its shape) on
this task, so that a visitor who repeats the experiment with 100, 300, 1,000 and all labels sees how many labels
pre-training saves (Devlin et al. 2019, §5; Turc et al. 2019). How an experiment ended is read back from its runs
(`finetune_runs`); below it, questions to the classifier it leaves behind (`classifier`).
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from bert_demo.app import text
from bert_demo.app.folders import SHIPPED, training_words
from bert_demo.app.handlers import Components, Outputs, friendly
from bert_demo.app.policy import APP_FINETUNE, WELL_READ_VOCAB
from bert_demo.app.queries import Query, ask, inputs, takes
from bert_demo.app.runs import estimates
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.slot import WAIT_POLL_S, Ticket
from bert_demo.app.registry import Registry
from bert_demo.app.uploads import discard, private_copy
from bert_demo.app.tabs import classifier, train, train_views
from bert_demo.app.tabs.classifier import default_classifier
from bert_demo.app.tabs.finetune_runs import chance, ended, label_counts, last_experiment, latest_took
from bert_demo.app.tabs.train import START_BUSY, START_IDLE, STOP_ACTIVE, STOP_IDLE, UPDATE_EVERY_S
from bert_demo.app.verdict import WELL_READ
from bert_demo.data.labelled import FILE_TYPES, TASKS
from bert_demo.inspection import curves
from bert_demo.training.records import Record
from bert_demo.training.settings import FinetuneConfig

ALL = "all"
IDLE = "Press **Fine-tune and compare**."  # the status line before any experiment
LABEL_CHOICES = [str(n) if n else ALL for n in APP_FINETUNE["label_counts"]]  # what the radio offers
COMPARISONS = {"random": "the same architecture from random weights", "frozen": "the same model, encoder frozen",
               WELL_READ: f"Google's BERT of the same shape, which read {APP_FINETUNE['well_read_words']} words "
                          "(from the Hugging Face Hub)"}
INTRO = ("**What is pre-training for?** Fine-tune a pre-trained model on labelled sentences, beside the same "
         "architecture from random weights, with the same data, seed and steps (Devlin et al. 2019, §4–5). The gap "
         "between the curves is what pre-training bought, and it grows with what the model read: mini-english "
         f"read {text.words_read(training_words(SHIPPED / 'mini-english'))} (quick to fine-tune here), "
         f"small-english {text.words_read(training_words(SHIPPED / 'small-english'))}; Google's BERTs of the same "
         "shapes read "
         f"{APP_FINETUNE['well_read_words']} (BERT-Mini scores 85.9 on SST-2).")


@dataclass(frozen=True)
class Experiment(Query):
    """The experiment the form describes: the model to fine-tune, the task (or a labelled file), how many labelled
    sentences to train on, and the starts to compare with."""

    PREFIX = "ft"
    model: str | None = ask(None, "Model to fine-tune", info="The model selected above where this machine can "
                                                             "fine-tune it (on a CPU: the tiny and mini shapes)")
    task: str = ask(APP_FINETUNE["task"], "Task", choices=list(TASKS),
                    info="The first four work offline; the GLUE tasks need the Hugging Face Hub")
    upload: str | None = ask(None, f"…or your own labelled file ({', '.join(FILE_TYPES)}: columns text, optional "
                                   "text_b, label)")
    labels: str = ask(str(APP_FINETUNE["train_examples"]), "Labelled sentences to train on", choices=LABEL_CHOICES,
                      info="The first N of a fixed shuffle: repeat with other counts to fill the chart of what "
                           "pre-training saves")
    compare: tuple[str, ...] = ask(("random",), "Compare with",
                                   choices=[(words, init) for init, words in COMPARISONS.items()])


FOLLOWED = ("ft_status", "ft_curves", "ft_verdict", "ft_counts", "ft_changes", "ft_classifier", "ft_stop", "model",
            "ft_start", "ft_model", "ft_estimate")  # what the experiment's stream updates


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#ft-upload .upload-container { padding-top: 1.8em; }  /* below the label */
"""


class FinetuneParts(classifier.ClassifierParts):
    """The Fine-tune tab's components, by the names its handlers answer with (and, below the experiment, the
    classifier's)."""

    ft_tab: gr.Tab
    ft_model: gr.Dropdown
    ft_task: gr.Dropdown
    ft_task_about: gr.Markdown
    ft_upload: gr.File
    ft_labels: gr.Radio
    ft_compare: gr.CheckboxGroup
    ft_start: gr.Button
    ft_stop: gr.Button
    ft_estimate: gr.Markdown
    ft_slot_busy: gr.Markdown
    ft_status: gr.Markdown
    ft_curves: gr.Plot
    ft_verdict: gr.Markdown
    ft_counts: gr.Plot
    ft_changes: gr.Plot


def layout(registry: Registry) -> FinetuneParts:
    """The experiment (left: the model, task, labels, what to compare with; right: live curves, the gap, the
    label-count chart) and, below, questions to a fine-tuned classifier (`classifier.layout`)."""
    with gr.Tab("Fine-tune", id="finetune", elem_id="tab-finetune") as tab:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                c = {"ft_tab": tab, **_form(registry)}
                with gr.Row():
                    c["ft_start"] = gr.Button("Fine-tune and compare", variant="primary", elem_id="ft-start")
                    c["ft_stop"] = gr.Button("Stop", variant="secondary", elem_id="ft-stop", interactive=False)
                c["ft_estimate"] = gr.Markdown(elem_id="ft-estimate")
            with gr.Column(scale=2):
                c["ft_slot_busy"] = gr.Markdown(visible=False, elem_id="ft-slot-busy")  # the Train tab's watch
                c["ft_status"] = gr.Markdown(IDLE, elem_id="ft-status")
                c["ft_curves"] = gr.Plot(curves.empty_figure("Accuracy, live while fine-tuning"),
                                         elem_id="ft-curves", show_label=False)
                c["ft_verdict"] = gr.Markdown(elem_id="ft-verdict")
                c["ft_counts"] = gr.Plot(curves.label_count_figure([]), elem_id="ft-counts", show_label=False)
                c["ft_changes"] = gr.Plot(curves.empty_figure("How far each layer moved", height=260),
                                          elem_id="ft-changes", show_label=False)
                gr.Markdown("<small>How far fine-tuning moved each part of the encoder from where it started "
                            "(‖after − before‖ / ‖before‖). Studies of BERT find the top layers move most and the "
                            "bottom ones little (Merchant et al. 2020): here you see what ours do.</small>")
        c.update(classifier.layout(registry))
    return c


def _form(registry: Registry) -> Components:
    """The model to fine-tune, the task (or a labelled file), the labels to train on, and the starts to compare."""
    return {
        "ft_model": Experiment.input("model", gr.Dropdown, choices=registry.catalog.choices(),
                                     value=model_to_tune(registry, None), allow_custom_value=True),
        "ft_task": Experiment.input("task", gr.Dropdown, allow_custom_value=True),  # names only: they fit
        "ft_task_about": gr.Markdown(task_about(APP_FINETUNE["task"]), elem_id="ft-task-about"),
        "ft_upload": Experiment.input("upload", gr.File, file_types=list(FILE_TYPES), type="filepath", height=160),
        "ft_labels": Experiment.input("labels", gr.Radio),
        "ft_compare": Experiment.input("compare", gr.CheckboxGroup)}


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Fine-tune and compare (no gradio concurrency limit: its runs wait in the registry's line), then the estimate
    again; Stop; the label-count chart when the tab opens, the model or the task changes; the model to fine-tune
    when the one selected above changes; and, when the page opens, the visitor's own experiment followed on
    (`reopened`)."""
    outputs = [c[name] for name in FOLLOWED]
    form = inputs(c, finetune)
    started = c["ft_start"].click(bound(finetune), form, outputs, api_name="finetune", concurrency_limit=None,
                                  trigger_mode="once", show_progress="minimal", show_progress_on=[c["ft_status"]])
    started.then(bound(estimate), form, c["ft_estimate"], api_visibility="private", show_progress="hidden")
    c["ft_stop"].click(bound(stop), None, c["ft_status"], api_visibility="private", queue=False)
    gr.on([c["ft_tab"].select, c["ft_task"].change, c["ft_model"].change], bound(opened),
          [c["ft_model"], c["ft_task"], c["ft_classifier"]], [c["ft_counts"], c["ft_classifier"], c["ft_task_about"]],
          api_visibility="private")
    gr.on([c["ft_tab"].select, *(setting.change for setting in form)], bound(estimate), form, c["ft_estimate"],
          api_visibility="private", trigger_mode="always_last", show_progress="hidden")
    c["model"].change(bound(model_selected), c["model"], c["ft_model"], api_visibility="private")
    c["page"].load(bound(reopened), None, outputs, api_visibility="private", concurrency_limit=None,
                   show_progress="minimal", show_progress_on=[c["ft_status"]])  # what a reload would otherwise lose


def model_to_tune(registry: Registry, selected: str | None, owner: str | None = None) -> str | None:
    """What the tab offers to fine-tune: the model `selected` above (default: the one the page opens on) where this
    machine can fine-tune it, else the start `FinetuneConfig` names where it can (mini-english), else `selected`
    (the estimate then says why it cannot)."""
    selected = selected or registry.catalog.default_model(owner)
    for name in (selected, FinetuneConfig.model):
        if name and registry.forms.fine_tunable(name, owner):
            return name
    return selected


def model_selected(registry: Registry, model: str | None, owner: str | None = None) -> Outputs:
    """When the model selected above changes, the tab fine-tunes it too, where this machine can."""
    return {"ft_model": model if model and registry.forms.fine_tunable(model, owner) else gr.skip()}


@friendly
@takes(experiment=Experiment)
def finetune(registry: Registry, experiment: Experiment, owner: str | None = None) -> Iterator[Outputs]:
    """Fine-tune the model on the task (or an uploaded labelled file) with the first few labelled sentences the
    experiment names, then each start it compares with ("random", "frozen", "well-read") with the same budget, one
    after the other in the training slot (one place in line for them all); stream one chart of their validation
    accuracy, and end with the gap in a sentence. The slot starts the runs, so a page that reloads finds the
    experiment again (`reopened`)."""
    starts, stamp = ["pretrained", *_comparisons(experiment.compare)], time.strftime("%Y%m%d-%H%M%S")
    copy = _labelled_copy(experiment.upload)
    try:
        labelled = replace(experiment, upload=str(copy) if copy else None)
        configs = {start: _start_config(registry, labelled, start, owner, stamp)
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
    yield last_experiment(registry, owner)  # someone else's run in the slot: the Train tab's watch says it


def _start_config(registry: Registry, experiment: Experiment, start: str, owner: str | None, stamp: str):
    """The run of one start: the selected model fine-tuned (or frozen), its architecture from random weights, or
    the well-read model fine-tuned."""
    asked = (experiment.model, experiment.task, _label_count(experiment.labels))
    if start == WELL_READ:
        return registry.forms.finetune_config(*asked, "pretrained", experiment.upload, owner, well_read=True,
                                              stamp=stamp)
    return registry.forms.finetune_config(*asked, start, experiment.upload, owner, stamp=stamp)


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
        yield from _follow(ticket, job, finished, start)
        job.thread.join(timeout=10)
        finished[start] = list(job.records)
        if job.done.get("reason") == "error":
            yield {"ft_stop": STOP_IDLE, "ft_start": START_IDLE}
            raise ValueError(f"the {curves.START_NAMES[start]} run failed: {job.done.get('message')}")
        if job.done.get("reason") != "finished":
            yield {"ft_status": estimates.job_status(job) + " The experiment stopped here.", "ft_stop": STOP_IDLE,
                   "ft_start": START_IDLE, "ft_estimate": _small(latest_took(registry, owner)),
                   "ft_curves": curves.finetune_figure(finished, chance(finished.get("pretrained", [])))}
            return
    yield {**ended(registry, configs, finished, owner), "ft_estimate": _small(latest_took(registry, owner))}


def _wait_for_run(registry: Registry, ticket: Ticket, number: int) -> Iterator[Outputs]:
    """The place in line until the experiment's `number`th run starts; that run, or None if it never will (the
    visitor left the line, or a run could not start)."""
    while (job := ticket.wait_for_run(number, timeout=WAIT_POLL_S)) is None and not ticket.ended.is_set():
        ticket.followed()
        yield {"ft_status": train_views.waiting_text(registry.slot.place(ticket), "Starting the next run…"),
               "ft_stop": STOP_ACTIVE, "ft_start": START_BUSY}
    return job


def _follow(ticket: Ticket, job: TrainingJob, finished: dict[str, list[Record]], start: str) -> Iterator[Outputs]:
    """The status line, the line under Start (the experiment's whole time at its runs' pace) and the chart (the
    finished runs' curves and this one's) about once a second."""
    runs, number = len(ticket.configs), len(ticket.jobs)
    title, rest = f"Run {number} of {runs}, {curves.START_NAMES[start]}", runs - number
    seen, last = 0, 0.0
    yield {"ft_status": f"{title}: {estimates.job_status(job)}", "ft_stop": STOP_ACTIVE, "ft_start": START_BUSY,
           "ft_verdict": ""}
    while job.done is None:
        ticket.followed()
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            left = (f" · about {estimates.clock(estimates.experiment_left(job, rest))} left for the whole experiment"
                    if rest and job.seconds_left is not None else "")
            line = estimates.experiment_line(ticket.jobs, runs)
            yield {"ft_status": f"{title}: {estimates.job_status(job)}{left}",
                   "ft_curves": curves.finetune_figure({**finished, start: job.records}, chance(job.records)),
                   **({"ft_estimate": line} if line else {})}


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
@takes(experiment=Experiment)
def estimate(registry: Registry, experiment: Experiment, owner: str | None = None) -> Outputs:
    """How long the experiment the form describes would take on this machine now (`estimates.forecast`: the pace of
    the run training now where it has the same shape, else a few of its steps timed), whether the machine is busy,
    and how long the latest experiment here took; on ZeroGPU, the length of its runs' GPU calls. Settings that are
    not allowed get no estimate but the reason (`_not_here`)."""
    from bert_demo.data import labelled

    latest = _small(latest_took(registry, owner))
    model, task, upload, labels = experiment.model, experiment.task, experiment.upload, experiment.labels
    try:
        starts = ["pretrained", *_comparisons(experiment.compare)]
        config = registry.forms.finetune_config(model, task, _label_count(labels), "pretrained", upload, owner)
        planned = estimates.plan(config, labelled.load_file(upload) if upload else None)
    except ValueError as exc:
        return {"ft_estimate": _not_here(registry, exc, task, upload, labels, owner) + latest}
    if registry.slot.gpu_call is not None:  # one call on ZeroGPU a run: their lengths, asked before each starts
        return {"ft_estimate": estimates.call_text("The experiment", [config] * len(starts),
                                                   f"{len(starts)} run{'s' if len(starts) > 1 else ''} of "
                                                   f"{config.steps} steps", "experiment") + latest}
    plans = [_well_read_plan(planned) if start == WELL_READ else planned for start in starts]
    seconds, first = estimates.forecast(registry.slot.job, plans)
    runs = f"{len(starts)} runs" if len(starts) > 1 else "1 run"
    parts = (f"{runs} of {planned.steps} steps at {estimates.seconds_text(first.step_s)} each, {planned.checks} "
             f"checks on {planned.per_check:,} held-out sentences and {planned.final:,} test sentences at the end")
    job = registry.slot.job
    line = estimates.estimate_text("The experiment", seconds, parts, first, job is not None and job.running,
                                   after=", after loading each model")
    return {"ft_estimate": line + latest}


def _well_read_plan(planned: estimates.Plan) -> estimates.Plan:
    """The selected model's plan for the well-read start: Google's BERT of its shape, with Google's vocabulary."""
    shape = planned.shape
    return replace(planned, shape=replace(shape, model=shape.model.with_vocab(WELL_READ_VOCAB)))


def _small(line: str) -> str:
    return f"<br><small>{line}</small>" if line else ""


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
    return f"<small>{said}: choose **{Path(quick).name}** as the model to fine-tune here.</small>"


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


def _labelled_copy(upload: str | None) -> Path | None:
    """The visitor's labelled file copied under a name of ours for the experiment's runs, deleted when the
    experiment ends (a killed app's copies are swept when it starts again)."""
    from bert_demo.data import labelled

    if not upload:
        return None
    return private_copy(Path(upload), f"labelled{Path(upload).suffix.lower()}", labelled.MAX_FILE_BYTES)
