"""The page's header: the model every tab shows, chosen once, with its training step; and what changes when the
choice does (the header line, the Model tab, sliders, head switches, the timeline, the examples, and every answer on
screen: cleared at once, Fill-mask's asked again of the new model): the layout, its wiring and its handlers."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import gradio as gr

from bert_demo.app import text
from bert_demo.app.folders import SHIPPED, training_words
from bert_demo.app.handlers import FINAL, NO_COMPARE, Components, Outputs, brief, go_to, narrowed, timeline_choices
from bert_demo.app.queries import inputs
from bert_demo.app.registry import Registry
from bert_demo.app.state.catalog import OPENS_ON
from bert_demo.app.tabs import attention, embeddings, fill, model_views, nsp
from bert_demo.app.tabs.heads import head_names

# a chart drawn while its tab was hidden (an answer that came while the visitor looked at another tab) has plotly's
# default width, wider than a phone: cut off at both sides. Plotly redraws its charts to their boxes on a resize
REDRAW_CHARTS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }"


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#model-summary p { margin: 0.45em 0 0 0; color: var(--body-text-color-subdued); }
@media (max-width: 640px) {  /* a phone: the five starts in two rows, each on one line */
  #start-here button { font-size: 0.75em; padding: 4px 3px; white-space: nowrap; } }
"""


class HeaderParts(TypedDict):
    """The header's components, by the names its handlers answer with."""

    model: gr.Dropdown
    step: gr.Dropdown
    refresh: gr.Button
    summary: gr.Markdown
    start_here: dict[str, gr.Button]


def intro() -> str:
    """The page's introduction, with how much the model it opens on read, as that model's record counted it."""
    return text.INTRO.format(read=text.words_read(training_words(SHIPPED / OPENS_ON)))


def layout(registry: Registry) -> HeaderParts:
    """The introduction, the model selector, the training step, Refresh, and the chosen model in a line."""
    gr.Markdown(intro())
    with gr.Row(elem_id="start-here"):
        links = {tab: gr.Button(words, size="sm", elem_id=f"start-{tab}", min_width=90)
                 for tab, words in text.START_HERE}
    with gr.Row(equal_height=False):
        model = gr.Dropdown(choices=registry.catalog.choices(), value=registry.catalog.default_model(),
                            allow_custom_value=True,
                            label="Model", elem_id="model", scale=4, min_width=280,  # a row of its own on a phone
                            info="Shipped checkpoints, runs trained here, or a Hugging Face hub id / folder path "
                                 "under checkpoints/ or runs/")
        # custom values: the page learns a run's steps when it is chosen, an API caller names one directly (the
        # handlers check it: "this run has no snapshot at step 20: it has 0, 10, 30")
        step = gr.Dropdown(choices=[("final weights", FINAL)], value=FINAL, label="Training step", elem_id="step",
                           scale=2, min_width=200, visible=False, allow_custom_value=True,
                           info="This run kept snapshots: see the model as it was at any of them")
        refresh = gr.Button("↻ Refresh list", elem_id="refresh", scale=0, min_width=130, size="sm")
    summary = gr.Markdown(text.NO_MODEL if registry.catalog.default_model() is None else "",
                          elem_id="model-summary")
    return {"model": model, "step": step, "refresh": refresh, "summary": summary, "start_here": links}


def wire(demo: gr.Blocks, c: Components, bound: Callable[[Callable], Callable]) -> None:
    """A chosen model updates every tab; an example clicked before the page knew the model is fitted to it; Refresh
    and the page's load bring the list up to date."""
    chosen = [c[name] for name in ("summary", "model_info", "model_card", "layer", "head", "heads_off", "emb_layer",
                                   "fill_examples", "nsp_examples", "att_examples_box", "step", "compare")]
    asked = [c["model"], c["layer"], c["head"]]
    answers = [c[name] for name in blank_answers()]
    c["model"].change(lambda: dict(zip(answers, blank_answers().values())), None, answers,
                      api_visibility="private", queue=False)  # no answer of the last model stays under the new name
    c["model"].change(bound(selected), asked, chosen, api_visibility="private").then(
        bound(fill.fill_mask), inputs(c, fill.fill_mask, **fill.ASKED), [c[name] for name in fill.ANSWERED],
        api_visibility="private", show_progress="hidden")  # with the head switches the new model has
    if "att_examples" in c:
        c["att_examples"].load_input_event.then(bound(narrow), asked, [c["layer"], c["head"]],
                                                api_visibility="private")
    listed = [c["model"], c["compare_runs"], c["ft_model"]]
    c["refresh"].click(bound(refresh), c["model"], listed, api_visibility="private")
    for tab, button in c["start_here"].items():
        button.click(go_to(tab), None, c["tabs"], api_visibility="private", queue=False)
    c["tabs"].change(None, js=REDRAW_CHARTS, api_visibility="private", queue=False)
    demo.load(bound(refresh), c["model"], listed, api_visibility="private").then(
        bound(selected), asked, chosen, api_visibility="private")


def blank_answers() -> Outputs:
    """Every answer a tab shows of the chosen model, as it is before any question."""
    return {**fill.blank(), **nsp.blank(), **attention.blank(), **embeddings.blank()}


def selected(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """Everything that depends on the chosen model: header line, Model tab, head switches, layer sliders."""
    try:
        catalog = registry.catalog
        info = catalog.model_info(model_name, owner)
    except ValueError as exc:
        message = f"⚠️ {brief(str(exc))}"
        return {"summary": message, "model_info": message, "model_card": ""}
    card = info.pop("model_card") or "*This checkpoint has no model card (README.md).*"
    entry, config = catalog.config_of(model_name, owner)
    own = _shows_its_examples(registry, entry.folder, owner)
    steps = catalog.timeline_steps(model_name, owner)
    snapshots = timeline_choices(steps)
    return {"summary": text.model_summary(entry.name, config, catalog.torch_device()),
            "model_info": model_views.model_markdown(info), "model_card": card,
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
    default = registry.catalog.default_model(owner)
    return folder is not None and default is not None and registry.catalog.resolve(default, owner).folder == folder


def narrow(registry: Registry, model_name: str, layer: float, head: float, owner: str | None = None) -> Outputs:
    """The layer and head sliders narrowed to the model's range. A value changes only when out of range: setting
    it anyway would undo an example the visitor clicked while the page was still loading."""
    try:
        _, config = registry.catalog.config_of(model_name, owner)
    except ValueError:
        return {"layer": gr.skip(), "head": gr.skip()}
    return {"layer": narrowed(layer, config.num_hidden_layers), "head": narrowed(head, config.num_attention_heads)}


def refresh(registry: Registry, model_name: str | None, owner: str | None = None) -> Outputs:
    """Every list of models brought up to date (the models this visitor may see now), each keeping its choice."""
    choices = registry.catalog.choices(owner)
    return {"model": gr.Dropdown(choices=choices, value=model_name or registry.catalog.default_model(owner)),
            "compare_runs": gr.Dropdown(choices=choices), "ft_model": gr.Dropdown(choices=choices)}


