"""Questions to a fine-tuned classifier, below the Fine-tune tab's experiment: its answer, which words drove it
(integrated gradients), and its attention beside the model it started from: the layout, its wiring and its
handlers."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly
from bert_demo.app.policy import well_read_name
from bert_demo.app.folders import hub_id_of
from bert_demo.app.registry import Registry
from bert_demo.app.tabs.fill_views import ATTRIBUTION_KEY, attribution_caption, attribution_spans
from bert_demo.app.verdict import WELL_READ
from bert_demo.config import LIMITS, has_weights, read_metadata
from bert_demo.inspection import curves, figures

WORDS_LABEL = "Which words drove the decision"


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#ft-label .empty, #ft-words .empty { min-height: 5rem !important; height: 5rem !important; }
"""


class ClassifierParts(TypedDict):
    """The components of the Fine-tune tab's questions to a classifier, by the names its handlers answer with."""

    ft_classifier: gr.Dropdown
    ft_text_a: gr.Textbox
    ft_text_b: gr.Textbox
    ft_button: gr.Button
    ft_label: gr.Label
    ft_words: gr.HighlightedText
    ft_att_layer: gr.Slider
    ft_att_button: gr.Button
    ft_att_caption: gr.Markdown
    ft_att_before: gr.Plot
    ft_att_after: gr.Plot


def layout(registry: Registry) -> ClassifierParts:
    """A fine-tuned classifier's answer, the words that drove it, and its attention before and after."""
    c: Components = {}
    gr.Markdown("### Ask a fine-tuned model\nIts answer, and which words drove it: integrated gradients "
                "(Sundararajan et al. 2017) follow the decision from a sentence with every word blanked out to "
                "the real one.")
    chosen = default_classifier(registry)
    c["ft_classifier"] = gr.Dropdown(registry.catalog.classifier_choices(), value=chosen, label="Fine-tuned model",
                                     elem_id="ft-classifier", allow_custom_value=True)  # a row: its label is long
    with gr.Row(equal_height=True):
        c["ft_text_a"] = gr.Textbox("a gripping, funny and surprisingly moving film.", label="Sentence",
                                    elem_id="ft-text-a", scale=3, min_width=240)
        c["ft_text_b"] = gr.Textbox("", label="Second sentence (pair tasks only)", elem_id="ft-text-b",
                                    scale=2, min_width=200)
    c["ft_button"] = gr.Button("Classify", variant="primary", elem_id="ft-button")
    with gr.Row():
        c["ft_label"] = gr.Label(label="Classes", elem_id="ft-label", scale=1, min_width=240)
        with gr.Column(scale=2, min_width=240):
            c["ft_words"] = gr.HighlightedText(label=WORDS_LABEL, elem_id="ft-words",
                                               show_legend=False, combine_adjacent=False)
            gr.Markdown(ATTRIBUTION_KEY, elem_classes="attribution-key")
    with gr.Accordion("Attention before and after fine-tuning", open=False):
        with gr.Row(equal_height=True):
            layers = (registry.catalog.config_of(chosen)[1].num_hidden_layers if chosen
                      else LIMITS["num_hidden_layers"])
            c["ft_att_layer"] = gr.Slider(1, layers, value=layers, step=1, label="Layer",
                                          elem_id="ft-att-layer", scale=3)
            c["ft_att_button"] = gr.Button("Compare attention", elem_id="ft-att-button", scale=1,
                                           min_width=160)
        c["ft_att_caption"] = gr.Markdown(elem_id="ft-att-caption")
        with gr.Row():
            c["ft_att_before"] = gr.Plot(curves.empty_figure("Before", height=240), show_label=False,
                                         elem_id="ft-att-before", min_width=300)
            c["ft_att_after"] = gr.Plot(curves.empty_figure("After", height=240), show_label=False,
                                        elem_id="ft-att-after", min_width=300)
    return c


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Classify (button or Enter) answers and attributes at once; the attention comparison; the layer slider fitted
    to the chosen classifier."""
    inputs = [c["ft_classifier"], c["ft_text_a"], c["ft_text_b"]]
    asked = [c["ft_button"].click, c["ft_text_a"].submit, c["ft_text_b"].submit]
    gr.on(asked, bound(attributing), None, c["ft_words"], api_visibility="private", queue=False,
          show_progress="hidden")  # the last sentence's colours go at once, not when the new ones come
    answered = gr.on(asked, bound(classify), inputs, c["ft_label"], api_name="classify", show_progress="hidden")
    answered.success(bound(attribution), inputs, c["ft_words"], api_name="attribution",
                     show_progress_on=[c["ft_words"]])  # a refused question gets one message, not two
    gr.on([c["ft_att_button"].click, c["ft_att_layer"].release], bound(attention_change),
          [*inputs, c["ft_att_layer"]], [c["ft_att_before"], c["ft_att_after"], c["ft_att_caption"]],
          api_name="attention_change", show_progress_on=[c["ft_att_after"]])
    c["ft_classifier"].change(bound(classifier_chosen), c["ft_classifier"], c["ft_att_layer"],
                              api_visibility="private")


@friendly
def classifier_chosen(registry: Registry, classifier: str | None, owner: str | None = None) -> Outputs:
    """The attention comparison's layer slider, fitted to the chosen classifier's layers (its top layer first:
    fine-tuning moves it most)."""
    if not classifier:
        return {"ft_att_layer": gr.skip()}
    layers = registry.catalog.config_of(classifier, owner)[1].num_hidden_layers
    return {"ft_att_layer": gr.Slider(maximum=layers, value=layers)}


def default_classifier(registry: Registry, owner: str | None = None) -> str | None:
    """The newest classifier fine-tuned from a pre-trained start (a random start's answers teach little), else the
    newest of any start."""
    names = [name for _, name in registry.catalog.classifier_choices(owner)]
    for name in names:
        folder = registry.catalog.resolve(name, owner).folder
        if (read_metadata(folder).get("train_config") or {}).get("init") == "pretrained":
            return name
    return names[0] if names else None


@friendly
def classify(registry: Registry, classifier: str, text_a: str, text_b: str = "", owner: str | None = None
             ) -> Outputs:
    """A fine-tuned classifier's probability for each of its classes, for a sentence or a pair."""
    from bert_demo import inference

    loaded = registry.catalog.load_classifier(classifier, owner)
    probabilities = inference.classify(loaded.model, loaded.tokenizer, text_a, text_b or None)
    return {"ft_label": dict(probabilities)}


def attributing(registry: Registry) -> Outputs:
    """The attribution panel while a new question is answered: empty, under its plain title."""
    return {"ft_words": gr.HighlightedText(value=None, label=WORDS_LABEL)}


@friendly
def attribution(registry: Registry, classifier: str, text_a: str, text_b: str = "", owner: str | None = None
                ) -> Outputs:
    """Which words drove the classifier's decision: integrated gradients (Sundararajan et al. 2017) as coloured
    words, with the completeness check in the caption."""
    from bert_demo import inference
    from bert_demo.inspection import attribution

    loaded = registry.catalog.load_classifier(classifier, owner)
    inference.classify(loaded.model, loaded.tokenizer, text_a, text_b or None)  # checks the texts
    result = attribution.classification(loaded.model, loaded.tokenizer, text_a, text_b or None)
    return {"ft_words": gr.HighlightedText(value=attribution_spans(result.tokens, result.scores),
                                           label=attribution_caption(f"Towards “{result.target}”", result))}


@friendly
def attention_change(registry: Registry, classifier: str, text_a: str, text_b: str = "", layer: float = 1,
                     owner: str | None = None) -> Outputs:
    """The same input's attention in a fine-tuned model and in the model it started from (a layer's average over
    heads, side by side), and how much attention moved in each layer: half the summed absolute difference of each
    row, averaged over heads and tokens (0: unchanged, 1: looking somewhere else entirely)."""
    from bert_demo import inference

    loaded = registry.catalog.load_classifier(classifier, owner)
    text_b = text_b or None
    tokens, after = inference.attention(loaded.model, loaded.tokenizer, text_a, text_b)
    _, before = inference.attention(_starting_model(loaded), loaded.tokenizer, text_a, text_b)
    moved = (after - before).abs().sum(-1).mul(0.5).mean(dim=(1, 2))  # (L,)
    shown = min(max(int(layer), 1), len(moved))
    per_layer = ", ".join(f"layer {i + 1}: {value:.2g}" for i, value in enumerate(moved.tolist()))
    was, now = before[shown - 1].mean(0), after[shown - 1].mean(0)  # (T, T): the layer's mean over heads
    top = max(figures.colour_top(was), figures.colour_top(now))  # one scale: the same colour means the same weight
    return {"ft_att_before": figures.attention_heatmap(tokens, was, f"Layer {shown}, before (mean of heads)",
                                                     top=top, paired=True),
            "ft_att_after": figures.attention_heatmap(tokens, now, f"Layer {shown}, after", top=top, paired=True),
            "ft_att_caption": f"Share of attention that moved, averaged over heads and tokens: {per_layer}."}


def _starting_model(loaded):
    """The weights a fine-tuned run started from: the model it fine-tuned (a pre-trained or frozen start), or its
    own step-0 snapshot (a random start). Either way a classifier of the run's shape, for its encoder."""
    from bert_demo import checkpoint
    from bert_demo.training import timeline

    config = read_metadata(loaded.folder).get("train_config") or {}
    model = type(loaded.model)(loaded.model.config)
    if config.get("init") in ("pretrained", "frozen") and config.get("model"):
        folder = Path(config["model"])
        if not has_weights(folder):
            start = well_read_name(hub_id_of(folder)) or folder.name
            raise ValueError(f"the model {loaded.entry.label} started from ({start}) is no longer here")
        start = checkpoint.read_weights(folder)
    elif 0 in timeline.steps(loaded.folder):
        start = timeline.load(loaded.folder, 0)
    else:
        raise ValueError(f"{loaded.entry.label} does not say what it started from: only runs fine-tuned here or "
                         "with `python -m bert_demo finetune` can be compared with their start")
    model.load_state_dict({**loaded.model.state_dict(), **{k: v for k, v in start.items()
                                                           if k.startswith("bert.")}})
    return model.to(next(loaded.model.parameters()).device).eval()


def start_of(config: dict, selected: Path | None) -> str | None:
    """Which of the chart's starts a fine-tuning run was: its init for a run of the selected model, "well-read" for
    a pre-trained run of the well-read model (found by its folder in the hub's cache), else None."""
    model, init = Path(str(config.get("model"))), config.get("init")
    if init == "pretrained" and well_read_name(hub_id_of(model)):
        return WELL_READ
    return init if init in curves.START_NAMES and selected is not None and model.resolve() == selected else None
