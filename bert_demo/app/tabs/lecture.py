"""The Step by step tab's fourth section, the rest of the lecture on how BERT learns, on the example drawn in the first:
a step on a batch beside a step on the example alone (with dropout's noise and gradient accumulation), a weight's
gradient worked by hand (a linear layer, a softmax row, a LayerNorm row), Adam over a short run beside SGD, and the
gradient through the depth across the model's training. The layout, its wiring and its handlers."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import gradio as gr

from bert_demo.app.handlers import FINAL, Components, Outputs, friendly
from bert_demo.app.queries import At, Query, ask, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import lecture_views as views
from bert_demo.app.tabs.drawn import Draw, drawn, model_shown
from bert_demo.app.tabs.learning_views import no_timeline
from bert_demo.config import LIMITS
from bert_demo.data.corpus import source_parts
from bert_demo.data.sources import APP_SOURCES
from bert_demo.inspection import curves
from bert_demo.training.settings import LESSON_BATCH, LESSON_RUN_BATCH, LESSON_RUN_STEPS, TrainConfig

DEPTH_BATCH = 4  # the fixed batch the gradient through the depth is measured on
LINEAR_CHOICES = ["attention Q", "attention K", "attention V", "attention output", "feed-forward 1",
                  "feed-forward 2", "masked-LM decoder"]  # by_hand.LINEAR_PARTS and the decoder, in the pass's order
PROMPT = "Press the button above: it works on the example drawn in section 1."


@dataclass(frozen=True)
class Batch(Query):
    """How big a batch the example joins."""

    PREFIX = "lc"
    size: int = ask(4, "Examples in the batch", bounds=(2, LESSON_BATCH), whole=True,
                    noun="number of examples in the batch", component="lc_batch_size")


@dataclass(frozen=True)
class ByHand(Query):
    """Which weight's gradient is worked by hand: a linear layer's, in a layer, and which head's softmax."""

    PREFIX = "lc"
    part: str = ask("attention Q", "Linear layer", choices=LINEAR_CHOICES)
    layer: int = ask(1, "Layer", bounds=(1, LIMITS["num_hidden_layers"]), whole=True)
    head: int = ask(1, "Head (its softmax)", bounds=(1, LIMITS["num_attention_heads"]), whole=True)


@dataclass(frozen=True)
class Run(Query):
    """The short run Adam is followed over: its steps, and the examples in each batch."""

    PREFIX = "lc"
    steps: int = ask(10, "Steps", bounds=(2, LESSON_RUN_STEPS), whole=True, noun="number of steps",
                     component="lc_run_steps")
    batch_size: int = ask(4, "Examples a batch", bounds=(1, LESSON_RUN_BATCH), whole=True,
                          noun="number of examples a batch", component="lc_run_batch")


class LectureParts(TypedDict):
    """The section's components, by the names its handlers answer with."""

    lc_batch_size: gr.Slider
    lc_batch_go: gr.Button
    lc_batch: gr.Markdown
    lc_part: gr.Dropdown
    lc_layer: gr.Slider
    lc_head: gr.Slider
    lc_hand_go: gr.Button
    lc_hand: gr.Markdown
    lc_run_steps: gr.Slider
    lc_run_batch: gr.Slider
    lc_adam_go: gr.Button
    lc_adam_plot: gr.Plot
    lc_adam: gr.Markdown
    lc_depth_go: gr.Button
    lc_depth_plot: gr.Plot
    lc_depth: gr.Markdown


def layout() -> LectureParts:
    """Section 4: four views, each with its own settings and button."""
    with gr.Accordion("4. Beyond one step: a batch, a gradient by hand, Adam over a run, the depth across training",
                      open=False):
        with gr.Accordion("From one example to a batch; dropout; gradient accumulation", open=True):
            with gr.Row(equal_height=True):
                c = {"lc_batch_size": Batch.input("size", gr.Slider, scale=3),
                     "lc_batch_go": gr.Button("Step on the batch", variant="primary", elem_id="lc-batch-go",
                                              scale=1, min_width=150)}
            c["lc_batch"] = gr.Markdown(PROMPT, elem_id="lc-batch")
        with gr.Accordion("A weight's gradient by hand: dW = δᵀx, a softmax row, a LayerNorm row", open=False):
            with gr.Row(equal_height=True):
                c["lc_part"] = ByHand.input("part", gr.Dropdown, min_width=160)
                c["lc_layer"] = ByHand.input("layer", gr.Slider, min_width=140)
                c["lc_head"] = ByHand.input("head", gr.Slider, min_width=140)
            c["lc_hand_go"] = gr.Button("Work it by hand", variant="primary", elem_id="lc-hand-go")
            c["lc_hand"] = gr.Markdown(PROMPT, elem_id="lc-hand")
        with gr.Accordion("Adam over a short run, and SGD beside it", open=False):
            with gr.Row(equal_height=True):
                c["lc_run_steps"] = Run.input("steps", gr.Slider, min_width=140)
                c["lc_run_batch"] = Run.input("batch_size", gr.Slider, min_width=140)
            c["lc_adam_go"] = gr.Button("Run the steps", variant="primary", elem_id="lc-adam-go")
            c["lc_adam_plot"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False,
                                        elem_id="lc-adam-plot")
            c["lc_adam"] = gr.Markdown(elem_id="lc-adam")
        with gr.Accordion("The gradient through the depth, across the model's training", open=False):
            c["lc_depth_go"] = gr.Button("Measure it at every snapshot", variant="primary", elem_id="lc-depth-go")
            c["lc_depth_plot"] = gr.Plot(curves.empty_figure(PROMPT, height=200), show_label=False,
                                         elem_id="lc-depth-plot")
            c["lc_depth"] = gr.Markdown(elem_id="lc-depth")
    return c


def narrowed_to(config: Any) -> Outputs:
    """The layer and head sliders at a model's range, back at 1: the Step by step tab sets them when it opens and
    when the model changes."""
    return {"lc_layer": gr.Slider(maximum=config.num_hidden_layers, value=1,
                                  info=f"1 to {config.num_hidden_layers}: this model's layers"),
            "lc_head": gr.Slider(maximum=config.num_attention_heads, value=1,
                                 info=f"1 to {config.num_attention_heads}: each layer's heads")}


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Each button answers from the example section 1 draws with the same inputs."""
    c["lc_batch_go"].click(bound(batch_step), inputs(c, batch_step), c["lc_batch"], api_name="batch_step",
                           show_progress_on=[c["lc_batch"]])
    c["lc_hand_go"].click(bound(by_hand), inputs(c, by_hand), c["lc_hand"], api_name="by_hand",
                          show_progress_on=[c["lc_hand"]])
    c["lc_adam_go"].click(bound(adam_over_time), inputs(c, adam_over_time), [c["lc_adam_plot"], c["lc_adam"]],
                          api_name="adam_over_time", show_progress_on=[c["lc_adam_plot"]])
    c["lc_depth_go"].click(bound(depth_across_training), inputs(c, depth_across_training),
                           [c["lc_depth_plot"], c["lc_depth"]], api_name="depth_across_training",
                           show_progress_on=[c["lc_depth_plot"]])


@friendly
@takes(at=At, draw=Draw, batch=Batch)
def batch_step(registry: Registry, at: At, draw: Draw, batch: Batch, owner: str | None = None) -> Outputs:
    """A step on the batch of the drawn example and the next `batch.size` - 1 the trainer draws, beside a step on
    the example alone, on private copies: each example's loss, angle and part of the gradient; dropout;
    accumulation."""
    from bert_demo.inspection import batch_step as batches

    shown = drawn(registry, at, draw, owner)
    examples = batches.draw_batch(shown.documents, shown.loaded.tokenizer, shown.config, shown.example.seed,
                                  batch.size)
    return {"lc_batch": views.batch_markdown(batches.step_on_batch(shown.loaded.model, examples, shown.config))}


@friendly
@takes(at=At, draw=Draw, worked=ByHand)
def by_hand(registry: Registry, at: At, draw: Draw, worked: ByHand, owner: str | None = None) -> Outputs:
    """The drawn example's backward pass worked by hand at a weight of the asked linear layer, a row of the asked
    head's softmax there and a row of that layer's attention LayerNorm, each beside autograd's."""
    from bert_demo.inspection import by_hand as hand

    shown = drawn(registry, at, draw, owner)
    work = hand.work(shown.loaded.model, shown.example.batch, shown.config, worked.part, worked.layer,
                     worked.head)
    rows = [f"{i} {piece}" for i, piece in enumerate(shown.example.shown)]
    return {"lc_hand": views.hand_markdown(work, rows, [rows[i] for i in shown.example.picked])}


@friendly
@takes(at=At, draw=Draw, run=Run)
def adam_over_time(registry: Registry, at: At, draw: Draw, run: Run, owner: str | None = None) -> Outputs:
    """`run.steps` steps of the recipe on the trainer's batches drawn with the seed, on a private copy: a few
    weights' gradients, moments and moves, and SGD's moves on the same gradients."""
    from bert_demo.inspection import learning_figures as figures
    from bert_demo.inspection import over_time

    shown = drawn(registry, at, draw, owner)
    taken = over_time.run(shown.loaded.model, shown.documents, shown.loaded.tokenizer, shown.config,
                          shown.example.seed, run.steps, run.batch_size)
    return {"lc_adam_plot": figures.adam_figure(taken), "lc_adam": views.adam_markdown(taken)}


@friendly
@takes(draw=Draw)
def depth_across_training(registry: Registry, model_name: str, draw: Draw, owner: str | None = None) -> Outputs:
    """The gradient of a fixed batch at every depth, under each snapshot the model's run kept and its final weights:
    the first DEPTH_BATCH examples the trainer draws with the seed from the run's held-out documents (text it never
    trained on), or, for a run on a visitor's text (not kept), from the passages section 1 draws from."""
    from bert_demo.config import read_metadata
    from bert_demo.inspection import learning_figures as figures
    from bert_demo.inspection.across_training import depth_across
    from bert_demo.inspection.batch_step import draw_batch

    shown = drawn(registry, At(model_name), draw, owner)
    loaded = shown.loaded
    if loaded.folder is None or not registry.catalog.timeline_steps(model_name, owner):
        return {"lc_depth_plot": curves.empty_figure("No snapshots of its training", height=200),
                "lc_depth": no_timeline(loaded.entry.label)}
    held = _held_out(shown.trained)
    batch = draw_batch(held or shown.documents, loaded.tokenizer, shown.config, shown.example.seed, DEPTH_BATCH)
    final = read_metadata(loaded.folder).get("step")
    depths = depth_across(loaded.model, loaded.folder, batch, shown.config, final if isinstance(final, int) else None)
    return {"lc_depth_plot": figures.depth_figure(depths),
            "lc_depth": views.depth_markdown(depths, model_shown(shown, FINAL), DEPTH_BATCH,
                                                 held_out=held is not None)}


def _held_out(trained: TrainConfig | None) -> Any:
    """A sample of the run's held-out documents (`pretraining_example.held_out_sample`) where the run trained on
    corpora the app offers (a few MB, read in about a second the first time); None for a visitor's file, a corpus the
    app does not train on (the shipped models' 12.8 M words would take a minute and a GB), or one that cannot be read
    here."""
    from bert_demo.inspection.pretraining_example import held_out_sample

    if trained is None or not set(source_parts(trained.corpus)) <= set(APP_SOURCES):
        return None
    try:
        sample = held_out_sample(trained)
    except (OSError, ValueError):  # a download refused or cut off: the passages of section 1 instead
        return None
    return sample if sample is not None and len(sample.documents) >= 2 else None
