"""Plotly figures for the app: training curves from trainer records, attention maps from weight tensors.

Pure functions: records or tensors in, `go.Figure` out. `template="none"` keeps each figure's JSON small (it is
sent to the browser on every live update). Attention maps use one colour scale, 0 to 1, everywhere, so two maps
can be compared by eye; hovering a cell shows "query → key: weight".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_demo.records import Record

if TYPE_CHECKING:  # torch is not imported at start-up: the app's page appears before torch has loaded
    from torch import Tensor

TEMPLATE = "none"
COLORS = {"mlm": "#1f77b4", "nsp": "#d62728", "lr": "#2ca02c"}
COLORSCALE = "Blues"
FONT = dict(family="system-ui, sans-serif", size=12)
MARGIN = dict(l=60, r=20, t=80, b=50)
MAX_ATTENTION_TOKENS = 128  # the longest input the attention heatmaps draw (the shipped model trained on 128)


def _layout(fig: go.Figure, title: str, height: int, **kwargs) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=dict(text=title, x=0.02, xanchor="left"), height=height,
                      font=FONT, margin=MARGIN, **kwargs)
    return fig


def empty_figure(message: str, height: int = 280) -> go.Figure:
    """A blank chart with a centred note (before the first data arrives)."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=14, color="#777"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, "", height)


# ----------------------------------------------------------------------------------------------------------------
# training curves


def _series(records: Sequence[Record], kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))
            and math.isfinite(r[key])]
    return [r["step"] for r in rows], [round(float(r[key]), 5) for r in rows]


def _curves(records: Sequence[Record], key: str, title: str, y_title: str, height: int, from_zero: bool
            ) -> go.Figure:
    """Masked LM (left) and next sentence (right) side by side, as their scales differ ~10x; train solid,
    validation dashed with markers. A loss axis fits the curve (from zero, a fall from 7 to 5 looks flat)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("masked LM", "next sentence"), horizontal_spacing=0.1)
    for col, group in enumerate(("mlm", "nsp"), start=1):
        for kind in ("train", "val"):
            x, y = _series(records, kind, f"{group}_{key}")
            name = f"{group.upper()} {'train' if kind == 'train' else 'validation'}"
            style = (dict(mode="lines", line=dict(color=COLORS[group], width=1.5)) if kind == "train" else
                     dict(mode="lines+markers", line=dict(color=COLORS[group], dash="dash", width=2),
                          marker=dict(size=7)))
            fig.add_trace(go.Scatter(x=x, y=y, name=name, **style,
                                     hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra></extra>"),
                          row=1, col=col)
    fig.update_xaxes(title_text="step", rangemode="tozero", automargin=True)
    rangemode = "tozero" if from_zero else "normal"
    fig.update_yaxes(title_text=y_title, rangemode=rangemode, automargin=True, col=1)
    fig.update_yaxes(rangemode=rangemode, automargin=True, col=2)
    fig.update_annotations(font=dict(size=12, color="#555"))  # the subplot titles
    return _layout(fig, title, height, hovermode="x unified",
                   legend=dict(orientation="h", y=1.14, yanchor="bottom", x=1, xanchor="right", font=dict(size=11)))


def loss_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Masked-LM and next-sentence loss, training (averaged between logs) and validation."""
    return _curves(records, "loss", "Loss", "cross-entropy", height, from_zero=False)


def accuracy_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Share of masked tokens guessed right, and of sentence pairs judged right (chance: 0.5)."""
    return _curves(records, "acc", "Accuracy", "accuracy", height, from_zero=True)


def lr_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """The learning-rate schedule: linear warm-up, then linear decay."""
    x, y = _series(records, "train", "lr")
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines", name="learning rate", line=dict(color=COLORS["lr"]),
                               hovertemplate="step %{x}: %{y:.3g}<extra></extra>"))
    fig.update_xaxes(title_text="step", rangemode="tozero", automargin=True)
    fig.update_yaxes(title_text="learning rate", exponentformat="e", rangemode="tozero", automargin=True)
    return _layout(fig, "Learning rate", height, showlegend=False)


def training_figures(records: Sequence[Record]) -> tuple[go.Figure, go.Figure, go.Figure]:
    """(loss, accuracy, learning rate) for the Train tab; blank charts with a note until the first step is logged
    (empty axes would show made-up ranges while the corpus is prepared)."""
    if not any(r.get("kind") == "train" for r in records):
        return (empty_figure("Loss appears here after the first steps"), empty_figure("Accuracy"),
                empty_figure("Learning rate"))
    return loss_figure(records), accuracy_figure(records), lr_figure(records)


# ----------------------------------------------------------------------------------------------------------------
# attention


def _labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels; repeated tokens stay separate cells because the axes are numeric positions."""
    return [str(t) for t in tokens]


def _hover(tokens: Sequence[str], weights: Tensor) -> list[list[str]]:
    """Hover text from the weights themselves (formatting the 4-decimal cell values again could round twice)."""
    rows = weights.detach().float().cpu().tolist()
    return [[f"{q} → {k}: {w:.3f}" for k, w in zip(tokens, row)] for q, row in zip(tokens, rows)]


def _matrix(weights: Tensor) -> list[list[float]]:
    return [[round(float(w), 4) for w in row] for row in weights.detach().float().cpu().tolist()]


def _check(tokens: Sequence[str], weights: Tensor, dims: int) -> None:
    if len(tokens) > MAX_ATTENTION_TOKENS:  # a 512-token grid is millions of cells: megabytes sent, nothing readable
        raise ValueError(f"the attention view draws at most {MAX_ATTENTION_TOKENS} tokens and this input has "
                         f"{len(tokens)}: shorten the sentences")
    if weights.dim() != dims or weights.shape[-1] != len(tokens) or weights.shape[-2] != len(tokens):
        raise ValueError(f"attention weights of shape {tuple(weights.shape)} do not match {len(tokens)} tokens")


def _tick_font(n: int) -> int:
    return 12 if n <= 24 else 10 if n <= 48 else 8


def attention_heatmap(tokens: Sequence[str], weights: Tensor, title: str = "") -> go.Figure:
    """One attention map, weights[query, key]: each row is where one token looks, and sums to 1."""
    _check(tokens, weights, 2)
    labels, z = _labels(tokens), _matrix(weights)
    n = len(labels)
    positions = list(range(n))
    fig = go.Figure(go.Heatmap(
        z=z, x=positions, y=positions, zmin=0, zmax=1, colorscale=COLORSCALE, text=_hover(labels, weights),
        hovertemplate="%{text}<extra></extra>", colorbar=dict(title=dict(text="weight"), thickness=12),
        xgap=1, ygap=1,
    ))
    axis = dict(tickmode="array", tickvals=positions, ticktext=labels, tickfont=dict(size=_tick_font(n)),
                showgrid=False, zeroline=False, automargin=True)
    fig.update_xaxes(**axis, title=dict(text="key: the token attended to", standoff=12), tickangle=-60)
    fig.update_yaxes(**axis, title=dict(text="query: the token attending", standoff=8), autorange="reversed")
    side = min(900, max(360, 26 * n + 170))
    return _layout(fig, title, side, yaxis_scaleanchor="x", plot_bgcolor="white")


def attention_grid(tokens: Sequence[str], weights: Tensor, title: str = "", columns: int = 4) -> go.Figure:
    """All heads of one layer side by side, weights[head, query, key], on one shared colour scale."""
    _check(tokens, weights, 3)
    labels = _labels(tokens)
    heads, n = weights.shape[0], len(labels)
    cols = min(columns, heads)
    rows = math.ceil(heads / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h + 1}" for h in range(heads)],
                        horizontal_spacing=0.04, vertical_spacing=0.12 / rows)
    positions = list(range(n))
    show_ticks = n <= 24
    for h in range(heads):
        z = _matrix(weights[h])
        fig.add_trace(go.Heatmap(z=z, x=positions, y=positions, coloraxis="coloraxis", text=_hover(labels, weights[h]),
                                 hovertemplate=f"head {h + 1}<br>%{{text}}<extra></extra>"),
                      row=h // cols + 1, col=h % cols + 1)
    axis = dict(tickmode="array", tickvals=positions, ticktext=labels, showticklabels=show_ticks,
                tickfont=dict(size=8), showgrid=False, zeroline=False)
    fig.update_xaxes(**axis, tickangle=-90)
    fig.update_yaxes(**axis, autorange="reversed")
    fig.update_layout(coloraxis=dict(colorscale=COLORSCALE, cmin=0, cmax=1,
                                     colorbar=dict(title=dict(text="weight"), thickness=12)))
    height = rows * (300 if show_ticks else 240) + 80
    return _layout(fig, title, height, plot_bgcolor="white")
