"""The Fill-mask tab: a sentence with [MASK]s, the model's ranked guesses, the guesses at every layer, heads
switched off, which words led to a guess, and which heads matter: the layout, its wiring and its handlers."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly, load_at
from bert_demo.app.queries import At, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.app.folders import Examples
from bert_demo.app.tabs import fill_views as views
from bert_demo.app.tabs.heads import head_mask, importance_block, importance_figure, no_importance

MAX_RANKED = 6  # ranked lists shown for the first masks of a sentence
LENS_TOP_K = 3  # guesses per layer in the per-layer table
ASKED = {"sentence": "fill_text"}  # Predict's inputs whose components are not named as its parameters
ANSWERED = ("filled", "layer_table", "words", *(f"mask_label_{i}" for i in range(MAX_RANKED)))  # and its answer


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#fill-sentence .empty, #fill-label-0 .empty { min-height: 5rem !important; height: 5rem !important; }
#fill-sentence .token .label { color: #1e3a8a !important; font-weight: 600; }
#layer-table table { display: block; overflow-x: auto; }  /* a phone scrolls it */
#layer-table th, #layer-table td { white-space: nowrap; }
@media (max-width: 640px) { #layer-table th, #layer-table td { padding: 0.4em 0.5em; } }  /* two [MASK]s fit */
""" + ", ".join(f"#fill-label-{i}:has(> .empty)" for i in range(1, MAX_RANKED)) + """ { display: none !important; }
"""  # a ranked list is drawn only for a [MASK] the sentence has: answers are values, not visibility updates


class FillParts(TypedDict):
    """The Fill-mask tab's components, by the names its handlers answer with."""

    fill_text: gr.Textbox
    top_k: gr.Slider
    fill_button: gr.Button
    filled: gr.HighlightedText
    mask_label_0: gr.Label
    mask_label_1: gr.Label
    mask_label_2: gr.Label
    mask_label_3: gr.Label
    mask_label_4: gr.Label
    mask_label_5: gr.Label
    words: gr.HighlightedText
    mask_words_button: gr.Button
    mask_words_box: gr.Column
    mask_words: gr.HighlightedText
    fill_examples: gr.Column
    layer_table: gr.Markdown
    heads_off: gr.Dropdown
    importance_button: gr.Button
    importance_plot: gr.Plot


def layout(examples: Examples | None, heads: list[str]) -> FillParts:
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
            for i in range(MAX_RANKED):
                c[f"mask_label_{i}"] = gr.Label(elem_id=f"fill-label-{i}", label=f"[MASK] {i + 1}",
                                                min_width=180, show_heading=False)
        c["words"] = gr.HighlightedText(label="Click a word to mask it", elem_id="fill-words", show_legend=False,
                                        show_inline_category=False, interactive=False,
                                        color_map={"word": "#e0e7ff"})
        c["mask_words_button"] = gr.Button("Which words led to the first guess?", size="sm",
                                           elem_id="mask-words-button")
        with gr.Column(visible=False, elem_id="mask-words-box") as c["mask_words_box"]:  # an empty box until asked
            c["mask_words"] = gr.HighlightedText(elem_id="mask-words", show_legend=False, combine_adjacent=False)
            gr.Markdown(views.ATTRIBUTION_KEY, elem_classes="attribution-key")
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
            c.update(importance_block("", "Which heads matter for these guesses?",
                                 "Each cell of the map below is one head: how much the top guess's probability "
                                 "drops when that head alone is switched off. Red: the head helped the guess; blue: "
                                 "it worked against it."))
    return c


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Predict (button or Enter, and once when the page opens), a click on a word, the attribution and the
    head-importance map."""
    asked, outputs = inputs(c, fill_mask, **ASKED), [c[name] for name in ANSWERED]
    gr.on([c["fill_button"].click, c["fill_text"].submit], bound(fill_mask), asked, outputs, api_name="fill_mask",
          show_progress="hidden")  # fast; an error is a toast, the last answer stays
    c["page"].load(bound(fill_mask), asked, outputs, api_visibility="private")  # the page opens on an answer
    c["words"].select(_mask_clicked, c["fill_text"], c["fill_text"], api_visibility="private", queue=False).then(
        bound(fill_mask), asked, outputs, api_visibility="private", show_progress="hidden")
    c["mask_words_button"].click(bound(mask_attribution), inputs(c, mask_attribution, **ASKED),
                                 [c["mask_words"], c["mask_words_box"]], api_visibility="private",
                                 show_progress_on=[c["mask_words_button"]])
    c["importance_button"].click(bound(importance), inputs(c, importance, **ASKED), c["importance_plot"],
                                 api_name="head_importance", show_progress_on=[c["importance_plot"]])


def blank() -> Outputs:
    """The tab's answers as they are before any question: what another model leaves until it answers (the guesses
    are asked again, `header.wire`). Updates, not components: a component made while the page is laid out joins it."""
    return {"filled": None, "layer_table": "", **{f"mask_label_{i}": None for i in range(MAX_RANKED)},
            "mask_words_box": gr.update(visible=False), "importance_plot": no_importance()}


def _mask_clicked(sentence: str, event: gr.SelectData) -> str:
    """A click on a word of the sentence: gradio names the clicked span in `event.index`."""
    return mask_word(sentence, event.index)["fill_text"]


@friendly
@takes(at=At)
def fill_mask(registry: Registry, at: At, sentence: str = "", top_k: float = 5, heads_off: list[str] | None = None,
              owner: str | None = None) -> Outputs:
    """The best guesses filled in, a ranked list per [MASK], the guesses at every layer, and the sentence's words
    to click; `heads_off` ("L1 H2", ...) are switched off for all of it."""
    from bert_demo import inference

    loaded = load_at(registry, at.model_name, at.snapshot, owner)
    mask = head_mask(heads_off, loaded.model.config)
    inference.check_top_k(int(top_k))
    # one forward pass: the lens's last layer is fill_mask's answer (tested), so it gives both
    lens = inference.layer_predictions(loaded.model, loaded.tokenizer, sentence, max(int(top_k), LENS_TOP_K),
                                       head_mask=mask)
    predictions = [layers[-1][:int(top_k)] for layers in lens]
    lens = [[guesses[:LENS_TOP_K] for guesses in layers] for layers in lens]
    spans = inference.fill_in_masks(sentence.strip(), predictions)
    caption = "Best guesses filled in (the label is the model's probability)"
    if heads_off:
        caption += f", with {len(heads_off)} head{'s' if len(heads_off) > 1 else ''} switched off"
    if len(predictions) > MAX_RANKED:
        caption += f"; ranked lists below for the first {MAX_RANKED} of {len(predictions)} masks"
    outputs: Outputs = {"filled": gr.HighlightedText(value=spans, label=caption,
                                                     color_map={label: "#bfdbfe" for _, label in spans if label}),
                        "layer_table": views.layer_table(lens),
                        "words": views.word_spans(sentence)}
    for i in range(MAX_RANKED):  # values, not component updates: an update costs gradio ~1 ms (a JSON schema)
        outputs[f"mask_label_{i}"] = dict(predictions[i]) if i < len(predictions) else None  # empty: not drawn
    return outputs


@friendly
@takes(at=At)
def mask_attribution(registry: Registry, at: At, sentence: str = "", owner: str | None = None) -> Outputs:
    """Which words made the model give its top guess at the first [MASK]: integrated gradients (Sundararajan et
    al. 2017) as coloured words, with the completeness check in the caption, shown (with their key) once asked."""
    from bert_demo.inspection import attribution

    loaded = load_at(registry, at.model_name, at.snapshot, owner)
    result = attribution.masked_word(loaded.model, loaded.tokenizer, sentence)
    lead = f"Why “{result.target}” at the first [MASK]"
    return {"mask_words": gr.HighlightedText(value=views.attribution_spans(result.tokens, result.scores),
                                             label=views.attribution_caption(lead, result)),
            "mask_words_box": gr.Column(visible=True)}


@friendly
@takes(at=At)
def importance(registry: Registry, at: At, sentence: str = "", owner: str | None = None) -> Outputs:
    """For each [MASK] (the first few), how much its top guess loses when each head alone is switched off."""
    return {"importance_plot": importance_figure(registry, at, owner, sentence)}


def mask_word(sentence: str, index: int) -> Outputs:
    """The sentence with the clicked word (its `index` among `views.word_spans`) replaced by [MASK]."""
    return {"fill_text": views.mask_word(sentence, index)}
