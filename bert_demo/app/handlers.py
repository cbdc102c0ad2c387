"""What each event of the app does: one backend call, shaped for the components that show it.

Every handler takes the `Registry` first and returns (or, for training, yields) a dict from output names to values;
`bert_demo.app.ui` maps the names to its components. Tests call these functions directly. A refused input becomes a
toast with its message and one line in the server log, never a traceback.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from bert_demo import plots
from bert_demo.app import text
from bert_demo.app.backend import backend
from bert_demo.app.registry import Registry
from bert_demo.app.runs import TrainingJob
from bert_demo.train_config import default

log = logging.getLogger(__name__)

MAX_LABELS = 6  # ranked lists shown for the first masks of a sentence
MAX_IMPORTANCE = 4  # head-importance maps drawn, for the first masks of a sentence
LENS_TOP_K = 3  # guesses per layer in the per-layer table
NEIGHBOURS = 12  # nearest tokens listed in the Embeddings tab
MAX_COMPARED = 8  # runs on one comparison chart
UPDATE_EVERY_S = 1.0  # how often the training stream sends new charts
VIEWS = {"head": "one head", "average": "average of the heads", "rollout": "rollout up to this layer"}
VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT = VIEWS.values()
PAIR_FILTERS = ("every token", "sentence A → B", "sentence B → A")
PAIR_ALL, PAIR_A_TO_B, PAIR_B_TO_A = PAIR_FILTERS
STARTS = ("random weights (pre-train from scratch)", "the model selected above (continue training it)")
START_RANDOM, START_CONTINUE = STARTS
FINAL, NO_COMPARE = "final", "none"  # the timeline choices that mean "the weights as they are now" and "no comparison"
PROBE_LABEL = f"Probe: guesses for “{default('probe')}”"
Outputs = dict[str, Any]
STOP_ACTIVE = gr.Button(interactive=True, variant="stop")  # red only while there is a run to stop
STOP_IDLE = gr.Button(interactive=False, variant="secondary")


def friendly(fn: Callable) -> Callable:
    """Turn a handler's ValueError into a toast with its message (and one log line); anything else into a toast
    that says something went wrong, with the traceback in the log."""

    def translate(exc: Exception) -> gr.Error:
        if isinstance(exc, ValueError):
            message = str(exc)
            log.warning("%s refused: %s", fn.__name__, message[:200])
            return gr.Error(message[:1].upper() + message[1:], print_exception=False)
        log.exception("unexpected error in %s", fn.__name__)
        return gr.Error(f"Something went wrong ({type(exc).__name__}). Try again, or choose another model.",
                        print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc) from None
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001
            raise translate(exc) from None
    return wrapper


@friendly
def fill_mask(registry: Registry, model_name: str, sentence: str, top_k: float, heads_off: list[str] | None = None,
              step: str = FINAL, owner: str | None = None) -> Outputs:
    """The best guesses filled in, a ranked list per [MASK], the guesses at every layer, and the sentence's words
    to click; `heads_off` ("L1 H2", ...) are switched off for all of it."""
    inference = backend().inference
    loaded = registry.load_at(model_name, _step(step), owner)
    head_mask = _head_mask(heads_off, loaded.model.config)
    inference.check_top_k(int(top_k))
    # one forward pass: the lens's last layer is exactly fill_mask's answer (tested), so it gives both
    lens = inference.layer_predictions(loaded.model, loaded.tokenizer, sentence, max(int(top_k), LENS_TOP_K),
                                       head_mask=head_mask)
    predictions = [layers[-1][:int(top_k)] for layers in lens]
    lens = [[guesses[:LENS_TOP_K] for guesses in layers] for layers in lens]
    spans = inference.fill_in_masks(sentence.strip(), predictions)
    caption = "Best guesses filled in (the label is the model's probability)"
    if heads_off:
        caption += f", with {len(heads_off)} head{'s' if len(heads_off) > 1 else ''} switched off"
    if len(predictions) > MAX_LABELS:
        caption += f"; ranked lists below for the first {MAX_LABELS} of {len(predictions)} masks"
    outputs: Outputs = {"filled": gr.HighlightedText(value=spans, label=caption,
                                                     color_map={label: "#bfdbfe" for _, label in spans if label}),
                        "layer_table": text.layer_table(lens),
                        "words": text.word_spans(sentence)}
    for i in range(MAX_LABELS):
        outputs[f"mask_label_{i}"] = (
            gr.Label(value=dict(predictions[i]), label=f"[MASK] {i + 1}: top {len(predictions[i])}",
                     num_top_classes=len(predictions[i]), visible=True) if i < len(predictions)
            else gr.Label(value=None, visible=False))
    return outputs


@friendly
def importance(registry: Registry, model_name: str, sentence: str, step: str = FINAL, owner: str | None = None
               ) -> Outputs:
    """For each [MASK] (the first few), how much its top guess loses when each head alone is switched off."""
    loaded = registry.load_at(model_name, _step(step), owner)
    labels, drops = backend().inference.head_importance(loaded.model, loaded.tokenizer, sentence)
    return {"importance_plot": plots.head_importance_figure(labels[:MAX_IMPORTANCE], drops[:MAX_IMPORTANCE])}


def mask_word(sentence: str, index: int) -> Outputs:
    """The sentence with the clicked word (its `index` among `text.word_spans`) replaced by [MASK]."""
    return {"fill_text": text.mask_word(sentence, index)}


def _head_mask(heads_off: list[str] | None, config: Any) -> list[list[float]] | None:
    """"L2 H3"-style names of heads to switch off, as a [layers, heads] mask of 1 (keep) and 0 (off)."""
    if not heads_off:
        return None
    mask = [[1.0] * config.num_attention_heads for _ in range(config.num_hidden_layers)]
    names = head_names(config)
    for name in heads_off:
        if name not in names:
            raise ValueError(f"no head {name!r} in this model: it has layers 1-{config.num_hidden_layers} and "
                             f"heads 1-{config.num_attention_heads} (write them like 'L1 H2')")
        layer, head = names[name]
        mask[layer][head] = 0.0
    return mask


def head_names(config: Any) -> dict[str, tuple[int, int]]:
    """"L1 H1" ... for every head of a model, to its (layer, head) index from 0."""
    return {f"L{layer + 1} H{head + 1}": (layer, head) for layer in range(config.num_hidden_layers)
            for head in range(config.num_attention_heads)}


@friendly
def neighbours(registry: Registry, model_name: str, word: str, sentence: str, layer: float, step: str = FINAL,
               owner: str | None = None) -> Outputs:
    """The word's nearest tokens in the embedding table, or of its hidden state at `layer` in `sentence`."""
    loaded = registry.load_at(model_name, _step(step), owner)
    in_context = (sentence or "").strip() or None
    found = backend().inference.neighbours(loaded.model, loaded.tokenizer, (word or "").strip(), NEIGHBOURS,
                                           text=in_context, layer=int(layer))
    where = f"its hidden state after layer {int(layer)} in the sentence" if in_context else "its input embedding"
    if in_context and int(layer) == 0:
        where = "its embedding in the sentence (word + position + segment)"
    return {"neighbours_table": [[token, round(similarity, 3)] for token, similarity in found],
            "neighbours_caption": f"Nearest tokens to “{word.strip()}” by cosine similarity to {where}."}


@friendly
def projection(registry: Registry, model_name: str, words: str, step: str = FINAL, owner: str | None = None
               ) -> Outputs:
    loaded = registry.load_at(model_name, _step(step), owner)
    listed = [w for w in (words or "").replace(",", " ").split() if w]
    points = backend().inference.embedding_projection(loaded.model, loaded.tokenizer, listed)
    return {"projection_plot": plots.projection_figure(points)}


@friendly
def next_sentence(registry: Registry, model_name: str, text_a: str, text_b: str, step: str = FINAL,
                  owner: str | None = None
                  ) -> Outputs:
    loaded = registry.load_at(model_name, _step(step), owner)
    p = backend().inference.next_sentence(loaded.model, loaded.tokenizer, text_a, text_b)
    return {"nsp_result": {"B follows A": p, "B is a random sentence": 1 - p}}


@friendly
def attention(registry: Registry, model_name: str, text_a: str, text_b: str, layer: float, head: float,
              view: str, hide: bool, pair: str = PAIR_ALL, step: str = FINAL, compare: str = NO_COMPARE,
              owner: str | None = None) -> Outputs:
    """The chosen map (one head, the layer's average or the rollout), all heads of the layer, and a caption;
    `pair` keeps only sentence A's attention to B (or B's to A); `compare` draws the same map at another step."""
    text_b = (text_b or "").strip() or None
    if pair != PAIR_ALL and text_b is None:
        raise ValueError(f"the “{pair}” filter needs a sentence B: write one, or choose “{PAIR_ALL}”")
    shown = _attention_map(registry.load_at(model_name, _step(step), owner), text_a, text_b, layer, head, view,
                           hide, pair)
    outputs = {"att_plot": plots.attention_heatmap(shown.rows, shown.matrix, shown.title, keys=shown.cols),
               "grid_plot": plots.attention_grid(shown.rows, shown.heads, f"All {len(shown.heads)} heads of layer "
                                                 f"{shown.layer}", keys=shown.cols),
               "att_caption": text.attention_caption(len(shown.rows), len(shown.cols), shown.layers,
                                                     len(shown.heads), view == VIEW_ROLLOUT, shown.source),
               "compare_plot": gr.Plot(visible=False)}
    if compare != NO_COMPARE:
        other = _attention_map(registry.load_at(model_name, _step(compare), owner), text_a, text_b, layer, head,
                               view, hide, pair)
        outputs["att_plot"] = plots.attention_heatmap(shown.rows, shown.matrix, f"{_step_name(step)}",
                                                      keys=shown.cols)
        outputs["compare_plot"] = gr.Plot(plots.attention_heatmap(other.rows, other.matrix, _step_name(compare),
                                                                  keys=other.cols), visible=True)
        outputs["att_caption"] = f"**{shown.title}**, at two steps of training. " + outputs["att_caption"]
    return outputs


@dataclass
class _Map:
    """One attention view, ready to draw: row and column tokens, the map, the layer's heads and a title."""

    rows: list[str]
    cols: list[str]
    matrix: Any
    heads: Any
    title: str
    layer: int
    layers: int
    source: str | None  # "A" or "B" when only one sentence's attention to the other is kept


def _attention_map(loaded: Any, text_a: str, text_b: str | None, layer: float, head: float, view: str,
                   hide: bool, pair: str) -> _Map:
    inference = backend().inference
    tokens, weights = inference.attention(loaded.model, loaded.tokenizer, text_a, text_b)
    n_layers, n_heads = weights.shape[:2]
    layer, head = min(max(int(layer), 1), n_layers), min(max(int(head), 1), n_heads)
    if view == VIEW_ROLLOUT:
        matrix = inference.attention_rollout(weights)[layer - 1]  # (T, T)
        title = f"Attention rollout through layer{f's 1–{layer}' if layer > 1 else ' 1'}"
    elif view == VIEW_AVERAGE:
        matrix = weights[layer - 1].mean(dim=0)  # (T, T)
        title = f"Layer {layer}, average of its {n_heads} heads"
    else:
        matrix, title = weights[layer - 1, head - 1], f"Layer {layer}, head {head}"
    heads, shown = weights[layer - 1], tokens  # (A, T, T)
    segment = _segments(tokens)
    if hide:
        segment = [s for s, t in zip(segment, tokens) if t not in ("[CLS]", "[SEP]")]
        shown, matrix = inference.drop_tokens(tokens, matrix)
        heads = inference.drop_tokens(tokens, heads)[1]
        title += " ([CLS]/[SEP] hidden, rows renormalised)"
    keys, source = shown, None
    if pair != PAIR_ALL:
        source, target = ("A", "B") if pair == PAIR_A_TO_B else ("B", "A")
        rows = [i for i, s in enumerate(segment) if s == source]
        cols = [i for i, s in enumerate(segment) if s == target]
        matrix, heads = matrix[rows][:, cols], heads[:, rows][:, :, cols]
        shown, keys = [shown[i] for i in rows], [shown[i] for i in cols]
        title += f", sentence {source} → sentence {target}"
    return _Map(shown, keys, matrix, heads, title, layer, n_layers, source)


def _step(choice: str | None) -> int | None:
    """A timeline choice ("final", or a step number as text) as the step to load, None for the final weights."""
    if choice in (None, "", FINAL):
        return None
    try:
        return int(choice)
    except (TypeError, ValueError):
        raise ValueError(f"unknown training step {choice!r}: choose “{FINAL}” or one of the run's snapshot steps") \
            from None


def _step_name(choice: str) -> str:
    step = _step(choice)
    return "Final weights" if step is None else f"Step {step:,}" + (" (the random start)" if step == 0 else "")


def timeline_choices(steps: list[int]) -> list[tuple[str, str]]:
    """The timeline dropdown's (label, value) pairs: the final weights first, then every snapshot."""
    return [("final weights", FINAL)] + [(_step_name(str(step)).lower(), str(step)) for step in steps]


def _segments(tokens: list[str]) -> list[str]:
    """Which sentence each token belongs to, as BERT's segment ids say: "A" for [CLS] A [SEP], "B" after it."""
    first_sep = tokens.index("[SEP]") if "[SEP]" in tokens else len(tokens) - 1
    return ["A" if i <= first_sep else "B" for i in range(len(tokens))]


def view_changed(view: str) -> Outputs:
    """The Head slider only matters for the one-head view: grey it out in the others."""
    return {"head": gr.Slider(interactive=view == VIEW_HEAD)}


@friendly
def train(registry: Registry, corpus: list[str], upload: str | None, preset: str, steps: float,
          batch_size: float, lr: float, seq_len: float, vocab_size: float, share: bool = False,
          start: str = START_RANDOM, model_name: str | None = None, typed: str = "",
          owner: str | None = None) -> Iterator[Outputs]:
    """Wait in line for the training slot, start the run (from random weights, or continuing `model_name`), and
    stream its charts until it ends. Text the visitor typed is trained on as if uploaded."""
    if start not in STARTS:
        raise ValueError(f"start from {' or '.join(STARTS)}, not {start!r}")
    with _typed_upload(registry, typed, upload) as upload:
        yield from _train(registry, corpus, upload, preset, steps, batch_size, lr, seq_len, vocab_size, share,
                          start, model_name, owner)


@contextmanager
def _typed_upload(registry: Registry, typed: str | None, upload: str | None) -> Iterator[str | None]:
    """The typed text as a temporary .txt, deleted when the run ends (checking the settings copies it, as it
    copies an upload)."""
    if not isinstance(typed, str) or not typed.strip():
        yield upload
        return
    if upload:
        raise ValueError("upload a file or type text, not both")
    data = typed.encode("utf-8")
    if len(data) > registry.caps.max_upload_bytes:
        raise ValueError(f"the text is {len(data):,} bytes; at most {registry.caps.max_upload_bytes:,} are allowed")
    fd, path = tempfile.mkstemp(prefix="typed-", suffix=".txt")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        yield path
    finally:
        os.unlink(path)


def _train(registry: Registry, corpus: list[str], upload: str | None, preset: str, steps: float,
           batch_size: float, lr: float, seq_len: float, vocab_size: float, share: bool, start: str,
           model_name: str | None, owner: str | None) -> Iterator[Outputs]:
    job = None
    for update in registry.train_in_line(corpus=corpus, upload=upload, preset=preset, steps=steps,
                                         batch_size=batch_size, lr=lr, seq_len=seq_len, vocab_size=vocab_size,
                                         init_from=model_name if start == START_CONTINUE else None,
                                         share=bool(share), owner=owner):
        if isinstance(update, str):
            yield {"status": update, "stop": STOP_ACTIVE}  # Stop also takes a visitor out of the line
        else:
            job = update
    if job is None:
        yield {"status": "You left the line: no run was started.", "stop": STOP_IDLE}
        return
    try:
        yield {"status": text.job_status(job), **_figures([]), "probe": gr.Label(value=None, label=PROBE_LABEL),
               "checkpoint_file": None, "stop": STOP_ACTIVE, "readout": ""}
        yield from _follow(registry, job, owner)
    finally:
        if job.done is None:  # the visitor went away (tab closed, job cancelled): end the run, keep its weights
            job.stop()
    job.thread.join(timeout=10)
    yield training_outputs(registry, job, owner, final=True)
    if job.done.get("reason") == "error":
        raise gr.Error(f"Training failed: {job.done.get('message')}", print_exception=False)


def _follow(registry: Registry, job: TrainingJob, owner: str | None) -> Iterator[Outputs]:
    """Charts and status about once a second while the run trains; the live run joins the selector once built."""
    seen, last, announced = 0, 0.0, False
    while job.done is None:
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            outputs = training_outputs(registry, job, owner)
            if not announced and job.trainer.model is not None:
                outputs["model"], announced = gr.Dropdown(choices=registry.choices(owner)), True
            yield outputs


def _figures(records: list[dict]) -> Outputs:
    loss, accuracy, lr = plots.training_figures(records)
    return {"loss_plot": loss, "accuracy_plot": accuracy, "lr_plot": lr}


def training_outputs(registry: Registry, job: TrainingJob, owner: str | None, final: bool = False) -> Outputs:
    """Status, charts and probe of a run; when it has ended, its zip, the new run in the selector's list (the
    selector keeps showing what the visitor chose: switching every tab to a barely trained model confuses), and
    Stop greyed out again."""
    outputs = {"status": text.job_status(job), **_figures(job.records)}
    probe = next((r for r in reversed(job.records) if r.get("kind") == "probe"), None)
    if probe is not None and probe.get("error"):
        outputs["probe"] = gr.Label(value=None, label=f"Probe at step {probe['step']}: {probe['error']}")
    elif probe is not None:
        outputs["probe"] = gr.Label(value=dict(probe["predictions"]),
                                    label=f"Step {probe['step']}: guesses for “{probe['text']}”")
    readout = next((r for r in reversed(job.records) if r.get("kind") == "readout"), None)
    baseline = next((r.get("mlm_baseline_acc") for r in reversed(job.records) if r.get("kind") == "val"), None)
    if readout is not None:
        outputs["readout"] = text.memorising_note(job.records) + text.readout_markdown(readout, baseline)
    if final:
        saved = job.done is not None and job.done.get("checkpoint")
        name = f"runs/{job.name}"
        outputs["checkpoint_file"] = gr.File(value=str(registry.zip_checkpoint(name, owner)), visible=True) \
            if saved else None
        outputs["model"] = outputs["compare_runs"] = gr.Dropdown(choices=registry.choices(owner))
        outputs["stop"] = STOP_IDLE
    return outputs


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
    runs = dict(registry.history(name, owner) for name in names)
    return {"compare_runs_plot": plots.compare_figure(runs, x_axis)}


def stop(registry: Registry, owner: str | None) -> Outputs:
    """Stop the visitor's own run, or take them out of the line; another visitor's run is left alone."""
    waiting = any(ticket.owner == owner for ticket in registry.line)
    if registry.stop_training(owner=owner):
        return {"status": "Leaving the line…" if waiting else
                "Stopping after the current step, then saving the checkpoint…"}
    if registry.job is not None and registry.job.running:
        gr.Warning("This run was started by someone else; only they can stop it, and it ends by itself.")
    return {"status": gr.skip()}


def selected(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """Everything that depends on the chosen model: header line, Model tab, head switches, layer sliders."""
    try:
        summary, info = registry.model_summary(model_name, owner), registry.model_info(model_name, owner)
    except ValueError as exc:
        message = f"⚠️ {str(exc)[:1].upper()}{str(exc)[1:]}"
        return {"summary": message, "model_info": message, "model_card": ""}
    card = info.pop("model_card") or "*This checkpoint has no model card (README.md).*"
    entry, config = registry.config_of(model_name, owner)
    own = _shows_its_examples(registry, entry.folder, owner)
    steps = registry.timeline_steps(model_name, owner)
    snapshots = timeline_choices(steps)
    return {"summary": summary, "model_info": text.model_markdown(info), "model_card": card,
            "fill_examples": gr.Column(visible=own), "nsp_examples": gr.Column(visible=own),
            "att_examples_box": gr.Column(visible=own),
            "step": gr.Dropdown(choices=snapshots, value=FINAL, visible=bool(steps)),
            "compare": gr.Dropdown(choices=[("no comparison", NO_COMPARE)] + snapshots, value=NO_COMPARE,
                                   visible=bool(steps)),
            "heads_off": gr.Dropdown(choices=list(head_names(config)), value=[], multiselect=True),
            "emb_layer": gr.Slider(maximum=config.num_hidden_layers),
            **narrow(registry, model_name, layer, head, owner)}


def _shows_its_examples(registry: Registry, folder: Path | None, owner: str | None) -> bool:
    """Whether the page's examples belong to this model: they were read from the default model's folder, and
    their labels ("layer 2, head 4: the previous token") would be false of any other."""
    default = registry.default_model(owner)
    return folder is not None and default is not None and registry.resolve(default, owner).folder == folder


def narrow(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """The layer and head sliders narrowed to the model's range. A value changes only when out of range: setting
    it anyway would undo an example the visitor clicked while the page was still loading."""
    try:
        _, config = registry.config_of(model_name, owner)
    except ValueError:
        return {"layer": gr.skip(), "head": gr.skip()}
    return {"layer": _slider(layer, config.num_hidden_layers), "head": _slider(head, config.num_attention_heads)}


def _slider(value: float, maximum: int) -> gr.Slider:
    return gr.Slider(maximum=maximum, value=maximum) if value > maximum else gr.Slider(maximum=maximum)


def refresh(registry: Registry, model_name: str | None, owner: str | None = None) -> Outputs:
    choices = registry.choices(owner)
    return {"model": gr.Dropdown(choices=choices, value=model_name or registry.default_model(owner)),
            "compare_runs": gr.Dropdown(choices=choices)}


@friendly
def download(registry: Registry, model_name: str, owner: str | None = None) -> Outputs:
    return {"download_file": gr.File(value=str(registry.zip_checkpoint(model_name, owner)), visible=True)}
