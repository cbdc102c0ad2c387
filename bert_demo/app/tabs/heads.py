"""What Fill-mask and Next sentence share: switching heads off ("L2 H3" names), and the map of what each head
matters to an answer (Michel et al. 2019), with the button that draws it."""
from __future__ import annotations

from typing import Any

import gradio as gr

from bert_demo.app.handlers import Components, load_at
from bert_demo.app.queries import At
from bert_demo.app.registry import Registry
from bert_demo.inspection import curves, figures

MAX_IMPORTANCE = 4  # head-importance maps drawn, for the first masks of a sentence


def importance_block(prefix: str, question: str, caption: str) -> Components:
    """A button that switches each head off in turn, what its map means, and the map."""
    button = gr.Button(question, size="sm", elem_id=f"{prefix}importance-button")
    gr.Markdown(caption)
    plot = gr.Plot(no_importance(), show_label=False, elem_id=f"{prefix}importance-plot")
    return {f"{prefix.replace('-', '_')}importance_button": button, f"{prefix.replace('-', '_')}importance_plot": plot}


def no_importance() -> Any:
    """The head-importance map before it is asked for."""
    return curves.empty_figure("Press “Which heads matter…” to switch each head off in turn", height=200)


def importance_figure(registry: Registry, at: At, owner: str | None, text_a: str, text_b: str | None = None) -> Any:
    from bert_demo.inspection import heads

    loaded = load_at(registry, at.model_name, at.snapshot, owner)
    labels, drops = heads.head_importance(loaded.model, loaded.tokenizer, text_a, text_b)
    return figures.head_importance_figure(labels[:MAX_IMPORTANCE], drops[:MAX_IMPORTANCE])


def head_mask(heads_off: list[str] | None, config: Any) -> list[list[float]] | None:
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
