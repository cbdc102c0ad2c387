"""The Attention tab: which tokens each token looks at, one head, a layer's average or the rollout, across a
sentence pair, at any step of a run's training: the layout, its wiring and its handlers."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import gradio as gr

from bert_demo.app.handlers import NO_COMPARE, Components, Outputs, friendly, load_at, step_name
from bert_demo.app.queries import At, Query, ask, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.app.folders import Examples
from bert_demo.app.tabs import attention_views as views
from bert_demo.config import LIMITS
from bert_demo.inspection import curves, figures

VIEWS = {"head": "one head", "average": "average of the heads", "rollout": "rollout up to this layer"}
VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT = VIEWS.values()
PAIR_FILTERS = ("every token", "sentence A → B", "sentence B → A")
PAIR_ALL, PAIR_A_TO_B, PAIR_B_TO_A = PAIR_FILTERS
SCROLL_TO_MAP = "() => document.querySelector('#att-plot')?.scrollIntoView({behavior: 'smooth', block: 'start'})"


@dataclass(frozen=True)
class Look(Query):
    """What the attention is read on: the sentences, and the layer and head looked at (the API takes any model's
    sizes, clamped to the model's by the handler; the page narrows the sliders to the model's)."""

    text_a: str = ask("the cat sat on the mat.", "Sentence A", component="att_a")
    text_b: str = ask("", "Sentence B (optional)", component="att_b")
    layer: float = ask(1, "Layer", bounds=(1, LIMITS["num_hidden_layers"]), component="layer")
    head: float = ask(1, "Head", bounds=(1, LIMITS["num_attention_heads"]), component="head")


@dataclass(frozen=True)
class Drawing(Query):
    """How the map is drawn: one head, the layer's average or the rollout; [CLS] and [SEP] hidden or not; the whole
    pair or one sentence's attention to the other; and the same map at another step of training beside it."""

    view: str = ask(VIEW_HEAD, "Show", choices=VIEWS.values(), component="view")
    hide: bool = ask(False, "Hide [CLS] and [SEP]", component="hide")
    pair: str = ask(PAIR_ALL, "Pair", choices=PAIR_FILTERS, component="pair",
                    info="with a sentence B: only A's attention to B, or B's to A")
    compare: str = ask(NO_COMPARE, "Compare with the same map at step", choices=[("no comparison", NO_COMPARE)],
                       component="compare")


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#pair { min-width: min(260px, 100%) !important; }  /* gradio puts both in one form: on a phone, Hide wraps below */
#hide { min-width: min(200px, 100%) !important; }
#model-view .grid-container {  /* bertviz's model view: a row a layer, small squares that shrink on a phone */
  grid-template-columns: repeat(var(--grid-cols), minmax(0, 84px)); grid-template-rows: none; grid-auto-rows: auto; }
#model-view .thumbnail-item { aspect-ratio: 1; }
#model-view .grid-wrap { min-height: 0 !important; max-height: none !important; height: auto !important; }
#model-view .caption-label { max-width: 100%; padding: 0 0.25em; }
@media (max-width: 640px) {  /* a phone: four heads a row, each its caption whole ("L1 H1"), a layer on two rows */
  #model-view .grid-container { grid-template-columns: repeat(4, minmax(0, 84px)); } }
@media (max-width: 640px) {  /* a phone: an attention map's token labels small enough for its rows, and no */
  #att-plot .xtick text, #att-plot .ytick text, #compare-plot .xtick text, #compare-plot .ytick text {
    font-size: 9px !important; }  /* blank below its square map, which the phone's width sizes */
  #att-plot .js-plotly-plot, #compare-plot .js-plotly-plot { max-height: calc(100vw + 80px); overflow: hidden; } }
#neuron-plot .js-plotly-plot { min-width: 760px; }  /* three panels side by side: a phone scrolls them */
#neuron-plot { overflow-x: auto !important; }  /* the chart is the block's own child: the block scrolls */
"""


class AttentionParts(TypedDict):
    """The Attention tab's components, by the names its handlers answer with."""

    att_a: gr.Textbox
    att_b: gr.Textbox
    layer: gr.Slider
    head: gr.Slider
    view: gr.Radio
    pair: gr.Radio
    hide: gr.Checkbox
    compare: gr.Dropdown
    att_button: gr.Button
    att_examples_box: gr.Column
    att_examples: NotRequired[gr.Examples]  # only with the shipped model's examples
    att_caption: gr.Markdown
    att_plot: gr.Plot
    compare_plot: gr.Plot
    grid_plot: gr.Plot
    model_view: gr.Gallery
    neuron_token: gr.Dropdown
    neuron_button: gr.Button
    neuron_plot: gr.Plot
    attention_tab: gr.Tab


def layout(examples: Examples | None) -> AttentionParts:
    first = examples.attention[0] if examples else ("the cat sat on the mat.", "", 1, 1, "head", False, "")
    with gr.Tab("Attention", id="attention", elem_id="tab-attention") as tab:
        gr.Markdown("Which tokens does each token look at? Pick a layer and a head; hover a cell for the exact "
                    "weight. Give a second sentence to see attention across the pair.")
        with gr.Row():
            c = {"att_a": Look.input("text_a", gr.Textbox, value=first[0]),
                 "att_b": Look.input("text_b", gr.Textbox, value=first[1])}
        with gr.Row(equal_height=True):
            c["layer"] = Look.input("layer", gr.Slider, value=first[2], step=1, scale=2)
            c["head"] = Look.input("head", gr.Slider, value=first[3], step=1, scale=2)
            c["view"] = Drawing.input("view", gr.Radio, value=VIEWS[first[4]], scale=4)
        with gr.Row(equal_height=True):
            c["pair"] = Drawing.input("pair", gr.Radio, scale=3, min_width=260)
            c["hide"] = Drawing.input("hide", gr.Checkbox, value=first[5], scale=1, min_width=200)
        c["compare"] = Drawing.input("compare", gr.Dropdown, visible=False,
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
            c["att_plot"] = gr.Plot(blank()["att_plot"], show_label=False, elem_id="att-plot", min_width=300)
            c["compare_plot"] = gr.Plot(visible=False, show_label=False, elem_id="compare-plot", min_width=300)
        c["grid_plot"] = gr.Plot(blank()["grid_plot"], show_label=False, elem_id="grid-plot")
        with gr.Accordion("Model view: every head of every layer (click one to open it above)", open=True):
            c["model_view"] = gr.Gallery(show_label=False, elem_id="model-view", columns=4, height="auto",
                                         allow_preview=False, object_fit="contain", interactive=False)
        with gr.Accordion("Neuron view: how the head above weighs the tokens for one of them", open=False):
            gr.Markdown(views.NEURON_VIEW)
            with gr.Row(equal_height=True):
                c["neuron_token"] = gr.Dropdown(choices=[], label="Query token", elem_id="neuron-token", scale=3,
                                                allow_custom_value=True)
                c["neuron_button"] = gr.Button("Show how", elem_id="neuron-button", scale=1, min_width=120)
            c["neuron_plot"] = gr.Plot(blank()["neuron_plot"], show_label=False, elem_id="neuron-plot")
    c["attention_tab"] = tab
    return c


def blank() -> Outputs:
    """The tab's answers as they are before any question: what another model leaves until it answers (the query
    tokens too: another model may cut the sentence into other pieces). Updates, not components: a component made
    while the page is laid out joins it."""
    return {"att_caption": "", "att_plot": curves.empty_figure("Press “Show attention”", height=360),
            "compare_plot": gr.update(visible=False),
            "grid_plot": curves.empty_figure("All heads of the layer, side by side", height=240), "model_view": None,
            "neuron_token": gr.update(choices=[], value=None),
            "neuron_plot": curves.empty_figure("Choose a query token, then Show how", height=240)}


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Any change of the sentences, layer, head, view, pair filter or comparison redraws (the last change wins);
    opening the tab draws the current example."""
    asked = inputs(c, attention)
    outputs = [c[name] for name in ("att_plot", "grid_plot", "att_caption", "compare_plot", "model_view",
                                    "neuron_token")]
    gr.on([c["att_button"].click, c["att_a"].submit, c["att_b"].submit, c["layer"].release, c["head"].release,
           c["view"].input, c["hide"].input, c["pair"].input, c["compare"].input], bound(attention), asked, outputs,
          api_name="attention", trigger_mode="always_last", show_progress_on=[c["att_plot"]])
    c["att_button"].click(None, js=SCROLL_TO_MAP, queue=False)  # at 1400 x 1000 the map starts below the fold
    c["view"].change(_head_control, c["view"], c["head"], api_visibility="private", queue=False)
    c["attention_tab"].select(bound(attention), asked, outputs, api_visibility="private",
                              show_progress_on=[c["att_plot"]])
    opened = c["model_view"].select(_head_opened, None, [c["layer"], c["head"], c["view"]],
                                    api_visibility="private", queue=False)
    opened.then(bound(attention), asked, outputs, api_visibility="private", show_progress_on=[c["att_plot"]])
    opened.then(None, js=SCROLL_TO_MAP, queue=False)
    gr.on([c["neuron_button"].click, c["neuron_token"].input], bound(neuron),
          inputs(c, neuron, position="neuron_token"),
          c["neuron_plot"], api_name="neuron", show_progress_on=[c["neuron_plot"]])


def _head_opened(event: gr.SelectData) -> tuple:
    """A click on the model view's thumbnail `event.index` (layer by layer, head by head) opens that head."""
    layer, head = event.value["caption"].split()  # "L2 H3"
    return int(layer[1:]), int(head[1:]), VIEWS["head"]


def _head_control(view: str) -> gr.Slider:
    return view_changed(view)["head"]


@friendly
@takes(at=At, look=Look, drawing=Drawing)
def attention(registry: Registry, at: At, look: Look, drawing: Drawing, owner: str | None = None) -> Outputs:
    """The chosen map (one head, the layer's average or the rollout), all heads of the layer, and a caption; the
    pair filter keeps only sentence A's attention to B (or B's to A); a comparison draws the same map at another
    step."""
    text_b = (look.text_b or "").strip() or None
    if drawing.pair != PAIR_ALL and text_b is None:
        raise ValueError(f"the “{drawing.pair}” filter needs a sentence B: write one, or choose “{PAIR_ALL}”")
    shown = _attention_map(load_at(registry, at.model_name, at.snapshot, owner, encoder=True), look, text_b,
                           drawing)
    comparing = drawing.compare != NO_COMPARE
    outputs = {"att_plot": figures.attention_heatmap(shown.rows, shown.matrix,
                                                   step_name(at.snapshot) if comparing else shown.title,
                                                   keys=shown.cols),
               "grid_plot": figures.attention_grid(shown.rows, shown.heads, f"All {len(shown.heads)} heads of layer "
                                                 f"{shown.layer}", keys=shown.cols),
               "att_caption": views.attention_caption(len(shown.rows), len(shown.cols), shown.layers,
                                                     len(shown.heads), drawing.view == VIEW_ROLLOUT, shown.source),
               "compare_plot": gr.Plot(visible=False),
               "model_view": gr.Gallery(figures.attention_thumbnails(shown.weights), columns=shown.weights.shape[1]),
               "neuron_token": gr.Dropdown(choices=[(f"{i}: {t}", i) for i, t in enumerate(shown.tokens)],
                                           value=min(1, len(shown.tokens) - 1))}
    if comparing:
        other = _attention_map(load_at(registry, at.model_name, drawing.compare, owner, encoder=True), look, text_b,
                               drawing)
        outputs["compare_plot"] = gr.Plot(figures.attention_heatmap(other.rows, other.matrix,
                                                                  step_name(drawing.compare),
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
    tokens: list[str]  # every token, unfiltered
    weights: Any  # every head of every layer, unfiltered: weights[layer, head, query, key]


def _attention_map(loaded: Any, look: Look, text_b: str | None, drawing: Drawing) -> _Map:
    """The map `drawing` asks for, of `look`'s sentences (sentence B as given: None where there is none)."""
    from bert_demo import inference
    from bert_demo.inspection.heads import attention_rollout, drop_tokens

    text_a, view, pair = look.text_a, drawing.view, drawing.pair
    tokens, weights = inference.attention(loaded.model, loaded.tokenizer, text_a, text_b)
    n_layers, n_heads = weights.shape[:2]
    layer, head = min(max(int(look.layer), 1), n_layers), min(max(int(look.head), 1), n_heads)
    if view == VIEW_ROLLOUT:
        matrix = attention_rollout(weights)[layer - 1]  # (T, T)
        title = f"Attention rollout through layer{f's 1–{layer}' if layer > 1 else ' 1'}"
    elif view == VIEW_AVERAGE:
        matrix = weights[layer - 1].mean(dim=0)  # (T, T)
        title = f"Layer {layer}, average of its {n_heads} heads"
    else:
        matrix, title = weights[layer - 1, head - 1], f"Layer {layer}, head {head}"
    heads, shown = weights[layer - 1], tokens  # (A, T, T)
    segment = inference.segments(loaded.tokenizer, text_a, text_b)
    if drawing.hide:
        segment = [s for s, t in zip(segment, tokens) if t not in ("[CLS]", "[SEP]")]
        shown, matrix = drop_tokens(tokens, matrix)
        heads = drop_tokens(tokens, heads)[1]
        title += " ([CLS]/[SEP] hidden, rows renormalised)"
    keys, source = shown, None
    if pair != PAIR_ALL:
        source, target = ("A", "B") if pair == PAIR_A_TO_B else ("B", "A")
        rows = [i for i, s in enumerate(segment) if s == source]
        cols = [i for i, s in enumerate(segment) if s == target]
        matrix, heads = matrix[rows][:, cols], heads[:, rows][:, :, cols]
        shown, keys = [shown[i] for i in rows], [shown[i] for i in cols]
        title += f", sentence {source} → sentence {target}"
    return _Map(shown, keys, matrix, heads, title, layer, n_layers, source, tokens, weights)


def view_changed(view: str) -> Outputs:
    """The Head slider only matters for the one-head view: grey it out in the others."""
    return {"head": gr.Slider(interactive=view == VIEW_HEAD)}


@friendly
@takes(at=At, look=Look)
def neuron(registry: Registry, at: At, look: Look, position: float | None = None, owner: str | None = None
           ) -> Outputs:
    """How the head `look` names weighs the tokens for the token at `position` (bertviz's neuron view): its query
    vector, every key vector, their product and the weights it makes."""
    from bert_demo.inspection.heads import query_key

    position = query_position(position)
    loaded = load_at(registry, at.model_name, at.snapshot, owner, encoder=True)
    text_b = (look.text_b or "").strip() or None
    layer, head = int(look.layer), int(look.head)
    made = query_key(loaded.model, loaded.tokenizer, look.text_a, text_b, layer, head, position)
    title = f"Layer {layer}, head {head}: how “{made.tokens[position]}” weighs each token"
    return {"neuron_plot": figures.neuron_figure(made.tokens, position, made.query, made.keys, made.weights, title)}


def query_position(value: Any) -> int:
    """The query token's number as the dropdown gives it (an int), or an API caller (a float or text): a whole
    number, or a message that says what to give."""
    from bert_demo import inference

    if value is None or value == "":
        raise ValueError("choose a query token first: press Show attention, then pick one of its tokens")
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number.is_integer():  # inf and nan are not whole numbers either
        raise ValueError(f"the query token is given by its number (0 for [CLS], 1 for the first word, ...), not "
                         f"{inference.echo(value)}")
    return int(number)
