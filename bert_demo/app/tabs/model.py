"""The Model tab: the chosen model's configuration, size, training and card, its download, and how BERT is built:
the layout, its wiring and its handlers (what the tab shows is the header's `selected`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly
from bert_demo.app.handlers import go_to
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import model_views as views

CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
.tab-links button { max-width: 16em; }
#model-info table { display: block; overflow-x: auto; }  /* a phone scrolls it */
#model-info th, #model-info td { white-space: nowrap; }
#model-info td:first-child { white-space: normal; }  /* a metric's name may wrap: its numbers fit a phone */
#model-card table { display: block; overflow-x: auto; }
#model-card td, #model-card th { overflow-wrap: normal; word-break: normal; min-width: 5em; }
"""


class ModelParts(TypedDict):
    """The Model tab's components, by the names its handlers answer with."""

    model_info: gr.Markdown
    download: gr.Button
    download_file: gr.File
    model_card: gr.Markdown
    links: dict[str, gr.Button]


def layout() -> ModelParts:
    """The model's facts, its download and its card (left); how BERT is built, with links to the tabs (right)."""
    with gr.Tab("Model", id="model", elem_id="tab-model"), gr.Row():
        with gr.Column(scale=3):
            c = {"model_info": gr.Markdown(elem_id="model-info")}
            with gr.Row():
                c["download"] = gr.Button("Download this checkpoint (.zip)", elem_id="download", scale=0,
                                          min_width=260, size="sm")
            c["download_file"] = gr.File(label="Checkpoint", visible=False, elem_id="download-file",
                                         interactive=False)
            with gr.Accordion("Model card (README.md in the checkpoint folder)", open=False):
                c["model_card"] = gr.Markdown(elem_id="model-card")
        with gr.Column(scale=2):
            gr.Markdown(views.EXPLAINER)
            with gr.Row(elem_classes="tab-links"):
                c["links"] = {tab: gr.Button(words, size="sm") for tab, words in
                              [("train", "→ Train"), ("fill", "→ Fill-mask"), ("nsp", "→ Next sentence"),
                               ("attention", "→ Attention")]}
    return c


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Download, and the links to the other tabs."""
    c["download"].click(bound(download), c["model"], c["download_file"], api_visibility="private")
    for tab, button in c["links"].items():
        button.click(go_to(tab), None, c["tabs"], api_visibility="private", queue=False)


@friendly
def download(registry: Registry, model_name: str, owner: str | None = None) -> Outputs:
    return {"download_file": gr.File(value=str(registry.catalog.zip_checkpoint(model_name, owner)), visible=True)}
