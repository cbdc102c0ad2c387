"""Plotly figures for the app: training curves from trainer records, attention maps from weight tensors.

Pure functions: records or tensors in, `go.Figure` out. Each figure is built in one go from plain dicts (`_figure`,
with `_panels` laying out side-by-side charts): plotly's `make_subplots` and `update_*` calls walk the figure's
object tree on every call: they took most of an attention request's time and 49 ms of every live training update.
`template="none"` keeps each figure's JSON small (it is sent to the browser on every live update). Each attention
map's colour scale runs from 0 to its largest weight, so flat maps stay readable (the colour bar says where the top
is); hovering a cell shows "query → key: weight".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from bert_demo.records import Record

if TYPE_CHECKING:  # torch is not imported at start-up: the app's page appears before torch has loaded
    from torch import Tensor

TEMPLATE = "none"
COLORS = {"mlm": "#1f77b4", "nsp": "#d62728", "lr": "#2ca02c"}
COLORSCALE = "Blues"
FONT = dict(family="system-ui, sans-serif", size=12)
MARGIN = dict(l=60, r=20, t=80, b=50)
MAX_ATTENTION_TOKENS = 128  # the longest input the attention heatmaps draw (the shipped model trained on 128)


SUBPLOT_TITLE_FONT = dict(size=12, color="#555")


def _figure(traces: list[dict], title: str, height: int, **layout) -> go.Figure:
    """A figure from its traces and layout as plain dicts, with the app's title, size, font and margins."""
    return go.Figure({"data": traces, "layout": {"template": TEMPLATE, "title": dict(text=title, x=0.02,
                      xanchor="left"), "height": height, "font": FONT, "margin": MARGIN, **layout}})


def _panels(count: int, cols: int, h_gap: float, v_gap: float = 0.0, titles: Sequence[str] = (),
            x: dict | None = None, y: dict | None = None, title_font: dict | None = None) -> dict:
    """The layout of `count` charts, `cols` a row, left to right then down: axes x, x2, ... (with `x` and `y`'s
    settings) over their share of the figure, and each chart's title above it. What make_subplots builds."""
    rows = math.ceil(count / cols)
    # domains are clamped to [0, 1]: float sums end at -2.8e-17
    width, height = (1 - h_gap * (cols - 1)) / cols, (1 - v_gap * (rows - 1)) / rows
    layout: dict = {"annotations": []}
    for i in range(count):
        name = _axis(i)
        left, top = (i % cols) * (width + h_gap), 1 - (i // cols) * (height + v_gap)
        layout[f"xaxis{name}"] = dict(x or {}, domain=[left, min(1.0, left + width)], anchor=f"y{name}")
        layout[f"yaxis{name}"] = dict(y or {}, domain=[max(0.0, top - height), top], anchor=f"x{name}")
        if i < len(titles):
            layout["annotations"].append(dict(text=titles[i], x=left + width / 2, y=top, xref="paper",
                                              yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                                              font=title_font or dict(size=12)))
    return layout


def _axis(i: int) -> str:
    """Plotly's name for the i-th chart's axes: x and y, then x2 and y2, ..."""
    return "" if i == 0 else str(i + 1)


def _on(i: int) -> dict:
    """What puts a trace on the i-th chart of `_panels`."""
    return {"xaxis": f"x{_axis(i)}", "yaxis": f"y{_axis(i)}"}


def empty_figure(message: str, height: int = 280) -> go.Figure:
    """A blank chart with a centred note (before the first data arrives)."""
    return _figure([], "", height, xaxis=dict(visible=False), yaxis=dict(visible=False),
                   annotations=[dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                                     font=dict(size=14, color="#777"))])


# ----------------------------------------------------------------------------------------------------------------
# training curves


def _series(records: Sequence[Record], kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))
            and math.isfinite(r[key])]
    return [r["step"] for r in rows], [round(float(r[key]), 5) for r in rows]


def _curves(records: Sequence[Record], key: str, title: str, y_title: str, height: int, from_zero: bool,
            extra: Sequence[dict] = ()) -> go.Figure:
    """Masked LM (left) and next sentence (right) side by side, as their scales differ ~10x; train solid,
    validation dashed with markers. A loss axis fits the curve (from zero, a fall from 7 to 5 looks flat), but spans
    at least MIN_LOSS_SPAN (zoomed to the data, the noise of a flat start filled the chart)."""
    traces = []
    for panel, group in enumerate(("mlm", "nsp")):
        for kind in ("train", "val"):
            x, y = _series(records, kind, f"{group}_{key}")
            name = f"{group.upper()} {'train' if kind == 'train' else 'validation'}"
            style = (dict(mode="lines", line=dict(color=COLORS[group], width=1.5)) if kind == "train" else
                     dict(mode="lines+markers", line=dict(color=COLORS[group], dash="dash", width=2),
                          marker=dict(size=7)))
            traces.append(dict(type="scatter", x=x, y=y, name=name, **style, **_on(panel),
                               hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra></extra>"))
    traces.extend(extra)
    panels = _panels(2, 2, h_gap=0.1, titles=("masked LM", "next sentence"), title_font=SUBPLOT_TITLE_FONT,
                     x=dict(title=dict(text="step"), rangemode="tozero", automargin=True),
                     y=dict(rangemode="tozero" if from_zero else "normal", automargin=True))
    panels["yaxis"]["title"] = dict(text=y_title)
    if not from_zero:  # each panel's axis spans at least MIN_LOSS_SPAN: noise of 0.05 never fills a chart
        for panel, group in enumerate(("mlm", "nsp")):
            values = [y for kind in ("train", "val") for y in _series(records, kind, f"{group}_{key}")[1]]
            if values:
                panels[f"yaxis{_axis(panel)}"]["range"] = _span(values, MIN_LOSS_SPAN)
    return _figure(traces, title, height, **panels, hovermode="x unified",
                   legend=dict(orientation="h", y=1.14, yanchor="bottom", x=1, xanchor="right", font=dict(size=11)))


def _span(values: Sequence[float], least: float) -> list[float]:
    """An axis range around `values` at least `least` wide, never below 0: a flat, noisy curve looks flat."""
    low, high = min(values), max(values)
    pad = max(least - (high - low), 0.0) / 2 + 0.05 * (high - low)
    return [max(0.0, low - pad), high + pad + max(0.0, pad - low)]


def loss_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Masked-LM and next-sentence loss, training (averaged between logs) and validation."""
    return _curves(records, "loss", "Loss", "cross-entropy", height, from_zero=False)


def accuracy_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Share of masked tokens guessed right, and of sentence pairs judged right (chance: 0.5); with the masked-LM
    accuracy of always guessing the most frequent token, the line that real learning must rise above."""
    x, y = _series(records, "val", "mlm_baseline_acc")
    baseline = [dict(type="scatter", x=x, y=y, name="always the most frequent token", mode="lines", **_on(0),
                     line=dict(color="#888", dash="dot", width=1.5),
                     hovertemplate="always the most frequent token: %{y:.3f}<extra></extra>")] if x else []
    return _curves(records, "acc", "Accuracy", "accuracy", height, from_zero=True, extra=baseline)


def lr_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """The learning-rate schedule: linear warm-up, then linear decay."""
    x, y = _series(records, "train", "lr")
    trace = dict(type="scatter", x=x, y=y, mode="lines", name="learning rate", line=dict(color=COLORS["lr"]),
                 hovertemplate="step %{x}: %{y:.3g}<extra></extra>")
    return _figure([trace], "Learning rate", height, showlegend=False,
                   xaxis=dict(title=dict(text="step"), rangemode="tozero", automargin=True),
                   yaxis=dict(title=dict(text="learning rate"), exponentformat="e", rangemode="tozero",
                              automargin=True))


def training_figures(records: Sequence[Record]) -> tuple[go.Figure, go.Figure, go.Figure]:
    """(loss, accuracy, learning rate) for the Train tab; blank charts with a note until the first step is logged
    (empty axes would show made-up ranges while the corpus is prepared)."""
    if not any(r.get("kind") == "train" for r in records):
        return (empty_figure("Loss appears here after the first steps"), empty_figure("Accuracy"),
                empty_figure("Learning rate"))
    return loss_figure(records), accuracy_figure(records), lr_figure(records)


def _running_elapsed(records: Sequence[Record]) -> list[float]:
    """Each record's time since the run began, in minutes: a resumed run's clock restarts, so carry it over."""
    total, offset, last = [], 0.0, 0.0
    for record in records:
        elapsed = float(record.get("elapsed", 0.0))
        if elapsed < last:  # a new session of the same run
            offset += last
        last = elapsed
        total.append(round((offset + elapsed) / 60, 3))
    return total


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def compare_figure(runs: dict[str, Sequence[Record]], x: str = "tokens") -> go.Figure:
    """Validation masked-LM accuracy (left) and training MLM loss (right) of several runs, against tokens seen or
    minutes of training (log scale), so runs of different batch sizes, speeds and lengths are compared fairly. A
    fine-tuning run has no masked LM: its classification accuracy and loss are drawn instead."""
    traces = []
    for i, (name, records) in enumerate(runs.items()):
        colour = PALETTE[i % len(PALETTE)]
        minutes = dict(zip(map(id, records), _running_elapsed(records)))
        prefix = "mlm_" if any("mlm_acc" in r or "mlm_loss" in r for r in records) else ""
        for panel, (kind, key) in enumerate((("val", f"{prefix}acc"), ("train", f"{prefix}loss"))):
            rows = [r for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))]
            xs = [r.get("tokens", 0) if x == "tokens" else minutes[id(r)] for r in rows]
            traces.append(dict(type="scatter", x=xs, y=[r[key] for r in rows], name=name, legendgroup=name,
                               showlegend=panel == 0, mode="lines+markers" if kind == "val" else "lines",
                               line=dict(color=colour, width=1.8), marker=dict(size=5), **_on(panel)))
    # a log axis: a 3-minute run and a 26-hour one are both readable on it, and early learning is spread out
    panels = _panels(2, 2, h_gap=0.1, titles=("held-out accuracy", "training loss"), title_font=SUBPLOT_TITLE_FONT,
                     x=dict(title=dict(text="tokens seen" if x == "tokens" else "minutes of training"), type="log"))
    panels["yaxis"]["rangemode"] = "tozero"
    return _figure(traces, "Runs compared", 360, **panels,
                   legend=dict(orientation="h", y=-0.3, x=0, font=dict(size=11)))


# ----------------------------------------------------------------------------------------------------------------
# fine-tuning

STARTS = {"pretrained": "pre-trained", "random": "random weights", "frozen": "frozen encoder",
          "well-read": "Google's BERT-Mini"}
MIN_LOSS_SPAN = 1.0  # nats: the least a loss axis shows
START_COLORS = {"pretrained": "#1f77b4", "random": "#d62728", "frozen": "#7f7f7f", "well-read": "#2ca02c"}


def finetune_figure(runs: dict[str, Sequence[Record]], chance: float | None = None, height: int = 340
                    ) -> go.Figure:
    """The experiment's validation accuracy against steps, one curve per start (`runs` maps an init to its
    records), and the majority class's share as the line to beat, named in the legend (a label on the chart sat on
    a curve). The accuracy of single training batches swings between 0 and 1 and is left out."""
    traces = []
    for init, records in runs.items():
        name, colour = STARTS.get(init, init), START_COLORS.get(init, "#2ca02c")
        x, y = _series(records, "val", "acc")
        traces.append(dict(type="scatter", x=x, y=y, name=f"{name} (validation)", legendgroup=init,
                           mode="lines+markers", line=dict(color=colour, width=2.5), marker=dict(size=8),
                           hovertemplate=f"{name}<br>step %{{x}}: %{{y:.3f}}<extra></extra>"))
    last = max([x for trace in traces for x in trace["x"]] + [1])
    if chance is not None:
        traces.append(dict(type="scatter", x=[0, last], y=[chance, chance], mode="lines", hoverinfo="skip",
                           name=f"always the commonest class: {chance:.2f}", line=dict(color="#888", dash="dash",
                                                                                        width=1.5)))
    lowest = min([y for trace in traces for y in trace["y"]] + [chance or 1.0, 0.4])  # 0.4: the usual floor
    return _figure(traces, "Validation accuracy while fine-tuning", height,
                   xaxis=dict(title=dict(text="step"), rangemode="tozero"),
                   yaxis=dict(title=dict(text="accuracy"), range=[max(0.0, lowest - 0.05), 1.0]),
                   legend=dict(orientation="h", y=-0.32, x=0, font=dict(size=11)))


def label_count_figure(points: Sequence[tuple[str, int, float]], metric: str = "accuracy", floor: float = 0.5,
                       height: int = 320) -> go.Figure:
    """The test score (`metric`: accuracy, F1, ...) against the number of labelled sentences trained on (log
    scale), one line per start: `points` are (start, labelled sentences, score); repeated runs of one point are
    averaged and their range drawn as an error bar. The axis starts at `floor` (what always answering the commonest
    class scores, or 0.5) and ends at 1: zoomed to the points, a 0.6-point gap filled the chart."""
    title = f"Test {metric} by number of labels"
    if not points:
        return empty_figure(title, height)
    traces = []
    for init in [i for i in STARTS if any(p[0] == i for p in points)]:
        scores: dict[int, list[float]] = {}
        for _, count, accuracy in (p for p in points if p[0] == init):
            scores.setdefault(count, []).append(accuracy)
        counts = sorted(scores)
        means = [sum(scores[c]) / len(scores[c]) for c in counts]
        spread = dict(type="data", array=[max(scores[c]) - m for c, m in zip(counts, means)],
                      arrayminus=[m - min(scores[c]) for c, m in zip(counts, means)], thickness=1.5, width=5)
        traces.append(dict(type="scatter", x=counts, y=means, customdata=[len(scores[c]) for c in counts],
                           name=STARTS[init], mode="lines+markers", error_y=spread,
                           line=dict(color=START_COLORS[init], width=2.5), marker=dict(size=9),
                           hovertemplate=f"{STARTS[init]}<br>%{{x:,}} labels: %{{y:.3f}} "
                                         "(mean of %{customdata} runs)<extra></extra>"))
    low = min([floor] + [p[2] for p in points])
    return _figure(traces, title, height,
                   xaxis=dict(title=dict(text="labelled sentences trained on"), type="log",
                              tickvals=[100, 300, 1000, 3000, 10000, 30000, 100000]),
                   yaxis=dict(title=dict(text=f"test {metric}"), range=[max(0.0, low - 0.02), 1.0]),
                   legend=dict(orientation="h", y=-0.3, x=0, font=dict(size=11)))


def layer_change_figure(changes: dict[str, Sequence[tuple[str, float]]], height: int = 300) -> go.Figure:
    """How far each part of the encoder moved while fine-tuning, per start (`changes` maps an init to its
    (part, relative change) pairs, bottom to top): ||after - before|| / ||before||."""
    traces = [dict(type="bar", x=[part for part, _ in rows], y=[round(value, 4) for _, value in rows],
                   name=STARTS.get(init, init), marker=dict(color=START_COLORS.get(init, "#2ca02c")),
                   hovertemplate=f"{STARTS.get(init, init)}<br>%{{x}}: moved %{{y:.1%}}<extra></extra>")
              for init, rows in changes.items()]
    return _figure(traces, "How far each layer moved", height, barmode="group",
                   yaxis=dict(title=dict(text="relative change"), tickformat=".1%", rangemode="tozero"),
                   legend=dict(orientation="h", y=-0.25, x=0, font=dict(size=11)))


# ----------------------------------------------------------------------------------------------------------------
# attention


def _labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels; repeated tokens stay separate cells because the axes are numeric positions."""
    return [str(t) for t in tokens]


def _hover(queries: Sequence[str], keys: Sequence[str], weights: Tensor) -> list[list[str]]:
    """Hover text from the weights themselves (formatting the 4-decimal cell values again could round twice)."""
    rows = weights.detach().float().cpu().tolist()
    return [[f"{q} → {k}: {w:.3f}" for k, w in zip(keys, row)] for q, row in zip(queries, rows)]


def _matrix(weights: Tensor) -> list[list[float]]:
    return [[round(float(w), 4) for w in row] for row in weights.detach().float().cpu().tolist()]


def _check(queries: Sequence[str], keys: Sequence[str], weights: Tensor, dims: int) -> None:
    if max(len(queries), len(keys)) > MAX_ATTENTION_TOKENS:  # a 512-token grid is megabytes sent, nothing readable
        raise ValueError(f"the attention view draws at most {MAX_ATTENTION_TOKENS} tokens and this input has "
                         f"{max(len(queries), len(keys))}: shorten the sentences")
    if weights.dim() != dims or weights.shape[-1] != len(keys) or weights.shape[-2] != len(queries):
        raise ValueError(f"attention weights of shape {tuple(weights.shape)} do not match {len(queries)} query and "
                         f"{len(keys)} key tokens")


def _tick_font(n: int) -> int:
    return 12 if n <= 24 else 10 if n <= 48 else 8


def _distinct(labels: Sequence[str]) -> list[str]:
    """Labels made distinct with zero-width spaces ("the", "the\u200b"): a category axis merges equal labels,
    and a repeated token must stay its own row; the spaces do not show."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        out.append(label + "\u200b" * seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    return out


def colour_top(weights: Tensor) -> float:
    """The top of a map's colour scale: its largest weight, so that a flat map (an average, a rollout) still
    shows its structure instead of washing out against a fixed 0-1 scale."""
    return max(float(weights.max()), 0.01)


def attention_heatmap(tokens: Sequence[str], weights: Tensor, title: str = "", keys: Sequence[str] | None = None,
                      top: float | None = None, paired: bool = False) -> go.Figure:
    """One attention map, weights[query, key]: each row is where one token looks. `keys` names the columns when
    they are not the same tokens as the rows (sentence A's attention to sentence B, say). `top` fixes the colour
    scale's top, so that two maps shown side by side mean the same by the same colour; a `paired` map (half a
    row, or a phone's width) fills its space, its cells no longer square: the colour bar lies above it and the
    axes say only "query" and "key"."""
    keys = tokens if keys is None else keys
    _check(tokens, keys, weights, 2)
    rows, cols = _labels(tokens), _labels(keys)
    bar = (dict(orientation="h", thickness=10, len=0.9, y=1.0, yanchor="bottom", ypad=4,
                title=dict(text="weight", side="right")) if paired else dict(title=dict(text="weight"), thickness=12))
    trace = dict(type="heatmap", z=_matrix(weights), x=list(range(len(cols))), y=list(range(len(rows))), zmin=0,
                 zmax=top or colour_top(weights), colorscale=COLORSCALE, text=_hover(rows, cols, weights),
                 hovertemplate="%{text}<extra></extra>", colorbar=bar, xgap=1, ygap=1)
    n = max(len(rows), len(cols))
    axis = dict(tickmode="array", tickfont=dict(size=_tick_font(n)), showgrid=False, zeroline=False, automargin=True)
    side = min(900, max(360, 26 * n + 170))
    key, query = ("key", "query") if paired else ("key: the token attended to", "query: the token attending")
    return _figure([trace], title, side + (40 if paired else 0), plot_bgcolor="white",
                   margin={**MARGIN, "t": 120} if paired else MARGIN,  # the title, then the colour bar
                   xaxis=dict(axis, tickvals=list(range(len(cols))), ticktext=cols, tickangle=-60, constrain="domain",
                              title=dict(text=key, standoff=12)),
                   yaxis=dict(axis, tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed",
                              title=dict(text=query, standoff=8),
                              # square cells with the labels beside; a paired map fills its half row or phone width
                              **({} if paired else dict(scaleanchor="x", constrain="domain"))))


GRID_COLUMNS = 2  # two heads a row: each map is wide enough for its token labels at 1400 px
GRID_LABELS_UP_TO = 48  # tokens; past this the labels overlap and only hovering names a cell


def attention_grid(tokens: Sequence[str], weights: Tensor, title: str = "", keys: Sequence[str] | None = None
                   ) -> go.Figure:
    """All heads of one layer, two a row, weights[head, query, key], on one colour scale shared by the heads.

    """
    keys = tokens if keys is None else keys
    _check(tokens, keys, weights, 3)
    row_labels, col_labels = _labels(tokens), _labels(keys)
    heads, n = weights.shape[0], max(len(row_labels), len(col_labels))
    cols = min(GRID_COLUMNS, heads)
    rows = math.ceil(heads / cols)
    labelled = n <= GRID_LABELS_UP_TO
    axis = dict(type="category", showticklabels=labelled, tickfont=dict(size=_tick_font(n)), showgrid=False,
                zeroline=False)
    layout = _panels(heads, cols, h_gap=0.12, v_gap=0.25 / rows, titles=[f"head {h + 1}" for h in range(heads)],
                     x=dict(axis, tickangle=-90), y=dict(axis, autorange="reversed"))
    # the tokens themselves are the axes (kept distinct), so hovering names a cell without a text per cell:
    # that text was three quarters of the figure's JSON, sent and parsed on every request
    rows_, columns = _distinct(row_labels), _distinct(col_labels)
    traces = [dict(type="heatmap", z=_matrix(weights[h]), x=columns, y=rows_, coloraxis="coloraxis", **_on(h),
                   hovertemplate=f"head {h + 1}<br>%{{y}} → %{{x}}: %{{z:.3f}}<extra></extra>")
              for h in range(heads)]
    label_room = 9 * max(len(t) for t in row_labels + col_labels) if labelled else 0
    return _figure(traces, title, rows * (max(220, 13 * n) + label_room + 40) + 80, plot_bgcolor="white", **layout,
                   coloraxis=dict(colorscale=COLORSCALE, cmin=0, cmax=colour_top(weights),
                                  colorbar=dict(title=dict(text="weight"), thickness=12)))


# ----------------------------------------------------------------------------------------------------------------
# looking inside: head importance and the embedding space


def head_importance_figure(labels: Sequence[str], drops: Tensor) -> go.Figure:
    """drops[target, layer, head] as one heatmap per target, one under another (readable on a phone too): red
    where switching a head off costs the answer probability, blue where the head was working against it."""
    targets, layers, heads = drops.shape
    top = max(float(drops.abs().max()), 0.01)
    traces = [dict(type="heatmap", z=[[round(float(v), 4) for v in row] for row in drops[t].tolist()],
                   x=[f"H{h + 1}" for h in range(heads)], y=[f"L{i + 1}" for i in range(layers)],
                   coloraxis="coloraxis", xgap=2, ygap=2, **_on(t),
                   hovertemplate="layer %{y}, head %{x}: %{z:+.3f}<extra></extra>") for t in range(targets)]
    layout = _panels(targets, 1, h_gap=0.0, v_gap=0.3 / targets, titles=list(labels), y=dict(autorange="reversed"))
    return _figure(traces, "What each head adds", targets * (26 * layers + 70) + 90, plot_bgcolor="white", **layout,
                   coloraxis=dict(colorscale="RdBu", reversescale=True, cmin=-top, cmax=top,
                                  colorbar=dict(title=dict(text="drop"), thickness=12)))


def projection_figure(points: Sequence[tuple[str, float, float]]) -> go.Figure:
    """Words at their embeddings' first two principal components, each labelled."""
    trace = dict(type="scatter", x=[x for _, x, _ in points], y=[y for _, _, y in points], mode="markers+text",
                 text=[w for w, _, _ in points], textposition="top center", marker=dict(size=9, color=COLORS["mlm"]),
                 hovertemplate="%{text}: (%{x:.2f}, %{y:.2f})<extra></extra>")
    return _figure([trace], "Embedding space (PCA)", 460,
                   xaxis=dict(title=dict(text="principal component 1"), zeroline=False),
                   yaxis=dict(title=dict(text="principal component 2"), zeroline=False))
