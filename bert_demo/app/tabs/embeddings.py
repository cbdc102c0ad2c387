"""The Embeddings tab: a word's nearest tokens, at the input or after any layer in a sentence, and a list of words
projected onto a plane: the layout, its wiring and its handlers."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import gradio as gr

from bert_demo.app.handlers import Components, Outputs, friendly, load_at
from bert_demo.app.queries import At, inputs, takes
from bert_demo.app.registry import Registry
from bert_demo.config import LIMITS
from bert_demo.inspection import curves, figures

NEIGHBOURS = 12  # nearest tokens listed
ON_ITS_OWN = ["token", "cosine similarity"]  # the neighbours table's columns, for a word on its own
IN_A_SENTENCE = ["word", "in the reference sentence", "cosine similarity"]  # and for a word in a sentence
PROJECTED_WORDS = "monday friday january march paris london berlin france england germany king queen man woman"


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#neighbours-table th, #neighbours-table td, #neighbours-table th *, #neighbours-table td * {
  word-break: normal !important; overflow-wrap: normal !important; }  /* words stay whole */
@media (max-width: 640px) {  /* a phone: the reference sentence wraps in its column, and the table fits ("tok/en") */
  #neighbours-table th, #neighbours-table td { width: auto !important; min-width: 0 !important; }
  #neighbours-table th:nth-child(2), #neighbours-table td:nth-child(2) { max-width: 120px !important; } }
"""


class EmbeddingsParts(TypedDict):
    """The Embeddings tab's components, by the names its handlers answer with."""

    emb_word: gr.Textbox
    emb_sentence: gr.Textbox
    emb_layer: gr.Slider
    emb_button: gr.Button
    neighbours_caption: gr.Markdown
    neighbours_table: gr.Dataframe
    emb_words: gr.Textbox
    projection_button: gr.Button
    projection_plot: gr.Plot


def layout() -> EmbeddingsParts:
    with gr.Tab("Embeddings", id="embeddings", elem_id="tab-embeddings"):
        gr.Markdown("Each token starts as a row of the embedding table; training moves tokens used alike close "
                    "together. Find a word's nearest tokens, at the input or after any layer in a sentence, and see "
                    "a list of words projected onto a plane.")
        with gr.Row(equal_height=True):
            c = {"emb_word": gr.Textbox(value="paris", label="Word", elem_id="emb-word", scale=1, min_width=140),
                 "emb_sentence": gr.Textbox(label="In a sentence (optional)", elem_id="emb-sentence", scale=3,
                                            placeholder="he sat on the bank of the river."),
                 "emb_layer": gr.Slider(0, LIMITS["num_hidden_layers"], value=0, step=1, elem_id="emb-layer",
                                        label="After layer (with a sentence)", scale=2)}
        c["emb_button"] = gr.Button("Find neighbours", variant="primary", elem_id="emb-button")
        c["neighbours_caption"] = gr.Markdown(elem_id="neighbours-caption")
        c["neighbours_table"] = gr.Dataframe(headers=ON_ITS_OWN, elem_id="neighbours-table", wrap=True,
                                             interactive=False, show_label=False)
        with gr.Row(equal_height=True):
            c["emb_words"] = gr.Textbox(value=PROJECTED_WORDS, label="Words to project (3 to 60)",
                                        elem_id="emb-words", scale=4, min_width=240)
            c["projection_button"] = gr.Button("Project", elem_id="projection-button", scale=0, min_width=120)
        c["projection_plot"] = gr.Plot(blank()["projection_plot"], show_label=False, elem_id="projection-plot")
    return c


def wire(c: Components, bound: Callable[[Callable], Callable]) -> None:
    """Find neighbours (button or Enter), and Project; a refused question clears what the one before it drew, so
    that no answer to another word stays under the message."""
    found = gr.on([c["emb_button"].click, c["emb_word"].submit, c["emb_sentence"].submit], bound(neighbours),
                  inputs(c, neighbours, word="emb_word", sentence="emb_sentence", layer="emb_layer"),
                  [c["neighbours_table"], c["neighbours_caption"]], api_name="neighbours", show_progress="hidden")
    found.failure(bound(no_neighbours), None, [c["neighbours_table"], c["neighbours_caption"]],
                  api_visibility="private", queue=False)
    projected = gr.on([c["projection_button"].click, c["emb_words"].submit], bound(projection),
                      inputs(c, projection, words="emb_words"), c["projection_plot"], api_name="projection",
                      show_progress_on=[c["projection_plot"]])
    projected.failure(bound(no_projection), None, c["projection_plot"], api_visibility="private", queue=False)


@friendly
@takes(at=At)
def neighbours(registry: Registry, at: At, word: str = "", sentence: str = "", layer: float = 0,
               owner: str | None = None) -> Outputs:
    """The word's nearest tokens in the embedding table, or, in `sentence`, the nearest words of the reference
    sentences at the same `layer`; the caption says which was compared with which."""
    from bert_demo.inspection import neighbours

    loaded = load_at(registry, at.model_name, at.snapshot, owner, encoder=True)
    in_context = (sentence or "").strip() or None
    found = neighbours.neighbours(loaded.model, loaded.tokenizer, (word or "").strip(), NEIGHBOURS,
                                            text=in_context, layer=int(layer))
    if in_context:
        where = "its embedding in the sentence (word + position + segment)" if int(layer) == 0 else \
            f"its hidden state after layer {int(layer)}"
        caption = (f"Nearest words to “{word.strip()}” in your sentence, by cosine similarity of {where} to the "
                   f"same layer's states of the words of {len(neighbours.REFERENCE)} everyday reference "
                   "sentences: like with like, as exBERT compares.")
    else:
        caption = (f"Nearest tokens to “{word.strip()}” by cosine similarity of input embeddings (rows of the "
                   "embedding table), leaving out the quarter of the vocabulary the model saw least in training.")
    if in_context:
        table = {"headers": IN_A_SENTENCE, "data": [[n.token, n.sentence, round(n.similarity, 3)] for n in found]}
    else:  # a word on its own has no reference sentence: no empty column for one
        table = {"headers": ON_ITS_OWN, "data": [[n.token, round(n.similarity, 3)] for n in found]}
    return {"neighbours_table": table, "neighbours_caption": caption}  # a value with its headers, not an update


def blank() -> Outputs:
    """The tab's answers as they are before any question: what another model leaves until it answers."""
    return {"neighbours_table": {"headers": ON_ITS_OWN, "data": []}, "neighbours_caption": "",
            "projection_plot": curves.empty_figure("Press “Project”", height=300)}


def no_neighbours(registry: Registry) -> Outputs:
    """What the table shows after a refused word: nothing (the message says why), not the last word's neighbours."""
    return {name: blank()[name] for name in ("neighbours_table", "neighbours_caption")}


def no_projection(registry: Registry) -> Outputs:
    """What the chart shows after a refused list: nothing, not the last list's points."""
    return {"projection_plot": blank()["projection_plot"]}


@friendly
@takes(at=At)
def projection(registry: Registry, at: At, words: str = "", owner: str | None = None) -> Outputs:
    """A list of words (spaces or commas between them) at their embeddings' first two principal components."""
    from bert_demo.inspection import neighbours

    loaded = load_at(registry, at.model_name, at.snapshot, owner, encoder=True)
    listed = [w for w in (words or "").replace(",", " ").split() if w]
    points = neighbours.embedding_projection(loaded.model, loaded.tokenizer, listed)
    return {"projection_plot": figures.projection_figure(points)}
