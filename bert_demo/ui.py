"""The Gradio app: five tabs wired to the backend (registry, inference, trainer records, plots).

Nothing here computes anything about a model: every handler asks `Registry` for a model or a run, calls one
function of `bert_demo.inference` or `bert_demo.plots`, and shapes the answer for a component. Each backend action
is a named API endpoint (/train, /fill_mask, /next_sentence, /attention); helper events are private.
"""
from __future__ import annotations

import functools
import inspect
import logging
import time
from typing import Any

import gradio as gr

from bert_demo import plots
from bert_demo.config import LIMITS
from bert_demo.registry import CORPORA, DEFAULTS, Registry, TrainingJob, import_backend

log = logging.getLogger(__name__)

MAX_LABELS = 6  # ranked lists shown for the first masks of a sentence
UPDATE_EVERY_S = 1.0  # how often the training stream sends new charts
QUEUE_SIZE = 32
VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT = "one head", "average of the heads", "rollout up to this layer"
PROBE = "the [MASK] of the united states is the head of state."  # TrainConfig.probe's default
PROBE_LABEL = f"Probe: guesses for “{PROBE}”"

# Chosen for the shipped model: the first five it gets right (names and set phrases of its news), the last three show
# its limits (general knowledge twice, then a sentence with no context). tests/test_shipped_model.py checks each claim.
FILL_EXAMPLES = [
    ["donald [MASK] was sworn in as president."],
    ["the white [MASK] press secretary said."],
    ["the prime [MASK] said the talks would continue."],
    ["prime minister theresa [MASK] said on tuesday."],
    ["north korea fired a ballistic [MASK]."],
    ["paris is the capital of [MASK]."],
    ["he scored two [MASK] in the second half."],
    ["the [MASK] sat on the [MASK]."],
]
NSP_EXAMPLES = [  # (A, B): two real continuations, three random pairs, then two continuations the model misses
    ["The president signed the executive order on Friday.", "The order bans travel from seven countries."],
    ["She studied physics at the university.", "After graduating, she worked as a research assistant."],
    ["The president signed the executive order on Friday.", "The striker scored in the 90th minute."],
    ["She studied physics at the university.", "Shares rose by five percent after the announcement."],
    ["The storm hit the coast on Monday night.", "Photosynthesis turns light into chemical energy."],
    ["The storm hit the coast on Monday night.", "By morning, thousands of homes had no power."],
    ["The city was founded by the Romans.", "It became an important trading centre in the Middle Ages."],
]
NSP_LABELS = ["continuation: executive order → travel ban", "continuation: physics → graduate",
              "random: executive order → football", "random: physics → shares",
              "random: storm → photosynthesis", "continuation it misses: storm → no power",
              "continuation it misses: Romans → Middle Ages"]

MISSILE = ["north korea fired a ballistic missile on sunday.", "the united states and japan condemned the test."]
ORDER = ["the president signed the executive order on friday.", "the order bans travel from seven countries."]
ROMANS = ["the city was founded by the romans.", "it became an important trading centre in the middle ages."]
ATTENTION_EXAMPLES = [  # (A, B, layer, head, view, hide [CLS]/[SEP]): heads of the shipped model with a clear job
    [*MISSILE, 2, 4, VIEW_HEAD, False],
    [*MISSILE, 2, 2, VIEW_HEAD, False],
    [*MISSILE, 2, 1, VIEW_HEAD, True],
    [*ORDER, 3, 3, VIEW_HEAD, True],
    [*ROMANS, 4, 1, VIEW_ROLLOUT, True],
]
ATTENTION_LABELS = ["layer 2, head 4: the previous token", "layer 2, head 2: the next token",
                    "layer 2, head 1: “fired” looks at “test”",
                    "layer 3, head 3: most words look at “order” or “travel”",
                    "rollout: what flows where after 4 layers"]

INTRO = """# BERT, from scratch
Pre-train a small BERT on real text, then look inside it: what it guesses for a `[MASK]`, whether one sentence
follows another, and where each attention head looks. Everything runs on this machine's CPU (or GPU when present).
"""

EXPLAINER = """### How BERT is built (Devlin et al. 2019)
1. **Embeddings.** Text is split into WordPiece tokens; `[CLS]` starts the input and `[SEP]` ends each sentence.
   Each token's vector is the sum of a *token* embedding, a *position* embedding and a *segment* (sentence A or B)
   embedding.
2. **Encoder.** A stack of identical layers. In each, **multi-head self-attention** lets every token mix in
   information from every other token (each head with its own pattern), then a **feed-forward** network transforms
   each token on its own; both parts have a residual connection and LayerNorm.
3. **Masked-LM head.** 15% of the tokens are hidden during pre-training and the model must guess them from both
   sides of the context.
4. **Next-sentence head.** The final `[CLS]` vector (through the *pooler*) predicts whether sentence B really
   followed sentence A, or is a random sentence.

Pre-training teaches both tasks at once: watch the two losses fall in the Train tab.
"""

CSS = """
#status { min-height: 2.2em; }
#status p { font-size: 1.05em; margin: 0.2em 0; }
#model-summary p { margin: 0.45em 0 0 0; color: var(--body-text-color-subdued); }
.tab-links button { max-width: 16em; }
#fill-sentence .empty, #probe .empty, #fill-label-0 .empty, #nsp-result .empty {
  min-height: 5rem !important; height: 5rem !important; }
"""


def launch_kwargs(registry: Registry | None = None) -> dict[str, Any]:
    """What `demo.launch()` needs besides host and port (gradio 6 takes css and theme here)."""
    caps = (registry or Registry()).caps
    theme = gr.themes.Default(font=["system-ui", "Segoe UI", "Roboto", "Helvetica", "Arial", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])
    return {"css": CSS, "theme": theme, "max_file_size": caps.max_upload_bytes}


def _friendly(fn):
    """Import the backend first (see `import_backend`), and turn its ValueError into a gr.Error toast with its
    message; never show a traceback."""

    def translate(exc: Exception) -> gr.Error:
        if isinstance(exc, ValueError):  # a refused input: one log line, not a traceback (visitors could flood it)
            message = str(exc)
            log.warning("%s refused: %s", fn.__name__, message[:200])
            return gr.Error(message[:1].upper() + message[1:], print_exception=False)
        log.exception("unexpected error in %s", fn.__name__)
        return gr.Error(f"Something went wrong ({type(exc).__name__}). Try again, or choose another model.")

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            try:
                import_backend()
                yield from fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc) from None
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            import_backend()
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001
            raise translate(exc) from None
    return wrapper


def build_demo(registry: Registry | None = None) -> gr.Blocks:
    """The whole app. `registry` decides where models come from (tests pass one pointing at a temp folder)."""
    registry = registry or Registry()
    caps = registry.caps

    # ------------------------------------------------------------------------------------------------------------
    # handlers: each is one backend call, shaped for its components

    # bert_demo.inference (torch) is imported inside the handlers: the page is served before torch has loaded

    @_friendly
    def fill(model_name: str, text: str, top_k: float):
        from bert_demo.inference import fill_in_masks, fill_mask

        loaded = registry.load(model_name)
        predictions = fill_mask(loaded.model, loaded.tokenizer, text, int(top_k))
        spans = fill_in_masks(text.strip(), predictions)
        colors = {label: "#bfdbfe" for _, label in spans if label}
        more = len(predictions) - MAX_LABELS
        caption = "Best guesses filled in (the label is the model's probability)"
        if more > 0:
            caption += f"; ranked lists below for the first {MAX_LABELS} of {len(predictions)} masks"
        labels = [gr.Label(value=dict(predictions[i]), label=f"[MASK] {i + 1}: top {len(predictions[i])}",
                           num_top_classes=len(predictions[i]), visible=True) if i < len(predictions)
                  else gr.Label(value=None, visible=False) for i in range(MAX_LABELS)]
        return [gr.HighlightedText(value=spans, color_map=colors, label=caption), *labels]

    @_friendly
    def judge(model_name: str, text_a: str, text_b: str):
        from bert_demo.inference import next_sentence

        loaded = registry.load(model_name)
        p = next_sentence(loaded.model, loaded.tokenizer, text_a, text_b)
        return {"B follows A": p, "B is a random sentence": 1 - p}

    @_friendly
    def look(model_name: str, text_a: str, text_b: str, layer: float, head: float, view: str, hide: bool):
        from bert_demo.inference import attention, attention_rollout, drop_tokens

        loaded = registry.load(model_name)
        tokens, weights = attention(loaded.model, loaded.tokenizer, text_a, (text_b or "").strip() or None)
        n_layers, n_heads = weights.shape[:2]
        layer = min(max(int(layer), 1), n_layers)
        head = min(max(int(head), 1), n_heads)
        if view == VIEW_ROLLOUT:
            matrix = attention_rollout(weights)[layer - 1]  # (T, T)
            title = f"Attention rollout through layer{f's 1–{layer}' if layer > 1 else ' 1'}"
        elif view == VIEW_AVERAGE:
            matrix = weights[layer - 1].mean(dim=0)  # (T, T)
            title = f"Layer {layer}, average of its {n_heads} heads"
        else:
            matrix = weights[layer - 1, head - 1]
            title = f"Layer {layer}, head {head}"
        heads = weights[layer - 1]  # (A, T, T)
        shown = tokens
        if hide:
            shown, matrix = drop_tokens(tokens, matrix)
            heads = drop_tokens(tokens, heads)[1]
            title += " ([CLS]/[SEP] hidden, rows renormalised)"
        caption = (f"{len(tokens)} tokens; the model has {n_layers} layers × {n_heads} heads. Each row is one "
                   "token (the query) and shows how it spreads its attention over the tokens (keys); rows sum to 1."
                   + (" Rollout multiplies the head-averaged maps of layers 1 to this one, adding the residual "
                      "connection (Abnar & Zuidema 2020): how much each input token flows into each position."
                      if view == VIEW_ROLLOUT else ""))
        return (plots.attention_heatmap(shown, matrix, title),
                plots.attention_grid(shown, heads, f"All {n_heads} heads of layer {layer}"), caption)

    def train_outputs(job: TrainingJob, final: bool = False) -> list:
        loss, accuracy, lr = plots.training_figures(job.records)
        probe = next((r for r in reversed(job.records) if r.get("kind") == "probe"), None)
        if probe is None:
            probe_update = gr.skip()
        elif probe.get("error"):
            probe_update = gr.Label(value=None, label=f"Probe at step {probe['step']}: {probe['error']}")
        else:
            probe_update = gr.Label(value=dict(probe["predictions"]),
                                    label=f"Step {probe['step']}: guesses for “{probe['text']}”")
        download, selector = gr.skip(), gr.skip()
        done = job.done
        if final:
            saved = done is not None and done.get("checkpoint")
            name = f"runs/{job.name}"
            download = gr.File(value=str(registry.zip_checkpoint(name)), visible=True) if saved else None
            selector = gr.Dropdown(choices=registry.choices(), value=name if saved else registry.default_model())
        return [job.status(), loss, accuracy, lr, probe_update, download, selector]

    @_friendly
    def train(corpus: list[str], upload: str | None, preset: str, steps: float, batch_size: float, lr: float,
              seq_len: float, vocab_size: float, request: gr.Request):
        job = None
        for update in registry.train_in_line(corpus=corpus, upload=upload, preset=preset, steps=steps,
                                             batch_size=batch_size, lr=lr, seq_len=seq_len, vocab_size=vocab_size,
                                             owner=getattr(request, "session_hash", None)):
            if isinstance(update, str):
                yield [update, *[gr.skip()] * 6]
            else:
                job = update
        if job is None:
            yield ["You left the line: no run was started.", *[gr.skip()] * 6]
            return
        seen, last, announced = 0, 0.0, False
        try:
            yield [job.status(), *plots.training_figures([]), gr.Label(value=None, label=PROBE_LABEL), None,
                   gr.skip()]
            while job.done is None:
                seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
                if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
                    last = time.monotonic()
                    outputs = train_outputs(job)
                    if not announced and job.trainer.model is not None:  # offer the live run in the selector
                        outputs[-1], announced = gr.Dropdown(choices=registry.choices()), True
                    yield outputs
        finally:
            if job.done is None:  # the caller went away (tab closed, job cancelled): end the run, keep its weights
                job.stop()
        job.thread.join(timeout=10)
        yield train_outputs(job, final=True)
        if job.done.get("reason") == "error":
            raise gr.Error(f"Training failed: {job.done.get('message')}", print_exception=False)

    def stop(request: gr.Request):
        owner = getattr(request, "session_hash", None)
        waiting = any(ticket.owner == owner for ticket in registry.line)
        if registry.stop_training(owner=owner):
            return "Leaving the line…" if waiting else "Stopping after the current step, then saving the checkpoint…"
        if registry.job is not None and registry.job.running:
            gr.Warning("This run was started by someone else; only they can stop it, and it ends by itself.")
        return gr.skip()

    def selected(model_name: str, layer: int, head: int):
        """Everything that depends on the chosen model: header line, Model tab, attention sliders."""
        try:
            import_backend()
            summary = registry.model_summary(model_name)
            info = registry.model_info(model_name)
        except ValueError as exc:
            message = str(exc)
            message = f"⚠️ {message[:1].upper() + message[1:]}"
            return message, message, "", gr.skip(), gr.skip()
        card = info.pop("model_card") or "*This checkpoint has no model card (README.md).*"
        return summary, _model_markdown(info), card, *narrow(model_name, layer, head)

    def narrow(model_name: str, layer: int, head: int):
        """The layer and head sliders narrowed to the model's range: on choosing it, and after an example (which
        resets the range)."""
        try:
            import_backend()
            layers, heads = registry.layers_and_heads(model_name)
        except ValueError:
            return gr.skip(), gr.skip()
        return _within(layer, layers), _within(head, heads)

    def refresh(model_name: str | None):
        value = model_name or registry.default_model()
        return gr.Dropdown(choices=registry.choices(), value=value)

    @_friendly
    def download(model_name: str):
        return gr.File(value=str(registry.zip_checkpoint(model_name)), visible=True)

    # ------------------------------------------------------------------------------------------------------------
    # layout

    with gr.Blocks(title="BERT from scratch") as demo:
        gr.Markdown(INTRO)
        with gr.Row(equal_height=False):
            model = gr.Dropdown(choices=registry.choices(), value=registry.default_model(), allow_custom_value=True,
                                label="Model", elem_id="model",
                                info="Shipped checkpoints, runs trained here, or a Hugging Face hub id / folder "
                                     "path under checkpoints/ or runs/", scale=4)
            refresh_button = gr.Button("↻ Refresh list", elem_id="refresh", scale=0, min_width=130, size="sm")
        summary = gr.Markdown(_no_model_text() if registry.default_model() is None else "",
                              elem_id="model-summary")

        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Train", id="train", elem_id="tab-train"):
                with gr.Row():
                    with gr.Column(scale=1, min_width=300):
                        corpus = gr.Dropdown(choices=list(CORPORA), value=list(DEFAULTS.corpus), multiselect=True,
                                             label="Corpus", elem_id="corpus",
                                             info="wiki: 106 Wikipedia articles (offline); news: 3,824 news "
                                                  "articles (fetched once); wikitext-2: needs the Hugging Face Hub")
                        upload = gr.File(label="…and/or your own .txt (blank line between documents)",
                                         file_types=[".txt"], type="filepath", elem_id="upload", height=110)
                        preset = gr.Radio(list(caps.presets), value=DEFAULTS.preset, label="Model size (preset)",
                                          elem_id="preset", info="tiny: 2 layers × 128; mini: 4 layers × 256")
                        steps = gr.Slider(10, caps.max_steps, value=DEFAULTS.steps, step=10, label="Steps",
                                          elem_id="steps")
                        batch_size = gr.Slider(2, caps.max_batch, value=DEFAULTS.batch_size, step=2,
                                               label="Batch size (sentence pairs per step)", elem_id="batch")
                        lr = gr.Number(value=DEFAULTS.lr, label="Peak learning rate", elem_id="lr", minimum=1e-6,
                                       maximum=1e-2, step=1e-4, info="10% warm-up, then linear decay")
                        seq_len = gr.Dropdown([n for n in (32, 64, 128, 256, 512) if n <= caps.max_seq_len],
                                              value=DEFAULTS.seq_len, label="Sequence length (tokens)",
                                              elem_id="seq-len")
                        vocab_size = gr.Slider(caps.min_vocab, caps.max_vocab, value=DEFAULTS.vocab_size, step=512,
                                               label="Vocabulary size (WordPiece)", elem_id="vocab")
                        with gr.Row():
                            start_button = gr.Button("Start training", variant="primary", elem_id="start")
                            stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
                        gr.Markdown(f"<small>{caps.describe(registry.device)}</small>")
                    with gr.Column(scale=2):
                        status = gr.Markdown("Press **Start training**: the defaults take about a minute on "
                                             "2 CPU cores.", elem_id="status")
                        loss_plot = gr.Plot(plots.empty_figure("Loss appears here once training starts"),
                                            label="Loss", elem_id="loss-plot", show_label=False)
                        accuracy_plot = gr.Plot(plots.empty_figure("Accuracy"), label="Accuracy",
                                                elem_id="accuracy-plot", show_label=False)
                        with gr.Row(equal_height=True):
                            lr_plot = gr.Plot(plots.empty_figure("Learning rate"), label="Learning rate",
                                              elem_id="lr-plot", show_label=False)
                            probe = gr.Label(label=PROBE_LABEL, num_top_classes=5, elem_id="probe",
                                             show_heading=False)
                        checkpoint_file = gr.File(label="Checkpoint (Hugging Face format, zip)", visible=False,
                                                  elem_id="checkpoint-file", interactive=False)

            with gr.Tab("Fill-mask", id="fill", elem_id="tab-fill"):
                gr.Markdown("Write a sentence with one or more `[MASK]`: the masked-LM head ranks the vocabulary "
                            "for each one.")
                with gr.Row(equal_height=True):
                    fill_text = gr.Textbox(value=FILL_EXAMPLES[0][0], label="Text", elem_id="fill-text", scale=4,
                                           lines=1, max_lines=4)
                    top_k = gr.Slider(1, 20, value=5, step=1, label="Top k", elem_id="top-k", scale=1)
                fill_button = gr.Button("Predict", variant="primary", elem_id="fill-button")
                filled = gr.HighlightedText(label="Best guesses filled in", elem_id="fill-sentence",
                                            show_legend=False, show_inline_category=True, interactive=False)
                with gr.Row():
                    mask_labels = [gr.Label(visible=i == 0, elem_id=f"fill-label-{i}", label=f"[MASK] {i + 1}",
                                            min_width=180, show_heading=False) for i in range(MAX_LABELS)]
                gr.Examples(FILL_EXAMPLES, inputs=[fill_text], label="Examples (click one, then Predict)")

            with gr.Tab("Next sentence", id="nsp", elem_id="tab-nsp"):
                gr.Markdown("Does sentence B follow sentence A? BERT's next-sentence head answers from the `[CLS]` "
                            "vector. Small models trained for a minute are close to a coin flip: train longer to "
                            "see it learn.")
                with gr.Row():
                    text_a = gr.Textbox(value=NSP_EXAMPLES[0][0], label="Sentence A", elem_id="nsp-a")
                    text_b = gr.Textbox(value=NSP_EXAMPLES[0][1], label="Sentence B", elem_id="nsp-b")
                nsp_button = gr.Button("Judge", variant="primary", elem_id="nsp-button")
                nsp_result = gr.Label(label="The model's probability", elem_id="nsp-result", show_heading=False)
                gr.Examples(NSP_EXAMPLES, inputs=[text_a, text_b], example_labels=NSP_LABELS,
                            label="Examples: true continuations and random pairs")

            with gr.Tab("Attention", id="attention", elem_id="tab-attention") as attention_tab:
                gr.Markdown("Which tokens does each token look at? Pick a layer and a head; hover a cell for the "
                            "exact weight. Give a second sentence to see attention across the pair.")
                with gr.Row():
                    att_a = gr.Textbox(value=ATTENTION_EXAMPLES[0][0], label="Sentence A", elem_id="att-a")
                    att_b = gr.Textbox(value=ATTENTION_EXAMPLES[0][1], label="Sentence B (optional)",
                                       elem_id="att-b")
                with gr.Row(equal_height=True):
                    # the API accepts any model's sizes (clamped in `look`); the page narrows them to the model's
                    layer = gr.Slider(1, LIMITS["num_hidden_layers"], value=ATTENTION_EXAMPLES[0][2], step=1,
                                      label="Layer", elem_id="layer", scale=2)
                    head = gr.Slider(1, LIMITS["num_attention_heads"], value=ATTENTION_EXAMPLES[0][3], step=1,
                                     label="Head", elem_id="head", scale=2)
                    view = gr.Radio([VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT], value=VIEW_HEAD, label="Show",
                                    elem_id="view", scale=4)
                    hide = gr.Checkbox(label="Hide [CLS] and [SEP]", value=ATTENTION_EXAMPLES[0][5], elem_id="hide",
                                       scale=1, min_width=120)
                att_button = gr.Button("Show attention", variant="primary", elem_id="att-button")
                att_examples = gr.Examples(ATTENTION_EXAMPLES, inputs=[att_a, att_b, layer, head, view, hide],
                            example_labels=ATTENTION_LABELS, label="Heads with a clear job (click one, then Show "
                            "attention)")
                att_caption = gr.Markdown(elem_id="att-caption")
                att_plot = gr.Plot(plots.empty_figure("Press “Show attention”", height=360), show_label=False,
                                   elem_id="att-plot")
                grid_plot = gr.Plot(plots.empty_figure("All heads of the layer, side by side", height=240),
                                    show_label=False, elem_id="grid-plot")

            with gr.Tab("Model", id="model", elem_id="tab-model"):
                with gr.Row():
                    with gr.Column(scale=3):
                        model_info = gr.Markdown(elem_id="model-info")
                        with gr.Row():
                            download_button = gr.Button("Download this checkpoint (.zip)", elem_id="download",
                                                        scale=0, min_width=260, size="sm")
                        download_file = gr.File(label="Checkpoint", visible=False, elem_id="download-file",
                                                interactive=False)
                        with gr.Accordion("Model card (README.md in the checkpoint folder)", open=True):
                            model_card = gr.Markdown(elem_id="model-card")
                    with gr.Column(scale=2):
                        gr.Markdown(EXPLAINER)
                        with gr.Row(elem_classes="tab-links"):
                            links = {tab: gr.Button(text, size="sm") for tab, text in
                                     [("train", "→ Train"), ("fill", "→ Fill-mask"), ("nsp", "→ Next sentence"),
                                      ("attention", "→ Attention")]}

        # ------------------------------------------------------------------------------------------------------------
        # events

        train_inputs = [corpus, upload, preset, steps, batch_size, lr, seq_len, vocab_size]
        train_outputs_ = [status, loss_plot, accuracy_plot, lr_plot, probe, checkpoint_file, model]
        # no concurrency limit: the registry keeps its own short line (one run per visitor), so that queued runs
        # never wait in, and fill, the queue that inference shares
        start_button.click(train, train_inputs, train_outputs_, api_name="train", concurrency_limit=None,
                           trigger_mode="once", show_progress="minimal",
                           show_progress_on=[status])
        stop_button.click(stop, None, status, api_visibility="private", queue=False)

        gr.on([fill_button.click, fill_text.submit], fill, [model, fill_text, top_k], [filled, *mask_labels],
              api_name="fill_mask", show_progress="hidden")  # fast; an error is a toast, the last answer stays
        gr.on([nsp_button.click, text_a.submit, text_b.submit], judge, [model, text_a, text_b], nsp_result,
              api_name="next_sentence", show_progress="hidden")
        attention_inputs = [model, att_a, att_b, layer, head, view, hide]
        attention_outputs = [att_plot, grid_plot, att_caption]
        gr.on([att_button.click, att_a.submit, att_b.submit, layer.release, head.release, view.input, hide.input],
              look, attention_inputs, attention_outputs, api_name="attention", trigger_mode="always_last",
              show_progress_on=[att_plot])
        attention_tab.select(look, attention_inputs, attention_outputs, api_visibility="private",
                             show_progress_on=[att_plot])

        chosen = [summary, model_info, model_card, layer, head]
        model.change(selected, [model, layer, head], chosen, api_visibility="private")
        att_examples.load_input_event.then(narrow, [model, layer, head], [layer, head], api_visibility="private")
        refresh_button.click(refresh, model, model, api_visibility="private")
        download_button.click(download, model, download_file, api_visibility="private")
        for tab, button in links.items():
            button.click(lambda tab=tab: gr.Tabs(selected=tab), None, tabs, api_visibility="private", queue=False)
        demo.load(refresh, model, model, api_visibility="private").then(
            selected, [model, layer, head], chosen, api_visibility="private")

    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=2)
    return demo


def _within(value: float, maximum: int) -> gr.Slider:
    """A layer or head slider narrowed to the model's range. Its value changes only when out of range: a slider
    answer that set it anyway would undo an example the user clicked while the page was still loading."""
    return gr.Slider(maximum=maximum, value=maximum) if value > maximum else gr.Slider(maximum=maximum)


def _no_model_text() -> str:
    return ("⚠️ There is no model yet: train one in the **Train** tab (about a minute with the defaults). "
            "It then appears in the model selector.")


def _model_markdown(info: dict[str, Any]) -> str:
    """The Model tab's facts: configuration, size, device, training data and last metrics."""
    c = info["config"]
    lines = [f"### {info['name']}",
             f"**{info['parameters']:,} parameters** · runs on **{info['device']}** · "
             f"vocabulary {info['vocab_size']:,} WordPiece tokens",
             "",
             "| layers (L) | hidden size (H) | heads (A) | feed-forward | max positions | dropout |",
             "|---|---|---|---|---|---|",
             f"| {c['num_hidden_layers']} | {c['hidden_size']} | {c['num_attention_heads']} | "
             f"{c['intermediate_size']} | {c['max_position_embeddings']} | {c['hidden_dropout_prob']} |"]
    if info.get("missing_weights"):
        lines += ["", f"⚠️ The checkpoint had no weights for {len(info['missing_weights'])} tensors (e.g. "
                      f"`{info['missing_weights'][0]}`): those parts are random."]
    train = info.get("train_config")
    if train:
        lines += ["", "#### Training",
                  f"Corpus **{_corpus_name(train.get('corpus', '?'))}**, preset **{train.get('preset')}**, "
                  f"{info.get('step') or 0:,} of {train.get('steps'):,} steps, batch {train.get('batch_size')}, "
                  f"sequence length {train.get('seq_len')}, peak learning rate {train.get('lr'):g}"
                  + (f", {_duration(info['elapsed'])} of training on {info.get('trained_on') or '?'}"
                     if info.get("elapsed") else "")
                  + "."]
    else:
        lines += ["", "No training record (`bert_demo.json`) beside this checkpoint: it was not trained here."]
    rows = [("train (last log)", info.get("last_train")), ("validation (last)", info.get("last_val"))]
    rows = [(name, r) for name, r in rows if r]
    if rows:
        lines += ["", "| | step | MLM loss | MLM accuracy | NSP loss | NSP accuracy |", "|---|---|---|---|---|---|"]
        lines += [f"| {name} | {r.get('step')} | {r.get('mlm_loss', float('nan')):.3f} | "
                  f"{r.get('mlm_acc', float('nan')):.1%} | {r.get('nsp_loss', float('nan')):.3f} | "
                  f"{r.get('nsp_acc', float('nan')):.1%} |" for name, r in rows]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    """A training time as people say it: 42 s, 12 min, 16 h 43 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _corpus_name(corpus: str) -> str:
    return " + ".join("your upload" if "/" in part or "\\" in part else part for part in str(corpus).split(","))
