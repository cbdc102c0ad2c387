"""Questions a visitor asks a model: fill in [MASK]s (with the guesses at every layer and heads switched off), which
heads matter, whether B follows A, where attention goes, and what lies near a word in the embedding space."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from bert_demo import plots
from bert_demo.app import text
from bert_demo.app.backend import backend
from bert_demo.app.handlers import FINAL, NO_COMPARE, Outputs, friendly, load_at, step_name
from bert_demo.app.registry import Registry

MAX_LABELS = 6  # ranked lists shown for the first masks of a sentence
MAX_IMPORTANCE = 4  # head-importance maps drawn, for the first masks of a sentence
LENS_TOP_K = 3  # guesses per layer in the per-layer table
NEIGHBOURS = 12  # nearest tokens listed in the Embeddings tab
VIEWS = {"head": "one head", "average": "average of the heads", "rollout": "rollout up to this layer"}
VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT = VIEWS.values()
PAIR_FILTERS = ("every token", "sentence A → B", "sentence B → A")
PAIR_ALL, PAIR_A_TO_B, PAIR_B_TO_A = PAIR_FILTERS


@friendly
def fill_mask(registry: Registry, model_name: str, sentence: str, top_k: float, heads_off: list[str] | None = None,
              step: str = FINAL, owner: str | None = None) -> Outputs:
    """The best guesses filled in, a ranked list per [MASK], the guesses at every layer, and the sentence's words
    to click; `heads_off` ("L1 H2", ...) are switched off for all of it."""
    inference = backend().inference
    loaded = load_at(registry, model_name, step, owner)
    head_mask = _head_mask(heads_off, loaded.model.config)
    inference.check_top_k(int(top_k))
    # one forward pass: the lens's last layer is fill_mask's answer (tested), so it gives both
    lens = inference.layer_predictions(loaded.model, loaded.tokenizer, sentence, max(int(top_k), LENS_TOP_K),
                                       head_mask=head_mask)
    predictions = [layers[-1][:int(top_k)] for layers in lens]
    lens = [[guesses[:LENS_TOP_K] for guesses in layers] for layers in lens]
    spans = inference.fill_in_masks(sentence.strip(), predictions)
    caption = "Best guesses filled in (the label is the model's probability)"
    if heads_off:
        caption += f", with {len(heads_off)} head{'s' if len(heads_off) > 1 else ''} switched off"
    if len(predictions) > MAX_LABELS:
        caption += f"; ranked lists below for the first {MAX_LABELS} of {len(predictions)} masks"
    outputs: Outputs = {"filled": gr.HighlightedText(value=spans, label=caption,
                                                     color_map={label: "#bfdbfe" for _, label in spans if label}),
                        "layer_table": text.layer_table(lens),
                        "words": text.word_spans(sentence)}
    for i in range(MAX_LABELS):  # values, not component updates: an update costs gradio ~1 ms (a JSON schema)
        outputs[f"mask_label_{i}"] = dict(predictions[i]) if i < len(predictions) else None  # empty: not drawn
    return outputs


@friendly
def mask_attribution(registry: Registry, model_name: str, sentence: str, step: str = FINAL,
                     owner: str | None = None) -> Outputs:
    """Which words made the model give its top guess at the first [MASK]: integrated gradients (Sundararajan et
    al. 2017) as coloured words, with the completeness check in the caption."""
    loaded = load_at(registry, model_name, step, owner)
    result = backend().attribution.masked_word(loaded.model, loaded.tokenizer, sentence)
    lead = f"Why “{result.target}” at the first [MASK]"
    return {"mask_words": gr.HighlightedText(value=text.attribution_spans(result.tokens, result.scores),
                                             label=text.attribution_caption(lead, result))}


@friendly
def importance(registry: Registry, model_name: str, sentence: str, step: str = FINAL, owner: str | None = None
               ) -> Outputs:
    """For each [MASK] (the first few), how much its top guess loses when each head alone is switched off."""
    return {"importance_plot": _importance_figure(registry, model_name, step, owner, sentence)}


@friendly
def pair_importance(registry: Registry, model_name: str, text_a: str, text_b: str, step: str = FINAL,
                    owner: str | None = None) -> Outputs:
    """How much the probability that B follows A loses when each head alone is switched off."""
    if not (text_b or "").strip():
        raise ValueError("sentence B is empty: type a sentence")
    return {"nsp_importance_plot": _importance_figure(registry, model_name, step, owner, text_a, text_b)}


def _importance_figure(registry: Registry, model_name: str, step: str, owner: str | None, text_a: str,
                       text_b: str | None = None) -> Any:
    loaded = load_at(registry, model_name, step, owner)
    labels, drops = backend().inference.head_importance(loaded.model, loaded.tokenizer, text_a, text_b)
    return plots.head_importance_figure(labels[:MAX_IMPORTANCE], drops[:MAX_IMPORTANCE])


def mask_word(sentence: str, index: int) -> Outputs:
    """The sentence with the clicked word (its `index` among `text.word_spans`) replaced by [MASK]."""
    return {"fill_text": text.mask_word(sentence, index)}


def _head_mask(heads_off: list[str] | None, config: Any) -> list[list[float]] | None:
    """"L2 H3"-style names of heads to switch off, as a [layers, heads] mask of 1 (keep) and 0 (off)."""
    if not heads_off:
        return None
    mask = [[1.0] * config.num_attention_heads for _ in range(config.num_hidden_layers)]
    names = head_names(config)
    for name in heads_off:
        if name not in names:
            raise ValueError(f"no head {name!r} in this model: it has layers 1-{config.num_hidden_layers} and "
                             f"heads 1-{config.num_attention_heads} (write them like 'L1 H2')")
        layer, head = names[name]
        mask[layer][head] = 0.0
    return mask


def head_names(config: Any) -> dict[str, tuple[int, int]]:
    """"L1 H1" ... for every head of a model, to its (layer, head) index from 0."""
    return {f"L{layer + 1} H{head + 1}": (layer, head) for layer in range(config.num_hidden_layers)
            for head in range(config.num_attention_heads)}


@friendly
def neighbours(registry: Registry, model_name: str, word: str, sentence: str, layer: float, step: str = FINAL,
               owner: str | None = None) -> Outputs:
    """The word's nearest tokens in the embedding table, or of its hidden state at `layer` in `sentence`."""
    loaded = load_at(registry, model_name, step, owner, encoder=True)
    in_context = (sentence or "").strip() or None
    found = backend().inference.neighbours(loaded.model, loaded.tokenizer, (word or "").strip(), NEIGHBOURS,
                                           text=in_context, layer=int(layer))
    where = f"its hidden state after layer {int(layer)} in the sentence" if in_context else "its input embedding"
    if in_context and int(layer) == 0:
        where = "its embedding in the sentence (word + position + segment)"
    return {"neighbours_table": [[token, round(similarity, 3)] for token, similarity in found],
            "neighbours_caption": f"Nearest tokens to “{word.strip()}” by cosine similarity to {where}."}


@friendly
def projection(registry: Registry, model_name: str, words: str, step: str = FINAL, owner: str | None = None
               ) -> Outputs:
    """A list of words (spaces or commas between them) at their embeddings' first two principal components."""
    loaded = load_at(registry, model_name, step, owner, encoder=True)
    listed = [w for w in (words or "").replace(",", " ").split() if w]
    points = backend().inference.embedding_projection(loaded.model, loaded.tokenizer, listed)
    return {"projection_plot": plots.projection_figure(points)}


@friendly
def next_sentence(registry: Registry, model_name: str, text_a: str, text_b: str, step: str = FINAL,
                  owner: str | None = None
                  ) -> Outputs:
    loaded = load_at(registry, model_name, step, owner)
    p = backend().inference.next_sentence(loaded.model, loaded.tokenizer, text_a, text_b)
    return {"nsp_result": {"B follows A": p, "B is a random sentence": 1 - p}}


@friendly
def attention(registry: Registry, model_name: str, text_a: str, text_b: str, layer: float, head: float,
              view: str, hide: bool, pair: str = PAIR_ALL, step: str = FINAL, compare: str = NO_COMPARE,
              owner: str | None = None) -> Outputs:
    """The chosen map (one head, the layer's average or the rollout), all heads of the layer, and a caption;
    `pair` keeps only sentence A's attention to B (or B's to A); `compare` draws the same map at another step."""
    text_b = (text_b or "").strip() or None
    if pair != PAIR_ALL and text_b is None:
        raise ValueError(f"the “{pair}” filter needs a sentence B: write one, or choose “{PAIR_ALL}”")
    shown = _attention_map(load_at(registry, model_name, step, owner, encoder=True), text_a, text_b, layer, head, view,
                           hide, pair)
    comparing = compare != NO_COMPARE
    outputs = {"att_plot": plots.attention_heatmap(shown.rows, shown.matrix,
                                                   step_name(step) if comparing else shown.title, keys=shown.cols),
               "grid_plot": plots.attention_grid(shown.rows, shown.heads, f"All {len(shown.heads)} heads of layer "
                                                 f"{shown.layer}", keys=shown.cols),
               "att_caption": text.attention_caption(len(shown.rows), len(shown.cols), shown.layers,
                                                     len(shown.heads), view == VIEW_ROLLOUT, shown.source),
               "compare_plot": gr.Plot(visible=False)}
    if comparing:
        other = _attention_map(load_at(registry, model_name, compare, owner, encoder=True), text_a, text_b, layer, head,
                               view, hide, pair)
        outputs["compare_plot"] = gr.Plot(plots.attention_heatmap(other.rows, other.matrix, step_name(compare),
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


def _attention_map(loaded: Any, text_a: str, text_b: str | None, layer: float, head: float, view: str,
                   hide: bool, pair: str) -> _Map:
    inference = backend().inference
    tokens, weights = inference.attention(loaded.model, loaded.tokenizer, text_a, text_b)
    n_layers, n_heads = weights.shape[:2]
    layer, head = min(max(int(layer), 1), n_layers), min(max(int(head), 1), n_heads)
    if view == VIEW_ROLLOUT:
        matrix = inference.attention_rollout(weights)[layer - 1]  # (T, T)
        title = f"Attention rollout through layer{f's 1–{layer}' if layer > 1 else ' 1'}"
    elif view == VIEW_AVERAGE:
        matrix = weights[layer - 1].mean(dim=0)  # (T, T)
        title = f"Layer {layer}, average of its {n_heads} heads"
    else:
        matrix, title = weights[layer - 1, head - 1], f"Layer {layer}, head {head}"
    heads, shown = weights[layer - 1], tokens  # (A, T, T)
    segment = inference.segments(loaded.tokenizer, text_a, text_b)
    if hide:
        segment = [s for s, t in zip(segment, tokens) if t not in ("[CLS]", "[SEP]")]
        shown, matrix = inference.drop_tokens(tokens, matrix)
        heads = inference.drop_tokens(tokens, heads)[1]
        title += " ([CLS]/[SEP] hidden, rows renormalised)"
    keys, source = shown, None
    if pair != PAIR_ALL:
        source, target = ("A", "B") if pair == PAIR_A_TO_B else ("B", "A")
        rows = [i for i, s in enumerate(segment) if s == source]
        cols = [i for i, s in enumerate(segment) if s == target]
        matrix, heads = matrix[rows][:, cols], heads[:, rows][:, :, cols]
        shown, keys = [shown[i] for i in rows], [shown[i] for i in cols]
        title += f", sentence {source} → sentence {target}"
    return _Map(shown, keys, matrix, heads, title, layer, n_layers, source)


def view_changed(view: str) -> Outputs:
    """The Head slider only matters for the one-head view: grey it out in the others."""
    return {"head": gr.Slider(interactive=view == VIEW_HEAD)}
