"""The Step by step tab: the paper on screen, on the selected model. How one pre-training example is made (§3.1:
[CLS] A [SEP] B [SEP], segments, the positions picked and their fate, the NSP label) and its loss, then what the
encoder computes from a sentence to its guesses, step by step: the layout, its wiring and its handlers."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

import gradio as gr

from bert_demo.app.handlers import FINAL, Components, Outputs, friendly, load_at, narrowed, timeline_choices
from bert_demo.app.queries import At, Query, ask, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.app.state.kept import ByVisitor, Kept
from bert_demo.app.tabs import learning, lecture
from bert_demo.app.tabs import steps_views as views
from bert_demo.app.tabs.drawn import YOUR_TEXT, Draw, drawn, model_shown, paper_recipe
from bert_demo.config import LIMITS, whole_number
from bert_demo.inspection import curves, figures
from bert_demo.training.settings import PAPER_RECIPE, TrainConfig, recipe_of

FORWARD_NOTE = ("In eval mode, as when the model answers: dropout, which training applies to the hidden states and "
                "the attention (the paper's 0.1; the shipped models trained with none), is off.")
SCROLL_TO_STEP = "() => document.querySelector('#fw-text')?.scrollIntoView({behavior: 'smooth', block: 'start'})"
TYPED, EXAMPLE, VALUES, GRADIENT = "typed", "example", "values", "gradient"  # what the forward pass reads and shows
DECODER_STEP = "Masked-LM head · Decoder, tied to the word embeddings"  # where the training step's gradient is born
READS = [("the sentences typed here", TYPED), ("the example drawn above", EXAMPLE)]
SHOWS = [("its values", VALUES), ("its gradient in one training step", GRADIENT)]


@dataclass(frozen=True)
class Show(Query):
    """What section 2 shows: the forward pass of the sentences typed or of section 1's example, its values or its
    gradient, at one step of the pass (`step`, counted from 0), layer and head, following one token."""

    PREFIX = "fw"
    text_a: str = ask("the cat sat on the [MASK].", "Sentence A (write [MASK] where the model should guess)",
                      component="fw_a")
    text_b: str = ask("it was warm by the fire.", "Sentence B (optional)", component="fw_b")
    layer: int = ask(1, "Layer shown", bounds=(1, LIMITS["num_hidden_layers"]), whole=True)
    head: int = ask(1, "Head shown", bounds=(1, LIMITS["num_attention_heads"]), whole=True)
    step: Any = ask(0, "Step")
    reads: str = ask(TYPED, "The forward pass of", choices=READS)
    shows: str = ask(VALUES, "Each step shows", choices=SHOWS, info="the gradient: of the example drawn above")
    position: int = ask(-1, "Token followed", info="its position; −1: the first [MASK], or picked position")


LINKED = {"model": "model", **{name: Draw.component_name(name) for name in ("source", "recipe", "seed")},
          **{name: Show.component_name(name) for name in ("reads", "shows", "step", "layer", "head")}
          }  # a view's settings, as its link names them (its queries' names): the model chosen above the tabs too
SHARES_KEPT = 16  # (model, corpus, recipe) whose shares over 1,000 draws are kept
PASSES_KEPT = 8  # forward passes kept, so that walking the steps, layers and heads computes each once
PASSES_MAX_BYTES = 160 * 2**20  # and their bytes: a 128-piece pass of BERT-Small holds about 20 MB, every layer's
INTRO = ("How BERT learns and what it computes, on the model selected above: first one pre-training example, made "
         "by the very code that makes the training batches, and its loss; then the forward pass of a sentence, one "
         "step at a time; then one training step on the example, from the loss back to every weight and the "
         "optimizer's update; then what one step does not show: a batch, a gradient by hand, Adam over a run, the "
         "gradient through the depth. All with the model's own numbers (Devlin et al. 2019, §3).")


class StepsParts(learning.LearningParts, lecture.LectureParts):
    """The Step by step tab's components, by the names its handlers answer with (and, last, the training step's)."""

    steps_tab: gr.Tab
    steps_no_link: gr.State  # True unless the page was opened by a link to this tab, whose view is still to draw
    steps_link: gr.Markdown
    steps_drawn: gr.State
    ex_source: gr.Dropdown
    ex_recipe: gr.Radio
    ex_seed: gr.Number
    ex_typed: gr.Textbox
    ex_at: gr.Dropdown
    ex_draw: gr.Button
    ex_another: gr.Button
    ex_pair: gr.Markdown
    ex_tokens: gr.HTML
    ex_shares: gr.Markdown
    ex_recipe_note: gr.Markdown
    ex_loss: gr.Markdown
    ex_loss_table: gr.Markdown
    ex_to_forward: gr.Button
    fw_reads: gr.Radio
    fw_shows: gr.Radio
    fw_a: gr.Textbox
    fw_b: gr.Textbox
    fw_layer: gr.Slider
    fw_head: gr.Slider
    fw_show: gr.Button
    fw_step: gr.Dropdown
    fw_prev: gr.Button
    fw_next: gr.Button
    fw_text: gr.Markdown
    fw_plot: gr.Plot
    fw_position: gr.Number
    fw_path: gr.Markdown
    fw_grid_note: gr.Markdown
    fw_grid: gr.Plot


def layout() -> StepsParts:
    with gr.Tab("Step by step", id="steps", elem_id="tab-steps") as tab:
        gr.Markdown(INTRO)
        c = {"steps_tab": tab, "steps_drawn": gr.State(False), "steps_no_link": gr.State(True),
             "steps_link": gr.Markdown(elem_id="steps-link")}
        with gr.Accordion("1. A pre-training example (§3.1): [CLS] A [SEP] B [SEP], masked", open=True):
            c.update(_example_form())
            c["ex_pair"] = gr.Markdown(elem_id="ex-pair")
            c["ex_tokens"] = gr.HTML(elem_id="ex-tokens")
            with gr.Accordion("How often each choice comes up, over 1,000 draws", open=False):
                c["ex_shares"] = gr.Markdown(elem_id="ex-shares")
            with gr.Accordion("The recipe that drew it", open=False):
                c["ex_recipe_note"] = gr.Markdown(elem_id="ex-recipe-note")
            gr.Markdown("#### The loss of this example, under the selected model")
            c["ex_loss"] = gr.Markdown(elem_id="ex-loss")
            with gr.Accordion("Each picked position's loss", open=False):
                c["ex_loss_table"] = gr.Markdown(elem_id="ex-loss-table")
            c.update(learning.across_layout())
            c["ex_to_forward"] = gr.Button("Run this example through the forward pass ↓", elem_id="ex-to-forward")
        with gr.Accordion("2. The forward pass, step by step (§3, Figure 2)", open=True):
            gr.Markdown(FORWARD_NOTE)
            c.update(_forward_form())
            c["fw_step"] = Show.input("step", gr.Dropdown, choices=[], allow_custom_value=True)
            with gr.Row(elem_id="fw-nav"):
                c["fw_prev"] = gr.Button("◀ Previous step", size="sm", elem_id="fw-prev", min_width=120)
                c["fw_next"] = gr.Button("Next step ▶", size="sm", elem_id="fw-next", min_width=120)
            c["fw_text"] = gr.Markdown(elem_id="fw-text", latex_delimiters=[
                {"left": "$$", "right": "$$", "display": True}])
            c["fw_plot"] = gr.Plot(curves.empty_figure("Press “Show the steps”", height=240), show_label=False,
                                   elem_id="fw-plot")
            with gr.Accordion("Every layer at once: one token's path up the layers, and this step in every layer",
                              open=False):
                c["fw_position"] = Show.input("position", gr.Number, precision=0, minimum=-1)
                c["fw_path"] = gr.Markdown(elem_id="fw-path")
                c["fw_grid_note"] = gr.Markdown(elem_id="fw-grid-note")
                c["fw_grid"] = gr.Plot(curves.empty_figure("", height=60), show_label=False, elem_id="fw-grid")
        c.update(learning.layout())
        c.update(lecture.layout())
    return c


def _example_form() -> Components:
    with gr.Row(equal_height=True):
        c = {"ex_source": Draw.input("source", gr.Dropdown, scale=2, min_width=160),
             "ex_recipe": Draw.input("recipe", gr.Radio, scale=3, min_width=220),
             "ex_seed": Draw.input("seed", gr.Number, scale=1,
                                   min_width=110)}  # no precision: 1.5 reaches the handler, which refuses it
    c["ex_typed"] = Draw.input("typed", gr.Textbox, lines=4, max_lines=10, visible=False)
    c["ex_at"] = gr.Dropdown(choices=[("final weights", FINAL)], value=FINAL, label="The model at training step",
                             visible=False, elem_id="ex-at",
                             info="the same as the header's: the run's snapshots, from its random start")
    with gr.Row():
        c["ex_draw"] = gr.Button("Draw", variant="primary", elem_id="ex-draw", min_width=120)
        c["ex_another"] = gr.Button("Draw another", elem_id="ex-another", min_width=120)
    return c


def _forward_form() -> Components:
    with gr.Row(equal_height=True):
        c = {"fw_reads": Show.input("reads", gr.Radio), "fw_shows": Show.input("shows", gr.Radio)}
    with gr.Row():
        c |= {"fw_a": Show.input("text_a", gr.Textbox), "fw_b": Show.input("text_b", gr.Textbox)}
    with gr.Row(equal_height=True):
        # the API takes any model's sizes (gradio refuses a value past a slider's maximum, and the handler checks
        # the model's); the page narrows them to the model's when the tab opens
        c["fw_layer"], c["fw_head"] = Show.input("layer", gr.Slider), Show.input("head", gr.Slider)
    c["fw_show"] = gr.Button("Show the steps", variant="primary", elem_id="fw-show")
    return c


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Draw (and Draw another, with a new seed), Show the steps and the step picker; the tab draws both views the
    first time it opens, and again when the model changes once it has."""
    example_in, example_out = inputs(c, pretraining_example), [c[name] for name in EXAMPLE_OUT]
    forward_in = inputs(c, forward_steps)
    forward_out = [c[name] for name in FORWARD_OUT]
    drawn_again = [c["ex_draw"].click(bound(pretraining_example), example_in, example_out,
                                      api_name="pretraining_example", show_progress_on=[c["ex_tokens"]])]
    drawn_again.append(c["ex_another"].click(another_seed, None, c["ex_seed"], api_visibility="private",
                                             queue=False).then(
        bound(pretraining_example), example_in, example_out, api_visibility="private",
        show_progress_on=[c["ex_tokens"]]))
    for event in drawn_again:  # a refused draw leaves no example of the last one on screen, as if it answered
        event.failure(no_example, None, example_out, api_visibility="private", queue=False)
    c["ex_source"].change(_typed_box, c["ex_source"], c["ex_typed"], api_visibility="private", queue=False)
    c["ex_at"].input(lambda at: at, c["ex_at"], c["step"], api_visibility="private", queue=False)  # the header's
    c["step"].change(lambda at: at, c["step"], c["ex_at"], api_visibility="private", queue=False)
    c["model"].change(bound(timeline_of), c["model"], c["ex_at"], api_visibility="private", queue=False)
    gr.on([c["fw_show"].click, c["fw_a"].submit, c["fw_b"].submit, c["fw_step"].input, c["fw_layer"].release,
           c["fw_head"].release, c["fw_position"].submit],
          bound(forward_steps), forward_in,
          forward_out, api_name="forward_steps", trigger_mode="always_last", show_progress_on=[c["fw_plot"]])
    chosen = [c["fw_reads"], c["fw_shows"]]  # a gradient needs the example's labels: choosing one fits the other
    for radio, fitted in ((c["fw_reads"], shows_fitted), (c["fw_shows"], reads_fitted)):
        radio.input(fitted, chosen, chosen, api_visibility="private", queue=False).then(
            bound(forward_steps), forward_in, forward_out, api_visibility="private", show_progress_on=[c["fw_plot"]])
    c["ex_to_forward"].click(lambda: EXAMPLE, None, c["fw_reads"], api_visibility="private", queue=False).then(
        bound(forward_steps), forward_in, forward_out, api_visibility="private", show_progress_on=[c["fw_plot"]])
    c["ts_to_forward"].click(to_gradient, c["fw_step"], [c["fw_reads"], c["fw_shows"], c["fw_step"]],
                             api_visibility="private", queue=False, js=SCROLL_TO_STEP).then(
        bound(forward_steps), forward_in, forward_out, api_visibility="private", show_progress_on=[c["fw_plot"]])
    for event in drawn_again:  # the forward pass of the example: of the new one
        event.then(bound(forward_steps), forward_in, forward_out, api_visibility="private",
                   show_progress_on=[c["fw_plot"]])
    for button, by in ((c["fw_prev"], -1), (c["fw_next"], 1)):
        button.click(_mover(by), c["fw_step"], c["fw_step"], api_visibility="private", queue=False).then(
            bound(forward_steps), forward_in, forward_out, api_visibility="private",
            show_progress_on=[c["fw_plot"]])
    both_in = inputs(c, steps_opened, opened="steps_drawn")
    both_out = [*example_out, *forward_out]
    sliders = [c[name] for name in SLIDERS]
    c["steps_tab"].select(bound(steps_opened), both_in, [*both_out, *sliders], api_visibility="private",
                          show_progress_on=[c["ex_tokens"], c["fw_plot"]])  # a first draw counts the shares: seconds
    drawn_again.append(gr.on([c["model"].change, c["step"].change], bound(steps_refreshed), both_in,
                             [*both_out, *sliders], api_visibility="private", show_progress="hidden"))
    learning.wire(c, bound, drawn_again)
    lecture.wire(c, bound)
    linked = [c[name] for name in LINKED.values()]
    gr.on([component.change for component in linked], link_to, linked, c["steps_link"], api_visibility="private",
          queue=False)
    c["page"].load(opened_by_link, None, [c["tabs"], c["steps_no_link"], *linked], api_visibility="private",
                   queue=False).then(bound(steps_opened), inputs(c, steps_opened, opened="steps_no_link"),
                                     [*both_out, *sliders], api_visibility="private",
                                     show_progress_on=[c["ex_tokens"], c["fw_plot"]])


def link_to(*values: Any) -> str:
    """A link to the view on screen, with its settings in the page's address (LINKED): for slides, or for students
    to open the same view."""
    query = {name: value for name, value in zip(LINKED, values) if value not in (None, "")}
    if "step" in query:
        query["step"] = _step_index(query["step"], 10**6) + 1  # as the picker numbers it, from 1
    return (f"[Link to this view](?{urlencode({'tab': 'steps', **query})}): this example and step, for slides or "
            "students.")


def opened_by_link(request: gr.Request) -> tuple:
    """The page opened by such a link: the tab, whether both views are still to be drawn (False: the link's, drawn
    next as if the tab had opened; True: nothing to draw), and each setting the address gives (one it cannot read is
    left as it is)."""
    asked = dict(getattr(request, "query_params", {}) or {})
    if asked.get("tab") != "steps":
        return (gr.skip(), True, *(gr.skip(),) * len(LINKED))
    values = []
    for name in LINKED:
        value = asked.get(name)
        if name in ("seed", "layer", "head", "step") and value is not None:
            value = int(value) - (name == "step") if value.isdigit() else None
        values.append(gr.skip() if value is None else value)
    return (gr.Tabs(selected="steps"), False, *values)


def timeline_of(registry: Registry, model_name: str, owner: str | None = None) -> Outputs:
    """The tab's own choice of the model's training step: the header's choices, shown where the model kept
    snapshots of its training."""
    try:
        steps = registry.catalog.timeline_steps(model_name, owner)
    except ValueError:  # the header says what is wrong with the name
        steps = []
    return {"ex_at": gr.Dropdown(choices=timeline_choices(steps), value=FINAL, visible=bool(steps))}


def no_example() -> tuple:
    """What section 1 shows after a refused draw: the message above says why; no example of the last draw."""
    return ("*No example: the message above says what to change.*", "", "", "", "", "", True)


def another_seed() -> int:
    """A new seed, shown, so that a class can ask for the same draw again."""
    return random.randrange(1, 100_000)


def shows_fitted(reads: str, shows: str) -> tuple[str, str]:
    """The sentences typed here have no labels, so no gradient: choosing them shows their values."""
    return reads, VALUES if reads == TYPED else shows


def reads_fitted(reads: str, shows: str) -> tuple[str, str]:
    """A gradient is the example's, drawn above: choosing it reads that example."""
    return EXAMPLE if shows == GRADIENT else reads, shows


def to_gradient(index: Any) -> tuple[str, str, int]:
    """From the training step to its gradient in the forward pass: the example drawn above, its gradient, at the
    step the picker shows, or at the decoder where the loss has no gradient at that step."""
    from bert_demo.inspection.forward_steps import SPECS, STEP_NAMES

    try:
        index = _step_index(index, len(SPECS))
    except ValueError:
        index = 0
    if not SPECS[index].gradient:
        index = STEP_NAMES.index(DECODER_STEP)
    return EXAMPLE, GRADIENT, index


def _typed_box(source: str) -> gr.Textbox:
    return gr.Textbox(visible=source == YOUR_TEXT)


def _mover(by: int) -> Callable[[Any], int]:
    """A handler that moves the step picker by `by` steps, staying within them."""
    def move(index: Any) -> int:
        from bert_demo.inspection.forward_steps import STEP_NAMES

        current = _step_index(index, len(STEP_NAMES))
        return min(max(current + by, 0), len(STEP_NAMES) - 1)
    return move


@friendly
@takes(at=At, draw=Draw)
def pretraining_example(registry: Registry, at: At, draw: Draw, owner: str | None = None) -> Outputs:
    """One pre-training example drawn with its seed from a corpus (or typed paragraphs) under the model's recipe or
    the paper's, its input position by position, the shares of each choice over 1,000 draws, and its loss."""
    from bert_demo.inspection import pretraining_example as examples

    shown = drawn(registry, at, draw, owner)
    loaded, example, ours = shown.loaded, shown.example, shown.ours
    loss = examples.loss(loaded.model, example, loaded.tokenizer, shown.config.nsp_weight)
    sample = shown.documents if draw.source == YOUR_TEXT else examples.corpus_sample(draw.source, 0)
    key = (*loaded.key(), at.snapshot, None if draw.source == YOUR_TEXT else draw.source)
    return {"ex_pair": views.pair_markdown(example, draw.recipe, shown.trained is not None),
            "ex_tokens": views.tokens_html(example),
            "ex_shares": views.shares_markdown(_shares_of(key, sample, loaded.tokenizer, ours),
                                               _shares_of(key, sample, loaded.tokenizer, paper_recipe(ours)),
                                               recipe_of(ours)),
            "ex_recipe_note": views.recipe_note(shown.config),
            "ex_loss": views.loss_markdown(loss, example, model_shown(shown, at.snapshot)),
            "ex_loss_table": views.loss_table(loss, example), "steps_drawn": True}


@friendly
@takes(at=At, draw=Draw, show=Show)
def forward_steps(registry: Registry, at: At, draw: Draw, show: Show, owner: str | None = None) -> Outputs:
    """One step of the forward pass on the model, `show`'s layer and head shown inside the encoder: its equation,
    shape and line of model.py, and its values (or, where `show` asks for the gradient, its gradient in one training
    step) as a picture; and the step picker. It reads sentence A (and B) as typed, or the example section 1 draws
    (`draw`; its batch as training reads it). Every layer at once: the token at `show.position` (-1: the first
    guessed) up through the layers, and the step in every layer (and head)."""
    from bert_demo.inspection import depth
    from bert_demo.inspection import forward_steps as forward
    from bert_demo.inspection.training_step import gradient_pass

    index, layer, head, reads, shows = _step_index(show.step, len(forward.STEP_NAMES)), show.layer, show.head, \
        show.reads, show.shows
    if reads not in (TYPED, EXAMPLE) or shows not in (VALUES, GRADIENT):
        raise ValueError(f"the forward pass reads {TYPED!r} or {EXAMPLE!r} and shows {VALUES!r} or {GRADIENT!r}")
    if shows == GRADIENT and reads == TYPED:
        raise ValueError("a gradient needs the labels a training example has: choose “the example drawn above”")
    if reads == EXAMPLE:
        example = drawn(registry, at, draw, owner)
        loaded, key = example.loaded, learning.example_key(example, at, draw)
        forward.check_layer_head(loaded.model.config, layer, head)
        values = _passes.kept(owner, key, lambda: forward.example_pass(
            loaded.model, loaded.tokenizer, example.example.batch, layer, head, example.example.fates))
    else:
        loaded = load_at(registry, at.model_name, at.snapshot, owner)
        asked = (show.text_a, (show.text_b or "").strip() or None)
        forward.check_layer_head(loaded.model.config, layer, head)
        values = _passes.kept(owner, (*loaded.key(), at.snapshot, *asked),
                              lambda: forward.forward_pass(loaded.model, loaded.tokenizer, *asked, layer, head))
    values = replace(values, layer=layer - 1, head=head - 1)  # a pass keeps every layer: any is shown from it
    spec = forward.SPECS[index]
    picker = gr.Dropdown(choices=[(f"{i + 1}. {name}", i) for i, name in enumerate(forward.STEP_NAMES)], value=index)
    position = whole_number(show.position, "the token followed")
    position = values.guessed[0] if position == -1 else position
    path = depth.token_path(loaded.model, loaded.tokenizer, values, position)
    every = {"fw_path": views.path_markdown(path, position, values.tokens[position])}
    if shows == GRADIENT and not spec.gradient:
        return {"fw_text": views.no_gradient_markdown(spec, index, len(forward.SPECS)),
                "fw_plot": curves.empty_figure("No gradient at this step", height=200), "fw_step": picker,
                "fw_grid_note": "", "fw_grid": curves.empty_figure("", height=60), **every}
    if shows == GRADIENT:
        values = gradient_pass(learning.gradients_of(example, key, owner), values)
    shown, grid = forward.step(spec, values), depth.every_layer(spec, values)
    text = views.step_markdown(shown, index, len(forward.SPECS), forward.source_line(shown.code))
    return {"fw_text": views.gradient_note(shown) + text if shows == GRADIENT else text,
            "fw_plot": figures.step_figure("", shown.values, shown.rows, shown.columns, shown.cells,
                                           shown.probabilities and shows == VALUES),
            "fw_step": picker, "fw_grid_note": views.grid_note(shown, shows == GRADIENT, len(grid), spec.per_head),
            "fw_grid": figures.step_grid_figure(grid, values.heads if spec.per_head else 4),
            **every}


EXAMPLE_OUT = ("ex_pair", "ex_tokens", "ex_shares", "ex_recipe_note", "ex_loss", "ex_loss_table", "steps_drawn")
FORWARD_OUT = ("fw_text", "fw_plot", "fw_step", "fw_path", "fw_grid_note", "fw_grid")
SLIDERS = ("fw_layer", "fw_head", "lc_layer", "lc_head")  # narrowed to the model when the tab opens or it changes


@friendly
@takes(at=At, draw=Draw, show=Show)
def steps_opened(registry: Registry, at: At, draw: Draw, show: Show, opened: bool = False,
                 owner: str | None = None) -> Outputs:
    """The first time the tab opens (or the page opens on a link to it): the layer and head sliders narrowed to the
    model, and both views drawn (as Fill-mask opens answered); afterwards, nothing."""
    if opened:
        return _unchanged()
    return _both(registry, at, draw, show, owner)


@takes(at=At, draw=Draw, show=Show)
def steps_refreshed(registry: Registry, at: At, draw: Draw, show: Show, opened: bool = False,
                    owner: str | None = None) -> Outputs:
    """Another model, or another step of its training: where the tab has been drawn, its sliders narrowed and both
    views drawn again on it, so that no answer of the model before stays on screen; elsewhere, nothing."""
    if not opened:
        return _unchanged()
    try:
        registry.catalog.config_of(at.model_name, owner)
    except ValueError:  # the header says what is wrong with the name
        return _unchanged()
    return friendly(_both)(registry, at, draw, show, owner)


def _unchanged() -> Outputs:
    return {name: gr.skip() for name in (*EXAMPLE_OUT, *FORWARD_OUT, *SLIDERS)}


def _both(registry: Registry, at: At, draw: Draw, show: Show, owner: str | None) -> Outputs:
    """Both views on the model (how section 1 draws, and what section 2 shows), the layer and head shown kept within
    the model's range, the sliders narrowed to it."""
    config = registry.catalog.config_of(at.model_name, owner)[1]
    fitted = replace(show, layer=min(show.layer, config.num_hidden_layers),
                     head=min(show.head, config.num_attention_heads))
    return {**pretraining_example(registry, at=at, draw=draw, owner=owner),
            **forward_steps(registry, at=at, draw=draw, show=fitted, owner=owner),
            "fw_layer": narrowed(show.layer, config.num_hidden_layers,
                                 f"1 to {config.num_hidden_layers}: this model's layers"),
            "fw_head": narrowed(show.head, config.num_attention_heads,
                                f"1 to {config.num_attention_heads}: each layer's heads"),
            **lecture.narrowed_to(config)}


_shares = Kept(SHARES_KEPT)
_passes = ByVisitor(PASSES_KEPT, PASSES_MAX_BYTES, lambda kept: kept.nbytes)  # a pass is no one else's


def _shares_of(key: tuple, documents: Any, tokenizer: Any, config: TrainConfig) -> Any:
    """The shares over 1,000 draws of a recipe on a sample, kept by the model (`key`: its name, folder and step)
    and the named corpus (a typed text's are counted afresh: they are quick)."""
    from bert_demo.inspection import pretraining_example as examples

    if key[-1] is None:
        return examples.shares(documents, tokenizer, config)
    recipe = tuple(sorted((k, str(v)) for k, v in config.to_dict().items()
                          if k in (*PAPER_RECIPE, "seq_len", "max_predictions")))
    return _shares.kept((*key, recipe), lambda: examples.shares(documents, tokenizer, config))


def _step_index(index: Any, count: int) -> int:
    """A step picker's value as a step's index, checked."""
    if index in (None, ""):
        return 0
    return whole_number(index, "the step", 0, count - 1)
