"""Plotly figures of one training step (`training_step`): where the gradient flows through the forward pass and where
it fades, how much reaches each head, each part of the model's gradient, and the example's loss step after step.

Pure functions: tensors and numbers in, `go.Figure` out, laid out with `curves`' helpers. The gradient's size spans
orders of magnitude from the heads to the embeddings, so its pictures are coloured by its logarithm.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from bert_demo.inspection.curves import COLORS, COLORSCALE, MARGIN, _axis, _figure, _on, _panels

if TYPE_CHECKING:  # torch is not imported at start-up
    from torch import Tensor

GROUP_COLOURS = {"embeddings": "#6b7280", "masked-LM head": COLORS["mlm"], "next-sentence head": COLORS["nsp"]}
LAYER_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def _log_ticks(low: float, high: float) -> dict:
    """A colour bar above the picture (its width is the picture's, on a phone too) whose ticks name powers of ten
    between `low` and `high` (log10 values)."""
    powers = list(range(math.floor(low), math.ceil(high) + 1))
    return dict(tickvals=powers, ticktext=[f"1e{p}" for p in powers], thickness=10, orientation="h", len=0.9,
                y=1.0, yanchor="bottom", ypad=4, title=dict(text="size of the gradient", side="top"))


def flow_figure(rows: Sequence[str], labels: Sequence[str], sizes: Tensor) -> go.Figure:
    """sizes[step, token], the gradient's size at each step of the forward pass and each token, drawn with the loss
    on the left and the embeddings on the right (the way the gradient travels): a row a token (`rows`, as the forward
    pass names them), a column a step; blank where a step computes nothing for a token, or where no gradient reaches
    it."""
    import torch

    sizes = sizes.flip(0).masked_fill(sizes.flip(0) == 0, math.nan)  # from the heads back; none reached: blank
    labels = list(reversed(labels))
    logs = torch.log10(sizes)
    low, high = float(logs.nan_to_num(math.inf).min()), float(logs.nan_to_num(-math.inf).max())
    rows = list(rows)
    text = [[f"{value:.3g}" for value in row] for row in sizes.T.tolist()]
    trace = dict(type="heatmap", z=logs.T.tolist(), x=list(range(len(labels))), y=rows, text=text,
                 colorscale="Viridis", zmin=low, zmax=high, colorbar=_log_ticks(low, high), hoverongaps=False,
                 customdata=[labels] * len(rows),
                 hovertemplate="%{y} · %{customdata}: %{text}<extra></extra>")
    height = min(1100, max(300, 9 * len(rows) + 330))
    return _figure([trace], "", height, plot_bgcolor="white", margin=dict(MARGIN, t=90, b=40),
                   xaxis=dict(tickvals=list(range(len(labels))), ticktext=labels, tickangle=-60,
                              tickfont=dict(size=8), showgrid=False, zeroline=False, automargin=True),
                   yaxis=dict(autorange="reversed", tickfont=dict(size=8 if len(rows) > 40 else 10),
                              showgrid=False, zeroline=False, type="category", automargin=True))


def head_flow_figure(sizes: Tensor) -> go.Figure:
    """sizes[layer, head]: how much gradient reaches each head's output, one cell a head, its value written in."""
    layers, heads = sizes.shape
    values = sizes.tolist()
    trace = dict(type="heatmap", z=values, x=[str(h + 1) for h in range(heads)],
                 y=[f"layer {layer + 1}" for layer in range(layers)], colorscale=COLORSCALE, zmin=0,
                 text=[[f"{v:.2g}" for v in row] for row in values], texttemplate="%{text}", xgap=2, ygap=2,
                 colorbar=dict(thickness=10), hovertemplate="%{y}, head %{x}: %{text}<extra></extra>")
    return _figure([trace], "", 60 * layers + 150, plot_bgcolor="white", margin=dict(MARGIN, t=40, l=70),
                   yaxis=dict(autorange="reversed", type="category"),  # the heads below: the toolbar sits on top
                   xaxis=dict(type="category", tickangle=0, title=dict(text="head")))


def gradient_norms_figure(rows: Sequence[tuple[str, str, float]]) -> go.Figure:
    """Each part's gradient size (`training_step.gradient_norms`), a bar each in the order of the forward pass, on a
    log axis, coloured by where it sits: the embeddings, each layer, the two heads."""
    names = [f"{group} · {part}" for group, part, _ in rows]
    colours = [GROUP_COLOURS.get(group) or LAYER_COLOURS[(int(group.split()[-1]) - 1) % len(LAYER_COLOURS)]
               for group, _, _ in rows]
    sizes = [max(norm, 1e-12) for _, _, norm in rows]
    decades = math.ceil(math.log10(max(sizes))) - math.floor(math.log10(min(sizes)))  # a phone reads 6 ticks
    trace = dict(type="bar", orientation="h", x=sizes, y=names, marker=dict(color=colours),
                 hovertemplate="%{y}: %{x:.3g}<extra></extra>")
    powers = range(math.floor(math.log10(min(sizes))), math.ceil(math.log10(max(sizes))) + 1, 1 if decades <= 6 else 2)
    return _figure([trace], "", 26 * len(rows) + 140, plot_bgcolor="white", showlegend=False,
                   margin=dict(MARGIN, t=40, l=10),  # the toolbar above the first bar
                   xaxis=dict(type="log", title=dict(text="gradient size (L2)"), gridcolor="#eee",
                              tickvals=[10.0 ** p for p in powers], ticktext=[_power(p) for p in powers]),
                   yaxis=dict(autorange="reversed", automargin=True, tickfont=dict(size=10), type="category",
                              tickvals=names, ticktext=[f"{group}<br>{part}" for group, part, _ in rows]))


def _power(exponent: int) -> str:
    """10 to a power as a tick says it: 0.01, 0.1, 1, 10, 100, and 1e-3 or 1e3 beyond."""
    return f"{10.0 ** exponent:g}" if -2 <= exponent <= 2 else f"1e{exponent}"


def losses_figure(losses: Sequence[float]) -> go.Figure:
    """The example's loss before the first step and after each step taken on it."""
    trace = dict(type="scatter", mode="lines+markers", x=list(range(len(losses))), y=list(losses),
                 marker=dict(color=COLORS["mlm"]), line=dict(color=COLORS["mlm"]),
                 hovertemplate="after %{x} steps: %{y:.4f}<extra></extra>")
    return _figure([trace], "", 260, plot_bgcolor="white", margin=dict(MARGIN, t=20),
                   xaxis=dict(title=dict(text="steps taken on this example"), dtick=1, gridcolor="#eee"),
                   yaxis=dict(title=dict(text="its loss"), gridcolor="#eee", rangemode="tozero"))


def across_figure(moments: Sequence, labels: Sequence[str]) -> go.Figure:
    """The example across training (`across_training.across`): its loss, and each picked label's rank among the
    model's guesses (log scale: 1 is the top guess), against the training step, side by side."""
    steps = [max(m.step, 1) for m in moments]  # a log axis: step 0 is drawn at 1
    loss = dict(type="scatter", mode="lines+markers", x=steps, y=[m.loss for m in moments], name="loss",
                line=dict(color=COLORS["mlm"]), xaxis="x", yaxis="y",
                hovertemplate="step %{customdata}: loss %{y:.3f}<extra></extra>", customdata=[m.step for m in moments])
    ranks = [dict(type="scatter", mode="lines+markers", x=steps, y=[m.ranks[i] for m in moments], name=label,
                  xaxis="x2", yaxis="y2", marker=dict(size=5), line=dict(width=1),
                  hovertemplate=f"{label}: rank %{{y}} at step %{{customdata}}<extra></extra>",
                  customdata=[m.step for m in moments]) for i, label in enumerate(labels)]
    axis = dict(type="log", title=dict(text="training step (0 drawn at 1)"), gridcolor="#eee")
    return _figure([loss, *ranks], "", 360, plot_bgcolor="white", showlegend=False, margin=dict(MARGIN, t=40),
                   xaxis=dict(axis, domain=[0, 0.45]), xaxis2=dict(axis, domain=[0.55, 1], anchor="y2"),
                   yaxis=dict(title=dict(text="the example's loss"), gridcolor="#eee", rangemode="tozero"),
                   yaxis2=dict(type="log", autorange="reversed", title=dict(text="each label's rank (1: top)"),
                               gridcolor="#eee", anchor="x2"))


def adam_figure(run: Any) -> go.Figure:
    """Each traced weight's move at each step of a short run (`over_time.run`), Adam's against SGD's and SGD with
    momentum's on the same gradients, as |move| ÷ the peak rate on a log axis (SGD's are orders of magnitude
    smaller), with the rate's schedule (rate ÷ peak) dashed: a chart a weight."""
    steps = list(range(1, len(run.rates) + 1))
    count = len(run.traces)
    titles = [f"{t.name.removeprefix('bert.').rsplit('.', 1)[0]}<br>.{t.name.rsplit('.', 1)[1]}{list(t.index)}"
              for t in run.traces]  # two lines: a phone's width holds each
    layout = _panels(count, 1, 0, 0.14, titles=titles, x=dict(dtick=1, gridcolor="#eee"),
                     y=dict(type="log", gridcolor="#eee", title=dict(text="|move| ÷ peak rate"), exponentformat="e"),
                     title_font=dict(size=11, color="#555"))
    series = ((run.optimizer, "move", COLORS["mlm"], "solid"), ("SGD", "sgd", "#6b7280", "solid"),
              (f"SGD, momentum {run.momentum:g}", "sgd_momentum", COLORS["nsp"], "dot"))
    traces = []
    for i, trace in enumerate(run.traces):
        for name, field, colour, dash in series:
            moves = getattr(trace, field)
            traces.append(dict(type="scatter", mode="lines+markers", x=steps,
                               y=[max(abs(m) / run.peak_lr, 1e-12) for m in moves], name=name, legendgroup=name,
                               showlegend=i == 0, line=dict(color=colour, dash=dash), marker=dict(size=5),
                               customdata=moves,
                               hovertemplate=f"{name}, step %{{x}}: %{{customdata:+.3e}}<extra></extra>",
                               **_on(i)))
        traces.append(dict(type="scatter", mode="lines", x=steps, y=[r / run.peak_lr for r in run.rates],
                           name="rate ÷ peak", legendgroup="rate", showlegend=i == 0,
                           line=dict(color="#999", dash="dash"), hovertemplate="rate ÷ peak %{y:.2f}<extra></extra>",
                           **_on(i)))
    layout[f"xaxis{_axis(count - 1)}"]["title"] = dict(text="step")  # under the last chart only
    return _figure(traces, "", 240 * count + 170, plot_bgcolor="white", margin=dict(MARGIN, t=50, b=130),
                   legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
                   **layout)


def depth_figure(depths: Sequence) -> go.Figure:
    """The gradient through the depth (`across_training.depth_across`), two charts one above the other (a phone's
    width holds each): its size at each layer's output (embeddings, layer 1, ..., the last), a line a snapshot,
    darker later; below, the size of each layer's weights' gradient."""
    count = len(depths)
    layers = len(depths[0].in_weights)
    places = ["embeddings", *[f"layer {i + 1}" for i in range(layers)]]
    layout = _panels(2, 1, 0, 0.2, titles=["|∂loss/∂h| at each layer's output", "each layer's weights' gradient"],
                     x=dict(type="category", gridcolor="#eee", categoryorder="array", categoryarray=places),
                     y=dict(type="log", gridcolor="#eee"), title_font=dict(size=12, color="#555"))
    traces = []
    for k, depth in enumerate(depths):
        shade = f"rgba(31, 119, 180, {0.25 + 0.75 * k / max(count - 1, 1):.2f})"
        style = dict(mode="lines+markers", line=dict(color=shade), marker=dict(size=5, color=shade))
        traces.append(dict(type="scatter", x=places, y=depth.at_outputs, name=f"step {depth.step}",
                           legendgroup=str(depth.step),
                           hovertemplate=f"step {depth.step}, %{{x}}: %{{y:.3g}}<extra></extra>", **style, **_on(0)))
        traces.append(dict(type="scatter", x=places[1:], y=depth.in_weights, name=f"step {depth.step}",
                           legendgroup=str(depth.step), showlegend=False,
                           hovertemplate=f"step {depth.step}, %{{x}}'s weights: %{{y:.3g}}<extra></extra>", **style,
                           **_on(1)))
    return _figure(traces, "", 680, plot_bgcolor="white", margin=dict(MARGIN, t=40, b=140),
                   legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                               font=dict(size=10)), **layout)
