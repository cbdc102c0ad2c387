"""The Next sentence tab: does sentence B follow sentence A (BERT's NSP head, §3.1), and which heads matter to the
answer: the layout, its wiring and its handlers."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly, load_at
from bert_demo.app.queries import At, inputs, takes
from bert_demo.app.folders import Examples
from bert_demo.app.registry import Registry
from bert_demo.app.tabs.heads import importance_block, importance_figure, no_importance

CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#nsp-result .empty { min-height: 5rem !important; height: 5rem !important; }
"""


class NspParts(TypedDict):
    """The Next sentence tab's components, by the names its handlers answer with."""

    text_a: gr.Textbox
    text_b: gr.Textbox
    nsp_button: gr.Button
    nsp_result: gr.Label
    nsp_importance_button: gr.Button
    nsp_importance_plot: gr.Plot
    nsp_examples: gr.Column


def layout(examples: Examples | None) -> NspParts:
    with gr.Tab("Next sentence", id="nsp", elem_id="tab-nsp"):
        gr.Markdown("Does sentence B follow sentence A? BERT's next-sentence head answers from the `[CLS]` vector. "
                    "Small models trained for a minute are close to a coin flip: train longer to see it learn.")
        a, b, _ = examples.next_sentence[0] if examples else ("The sun rose.", "Birds began to sing.", "")
        with gr.Row():
            c = {"text_a": gr.Textbox(value=a, label="Sentence A", elem_id="nsp-a"),
                 "text_b": gr.Textbox(value=b, label="Sentence B", elem_id="nsp-b")}
        c["nsp_button"] = gr.Button("Judge", variant="primary", elem_id="nsp-button")
        c["nsp_result"] = gr.Label(label="The model's probability", elem_id="nsp-result", show_heading=False)
        c.update(importance_block("nsp-", "Which heads matter for this judgement?",
                             "Each cell is one head: how much the probability that B follows A drops when that head "
                             "alone is switched off (red: the head pushed towards “follows”; blue: towards "
                             "“random”)."))
        with gr.Column(visible=examples is not None, elem_id="nsp-examples") as c["nsp_examples"]:
            if examples:
                gr.Examples([[a, b] for a, b, _ in examples.next_sentence], inputs=[c["text_a"], c["text_b"]],
                            example_labels=[label_ for _, _, label_ in examples.next_sentence],
                            label=f"Examples for {examples.model}: true continuations and random pairs")
    return c


def blank() -> Outputs:
    """The tab's answers as they are before any question: what another model leaves until it answers."""
    return {"nsp_result": None, "nsp_importance_plot": no_importance()}


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Judge (button or Enter in either sentence), and the head-importance map of the pair."""
    gr.on([c["nsp_button"].click, c["text_a"].submit, c["text_b"].submit], bound(next_sentence),
          inputs(c, next_sentence), c["nsp_result"], api_name="next_sentence", show_progress="hidden")
    c["nsp_importance_button"].click(bound(pair_importance), inputs(c, pair_importance),
                                     c["nsp_importance_plot"], api_visibility="private",
                                     show_progress_on=[c["nsp_importance_plot"]])


@friendly
@takes(at=At)
def next_sentence(registry: Registry, at: At, text_a: str = "", text_b: str = "", owner: str | None = None) -> Outputs:
    """The probability that B follows A, by the next-sentence head."""
    from bert_demo import inference

    loaded = load_at(registry, at.model_name, at.snapshot, owner)
    p = inference.next_sentence(loaded.model, loaded.tokenizer, text_a, text_b)
    return {"nsp_result": {"B follows A": p, "B is a random sentence": 1 - p}}


@friendly
@takes(at=At)
def pair_importance(registry: Registry, at: At, text_a: str = "", text_b: str = "",
                    owner: str | None = None) -> Outputs:
    """How much the probability that B follows A loses when each head alone is switched off."""
    if not (text_b or "").strip():
        raise ValueError("sentence B is empty: type a sentence")
    return {"nsp_importance_plot": importance_figure(registry, at, owner, text_a, text_b)}
