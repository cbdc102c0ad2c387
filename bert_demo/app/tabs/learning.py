"""The Step by step tab's third section: one training step on the example drawn above it, `loss.backward()` and
`optimizer.step()` with the model's own numbers (`inspection.training_step`): where the gradient starts, where it
flows through the forward pass, how much reaches each head and each part, the tied embeddings' two parts, the
optimizer's update worked through, and what changed. The layout, its wiring and its handler."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypedDict

import gradio as gr

from bert_demo.app.handlers import FINAL, Components, Outputs, friendly
from bert_demo.app.queries import At, Query, ask, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.app.folders import read_examples
from bert_demo.app.state.kept import ByVisitor
from bert_demo.app.tabs import learning_views as views
from bert_demo.app.tabs.drawn import YOUR_TEXT, Draw, Drawn, drawn, model_shown
from bert_demo.inspection import curves
from bert_demo.training.settings import EXAMPLE_STEPS

GRADIENTS_KEPT, GRADIENTS_MAX_BYTES = 4, 192 * 2**20  # steps' gradients kept by visitor: about 40 MB each (small)
FALLBACK_PROBE = "the [MASK] sat on the mat."  # Fill-mask's first sentence for a model without examples
DROPOUTS = {"off": 0.0, "paper": 0.1}  # the step's dropout, by the choice's value
DROPOUT_CHOICES = [("off (the step repeats exactly)", "off"), ("the paper's, 0.1", "paper")]
PROMPT = "Press “Take the training step” to train the model on the example above."
ACROSS_PROMPT = "Press “Follow it through the model's training”"


@dataclass(frozen=True)
class Take(Query):
    """How section 3 trains on the example: how many steps, and with dropout or without."""

    PREFIX = "ts"
    steps: int = ask(1, "Steps on this example", bounds=(1, EXAMPLE_STEPS), whole=True, noun="number of steps",
                     info="more than one: watch it memorise the example")
    dropout: str = ask("off", "Dropout", choices=DROPOUT_CHOICES)


class LearningParts(TypedDict):
    """The training step's components, and the example across training's, by the names their handlers answer
    with."""

    ex_across: gr.Button
    ex_across_note: gr.Markdown
    ex_across_plot: gr.Plot

    ts_steps: gr.Slider
    ts_dropout: gr.Radio
    ts_take: gr.Button
    ts_to_forward: gr.Button
    ts_summary: gr.Markdown
    ts_start: gr.Markdown
    ts_flow: gr.Plot
    ts_heads: gr.Plot
    ts_params: gr.Plot
    ts_params_note: gr.Markdown
    ts_tied: gr.Markdown
    ts_adam: gr.Markdown
    ts_losses: gr.Plot


OUT = ("ts_summary", "ts_start", "ts_flow", "ts_heads", "ts_params", "ts_params_note", "ts_tied", "ts_adam",
       "ts_losses")


def layout() -> LearningParts:
    """Section 3: the step's settings and button, then what it did, from where the gradient starts to the update."""
    with gr.Accordion("3. One training step on this example: loss.backward(), optimizer.step()", open=True):
        with gr.Row(equal_height=True):
            c = {"ts_steps": Take.input("steps", gr.Slider), "ts_dropout": Take.input("dropout", gr.Radio)}
        with gr.Row():
            c["ts_take"] = gr.Button("Take the training step", variant="primary", elem_id="ts-take", min_width=160)
            c["ts_to_forward"] = gr.Button("Its gradient at each step of the forward pass ↑", elem_id="ts-to-forward",
                                           min_width=160)
        c["ts_summary"] = gr.Markdown(PROMPT, elem_id="ts-summary")
        with gr.Accordion("Where the gradient starts: softmax minus the label", open=True):
            c["ts_start"] = gr.Markdown(elem_id="ts-start")
        with gr.Accordion("The gradient back through every step, every token", open=True):
            gr.Markdown(views.FLOW_NOTE)
            c["ts_flow"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False, elem_id="ts-flow")
        with gr.Accordion("How much reaches each head", open=False):
            gr.Markdown(views.HEADS_NOTE)
            c["ts_heads"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False, elem_id="ts-heads")
        with gr.Accordion("Each part's gradient, and the tied word embeddings", open=False):
            gr.Markdown(views.PARAMS_NOTE)
            c["ts_params"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False, elem_id="ts-params")
            c["ts_params_note"] = gr.Markdown(elem_id="ts-params-note")
            c["ts_tied"] = gr.Markdown(elem_id="ts-tied")
        with gr.Accordion("The optimizer's update, worked through", open=True):
            c["ts_adam"] = gr.Markdown(elem_id="ts-adam", latex_delimiters=[
                {"left": "$$", "right": "$$", "display": True}])
            c["ts_losses"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False, elem_id="ts-losses")
    return c


def across_layout() -> Components:
    """In section 1: the example across the model's training, where it kept snapshots."""
    with gr.Accordion("This example across the model's training", open=False):
        c = {"ex_across": gr.Button("Follow it through the model's training", elem_id="ex-across"),
             "ex_across_note": gr.Markdown(elem_id="ex-across-note"),
             "ex_across_plot": gr.Plot(curves.empty_figure(ACROSS_PROMPT, height=200), show_label=False,
                                       elem_id="ex-across-plot")}
    return c


def wire(c: Components, bound: Callable[[Callable], Callable], redrawn: list) -> None:
    """The button takes the step on the example the section above shows; every event that draws another example
    (`redrawn`) clears what a step on the last one showed."""
    c["ts_take"].click(bound(training_step), inputs(c, training_step), [c[name] for name in OUT],
                       api_name="training_step", show_progress_on=[c["ts_summary"]])
    across_out = [c["ex_across_note"], c["ex_across_plot"]]
    c["ex_across"].click(bound(across_training), inputs(c, across_training), across_out, api_name="across_training",
                         show_progress_on=[c["ex_across_plot"]])
    for event in redrawn:
        event.then(cleared, None, [c[name] for name in OUT], api_visibility="private", queue=False)
        event.then(lambda: ("", curves.empty_figure(ACROSS_PROMPT, height=200)), None, across_out,
                   api_visibility="private", queue=False)


def cleared() -> tuple:
    """What the section shows before a step on the example above: the prompt, nothing else."""
    empty = curves.empty_figure(PROMPT, height=200)
    return PROMPT, "", empty, empty, empty, "", "", "", empty


@friendly
@takes(at=At, draw=Draw, take=Take)
def training_step(registry: Registry, at: At, draw: Draw, take: Take, owner: str | None = None) -> Outputs:
    """`take.steps` training steps (1 to EXAMPLE_STEPS) on the example `pretraining_example` draws with the same
    inputs, with dropout ("off", or the "paper"'s 0.1), on a private copy of the model: what the gradient and the
    update were."""
    from bert_demo.inference import encode_input
    from bert_demo.inspection import learning_figures as figures
    from bert_demo.inspection import training_step as training
    from bert_demo.inspection.forward_steps import example_pass

    shown = drawn(registry, at, draw, owner)
    model, tokenizer = shown.loaded.model, shown.loaded.tokenizer
    steps, dropout = take.steps, _dropout(take.dropout)
    examples = read_examples(shown.loaded.folder)
    probe_text = examples.fill_mask[0] if examples and examples.fill_mask else FALLBACK_PROBE
    probe = encode_input(model, tokenizer, probe_text)
    probe["mlm_positions"] = probe["input_ids"] == tokenizer.mask_token_id
    taken = training.take(model, shown.example, shown.config, steps=steps, dropout=dropout, probe=probe)
    if steps == 1 and dropout == 0:  # what the forward pass's steps show of it: kept, so they need not take it again
        _gradients.kept(owner, example_key(shown, at, draw), lambda: taken.at_steps)
    values = example_pass(model, tokenizer, shown.example.batch, fates=shown.example.fates)
    labels, sizes = training.flow(taken, values)
    norms = training.gradient_norms(taken.gradients)
    fates = shown.example.fates
    return {"ts_summary": views.summary_markdown(taken, tokenizer, model_shown(shown, at.snapshot), probe_text, fates),
            "ts_start": views.start_markdown(taken, tokenizer, fates),
            "ts_flow": figures.flow_figure(values.rows, labels, sizes),
            "ts_heads": figures.head_flow_figure(training.head_flow(taken, values)),
            "ts_params": figures.gradient_norms_figure(norms),
            "ts_params_note": views.parts_markdown(norms, taken, training.embedding_gain(model, taken, values)),
            "ts_tied": views.tied_markdown(taken), "ts_adam": views.adam_markdown(taken, paper=draw.recipe == "paper"),
            "ts_losses": figures.losses_figure(taken.losses)}


@friendly
@takes(draw=Draw)
def across_training(registry: Registry, model_name: str, draw: Draw, owner: str | None = None) -> Outputs:
    """The example section 1 draws with the same inputs, under each snapshot the model's run kept and its final
    weights: its loss and each picked label's rank, against the training step."""
    from bert_demo.config import read_metadata
    from bert_demo.inspection import learning_figures as figures
    from bert_demo.inspection.across_training import across

    shown = drawn(registry, At(model_name), draw, owner)
    loaded = shown.loaded
    if loaded.folder is None or not registry.catalog.timeline_steps(model_name, owner):
        return {"ex_across_note": views.no_timeline(loaded.entry.label),
                "ex_across_plot": curves.empty_figure("No snapshots of its training", height=200)}
    final = read_metadata(loaded.folder).get("step")
    moments = across(loaded.model, loaded.folder, shown.example, shown.config.nsp_weight,
                     final if isinstance(final, int) else None)
    labels = [f"{position} {shown.example.pieces[position]}" for position in shown.example.picked]
    return {"ex_across_note": views.across_markdown(moments, labels, model_shown(shown, FINAL)),
            "ex_across_plot": figures.across_figure(moments, labels)}


def _dropout(choice: Any) -> float:
    """The dropout of a choice: one of DROPOUTS."""
    if not isinstance(choice, str) or choice not in DROPOUTS:
        raise ValueError(f"dropout is {' or '.join(map(repr, DROPOUTS))}, not {str(choice)[:40]!r}")
    return DROPOUTS[choice]


_gradients = ByVisitor(GRADIENTS_KEPT, GRADIENTS_MAX_BYTES, lambda kept: kept.nbytes)


def example_key(shown: Drawn, at: At, draw: Draw) -> tuple:
    """What names a drawn example on a model: a visitor's cache of anything computed from it is kept by it."""
    return (*shown.loaded.key(), at.snapshot, replace(draw, typed=draw.typed if draw.source == YOUR_TEXT else None))


def gradients_of(shown: Drawn, key: tuple, owner: str | None) -> Any:
    """The gradient at every step of the example's forward pass in one training step (no dropout), kept for `owner`
    by `key` (`example_key`): the training step above leaves it, or it is taken now."""
    from bert_demo.inspection import training_step as training

    return _gradients.kept(owner, key,
                           lambda: training.gradients_at_steps(shown.loaded.model, shown.example, shown.config))
