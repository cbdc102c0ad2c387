"""Plotly figures for the app: training and fine-tuning curves from a run's records (`figures` draws what is inside a
model: attention maps, head importance, the projection).

Pure functions: records in, `go.Figure` out. Each figure is built in one go from plain dicts (`_figure`,
with `_panels` laying out side-by-side charts): plotly's `make_subplots` and `update_*` calls walk the figure's
object tree on every call: they took most of an attention request's time and 49 ms of every live training update.
`template="none"` keeps each figure's JSON small (it is sent to the browser on every live update).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from bert_demo.training.records import Record

TEMPLATE = "none"
COLORS = {"mlm": "#1f77b4", "nsp": "#d62728", "lr": "#2ca02c"}
COLORSCALE = "Blues"
FONT = dict(family="system-ui, sans-serif", size=12)
MARGIN = dict(l=60, r=20, t=80, b=50)


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
    """A blank chart with a centred note (before the first data arrives): no axis, so no room kept for one on the
    left, which put the note off centre on a phone."""
    note = dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=14, color="#777"))
    return _figure([], "", height, xaxis=dict(visible=False), yaxis=dict(visible=False),
                   margin=dict(MARGIN, l=MARGIN["r"]), annotations=[note])


# ----------------------------------------------------------------------------------------------------------------
# training curves


def _series(records: Sequence[Record], kind: str, key: str) -> tuple[list[int], list[float]]:
    rows = [r for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))
            and math.isfinite(r[key])]
    return [r["step"] for r in rows], [round(float(r[key]), 5) for r in rows]


def _curves(records: Sequence[Record], key: str, title: str, y_title: str, height: int, from_zero: bool,
            extra: Sequence[dict] = (), skip: tuple[str, str] | None = None) -> go.Figure:
    """Masked LM (left) and next sentence (right) side by side, as their scales differ ~10x; train solid,
    validation dashed with markers (`skip`, a (group, kind), left out: `extra` draws it otherwise). A loss axis fits
    the curve (from zero, a fall from 7 to 5 looks flat), but spans at least MIN_LOSS_SPAN (zoomed to the data, the
    noise of a flat start filled the chart)."""
    traces = []
    for panel, group in enumerate(("mlm", "nsp")):
        for kind in ("train", "val"):
            if (group, kind) == skip:
                continue
            x, y = _series(records, kind, f"{group}_{key}")
            name = f"{group.upper()} {'train' if kind == 'train' else 'validation'}"
            style = (dict(mode="lines", line=dict(color=COLORS[group], width=1.5)) if kind == "train" else
                     dict(mode="lines+markers", line=dict(color=COLORS[group], dash="dash", width=2),
                          marker=dict(size=7)))
            traces.append(dict(type="scatter", x=x, y=y, name=name, **style, **_on(panel),
                               hovertemplate=f"{name}<br>step %{{x}}: %{{y:.4g}}<extra></extra>"))
    traces.extend(extra)
    panels = _panels(2, 2, h_gap=0.1, titles=("masked LM", "next sentence"), title_font=SUBPLOT_TITLE_FONT,
                     x=dict(title=dict(text="step"), rangemode="tozero", automargin=True, nticks=4,
                            ticklabeloverflow="hide past domain"),  # a phone: no "1500 0" where panels meet
                     y=dict(rangemode="tozero" if from_zero else "normal", automargin=True))
    panels["yaxis"]["title"] = dict(text=y_title)
    if not from_zero:  # each panel's axis spans at least MIN_LOSS_SPAN: noise of 0.05 never fills a chart
        for panel, group in enumerate(("mlm", "nsp")):
            values = [y for kind in ("train", "val") for y in _series(records, kind, f"{group}_{key}")[1]]
            if values:
                panels[f"yaxis{_axis(panel)}"]["range"] = _span(values, MIN_LOSS_SPAN)
    below = 70 + 20 * math.ceil(len(traces) / 2)  # the legend's room under the axes, two entries a row on a phone
    return _figure(traces, title, height + below - MARGIN["b"], **panels, hovermode="x unified",
                   margin=dict(MARGIN, b=below),  # the legend below the charts: the toolbar sits above them
                   legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                               font=dict(size=11)))


def _span(values: Sequence[float], least: float) -> list[float]:
    """An axis range around `values` at least `least` wide, never below 0: a flat, noisy curve looks flat."""
    low, high = min(values), max(values)
    pad = max(least - (high - low), 0.0) / 2 + 0.05 * (high - low)
    return [max(0.0, low - pad), high + pad + max(0.0, pad - low)]


def loss_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Masked-LM and next-sentence loss, training (averaged between logs) and validation."""
    return _curves(records, "loss", "Loss", "cross-entropy", height, from_zero=False)


NSP_DRAWS = {"nsp_acc_any": ("B: any other document (topic tells)", "#ff7f0e"),
             "nsp_acc_same": ("B: another of A's source (coherence)", "#9467bd")}  # held-out NSP by random B


def accuracy_figure(records: Sequence[Record], height: int = 300) -> go.Figure:
    """Share of masked tokens guessed right, and of sentence pairs judged right, with chance (0.5) drawn; with the
    masked-LM accuracy of always guessing the most frequent token, the line that real learning must rise above.
    Where the run validated next-sentence prediction under both random Bs, each is a held-out curve of its own: a
    random document of any source can be told by its topic alone, one of A's own source only by coherence (Lan et
    al. 2019, ALBERT, §4.6)."""
    x, y = _series(records, "val", "mlm_baseline_acc")
    extra = [dict(type="scatter", x=x, y=y, name="always the most frequent token", mode="lines", **_on(0),
                  line=dict(color="#888", dash="dot", width=1.5),
                  hovertemplate="always the most frequent token: %{y:.3f}<extra></extra>")] if x else []
    steps = [r["step"] for r in records
             if isinstance(r.get("step"), (int, float)) and r.get("kind") in ("train", "val")]
    if steps:
        extra.append(dict(type="scatter", x=[min(steps), max(steps)], y=[0.5, 0.5], name="chance", mode="lines",
                          **_on(1), line=dict(color="#888", dash="dot", width=1.5),
                          hovertemplate="chance: 0.5<extra></extra>"))
    draws = {key: _series(records, "val", key) for key in NSP_DRAWS}
    for key, (x, y) in draws.items():
        if x:
            name, colour = NSP_DRAWS[key]
            extra.append(dict(type="scatter", x=x, y=y, name=name, mode="lines+markers", **_on(1),
                              line=dict(color=colour, dash="dash", width=2), marker=dict(size=6),
                              hovertemplate=f"{name}<br>step %{{x}}: %{{y:.3f}}<extra></extra>"))
    both = all(x for x, _ in draws.values())
    return _curves(records, "acc", "Accuracy", "accuracy", height, from_zero=True, extra=extra,
                   skip=("nsp", "val") if both else None)


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

MIN_LOSS_SPAN = 1.0  # nats: the least a loss axis shows
# each start of a fine-tuning run as people read it; "well-read" is Google's BERT of the selected model's shape, the
# Fine-tune tab's third start
START_NAMES = {"pretrained": "pre-trained", "random": "random weights", "frozen": "frozen encoder",
               "well-read": "Google's BERT, same shape"}
START_COLORS = {"pretrained": "#1f77b4", "random": "#d62728", "frozen": "#7f7f7f", "well-read": "#2ca02c"}


def finetune_figure(runs: dict[str, Sequence[Record]], chance: float | None = None, height: int = 340
                    ) -> go.Figure:
    """The experiment's validation accuracy against steps, one curve per start (`runs` maps an init to its
    records), and the majority class's share as the line to beat, named in the legend (a label on the chart sat on
    a curve). The accuracy of single training batches swings between 0 and 1 and is left out."""
    traces = []
    for init, records in runs.items():
        name, colour = START_NAMES.get(init, init), START_COLORS.get(init, "#2ca02c")
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
    # the steps are named in the title, not under the axis: a legend placed as a share of the plot's height rose
    # into an axis title there where a phone's width wraps it onto more lines
    return _figure(traces, "Validation accuracy by step", height,
                   xaxis=dict(rangemode="tozero"),
                   yaxis=dict(title=dict(text="accuracy"), range=[max(0.0, lowest - 0.05), 1.0]),
                   legend=dict(orientation="h", y=-0.2, x=0, font=dict(size=11)))


LABEL_COUNTS_EMPTY = ("each experiment on this task that ends<br>adds its starts' test scores here:<br>run other "
                      "label counts to draw the curve")


def label_count_figure(points: Sequence[tuple[str, int, float]], metric: str = "accuracy", floor: float = 0.5,
                       height: int = 320, empty: str = LABEL_COUNTS_EMPTY) -> go.Figure:
    """The test score (`metric`: accuracy, F1, ...) against the number of labelled sentences trained on (log
    scale), one line per start: `points` are (start, labelled sentences, score); repeated runs of one point are
    averaged and their range drawn as an error bar. The axis starts at `floor` (what always answering the commonest
    class scores, or 0.5) and ends at 1: zoomed to the points, a 0.6-point gap filled the chart. Without points,
    the title and `empty`, what would fill it (in lines short enough for a phone)."""
    title = f"Test {metric} by number of labels"
    if not points:
        return empty_figure(f"{title}<br><span style='font-size:12px'>{empty}</span>", height)
    traces = []
    for init in [i for i in START_NAMES if any(p[0] == i for p in points)]:
        scores: dict[int, list[float]] = {}
        for _, count, accuracy in (p for p in points if p[0] == init):
            scores.setdefault(count, []).append(accuracy)
        counts = sorted(scores)
        means = [sum(scores[c]) / len(scores[c]) for c in counts]
        spread = dict(type="data", array=[max(scores[c]) - m for c, m in zip(counts, means)],
                      arrayminus=[m - min(scores[c]) for c, m in zip(counts, means)], thickness=1.5, width=5)
        traces.append(dict(type="scatter", x=counts, y=means, customdata=[len(scores[c]) for c in counts],
                           name=START_NAMES[init], mode="lines+markers", error_y=spread,
                           line=dict(color=START_COLORS[init], width=2.5), marker=dict(size=9),
                           hovertemplate=f"{START_NAMES[init]}<br>%{{x:,}} labels: %{{y:.3f}} "
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
                   name=START_NAMES.get(init, init), marker=dict(color=START_COLORS.get(init, "#2ca02c")),
                   hovertemplate=f"{START_NAMES.get(init, init)}<br>%{{x}}: moved %{{y:.1%}}<extra></extra>")
              for init, rows in changes.items()]
    return _figure(traces, "How far each layer moved", height, barmode="group",
                   yaxis=dict(title=dict(text="relative change"), tickformat=".1%", rangemode="tozero"),
                   legend=dict(orientation="h", y=-0.25, x=0, font=dict(size=11)))


# ----------------------------------------------------------------------------------------------------------------
# attention
