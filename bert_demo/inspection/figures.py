"""Plotly figures of what is inside a model: attention maps (one head, every head of a layer, the model's every
head as thumbnails), how a head's weights are made (the neuron view), head importance, and words projected on a plane.

Pure functions: tensors in, `go.Figure` (or pictures) out, laid out with `curves`' helpers. Each attention map's colour
scale runs from 0 to its largest weight, so flat maps stay readable (the colour bar says where the top is); hovering a
cell shows "query → key: weight".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from bert_demo.inspection.curves import (
    COLORS,
    COLORSCALE,
    MARGIN,
    _axis,
    _figure,
    _on,
    _panels,
    empty_figure,
)

if TYPE_CHECKING:  # torch is not imported at start-up: the app's page appears before torch has loaded
    from torch import Tensor

MAX_ATTENTION_TOKENS = 128  # the longest input the attention heatmaps draw (the shipped model trained on 128)


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
    scale's top, so that two maps shown side by side mean the same by the same colour. The colour bar lies above
    the map and the axes say only "query" and "key" (the caption says more), so that on a phone the map, not its
    frame, has the width; its cells are square, the map at the top of its space, unless it is `paired` (half a
    row), when it fills its space."""
    keys = tokens if keys is None else keys
    _check(tokens, keys, weights, 2)
    rows, cols = _labels(tokens), _labels(keys)
    bar = dict(orientation="h", thickness=10, len=0.9, y=1.0, yanchor="bottom", ypad=4,
               title=dict(text="weight", side="right"))
    trace = dict(type="heatmap", z=_matrix(weights), x=list(range(len(cols))), y=list(range(len(rows))), zmin=0,
                 zmax=top or colour_top(weights), colorscale=COLORSCALE, text=_hover(rows, cols, weights),
                 hovertemplate="%{text}<extra></extra>", colorbar=bar, xgap=1, ygap=1)
    n = max(len(rows), len(cols))
    axis = dict(tickmode="array", tickfont=dict(size=_tick_font(n)), showgrid=False, zeroline=False, automargin=True)
    side = min(900, max(360, 26 * n + 170))
    return _figure([trace], title, side + 40, plot_bgcolor="white",
                   margin={**MARGIN, "t": 120},  # the title, then the colour bar
                   xaxis=dict(axis, tickvals=list(range(len(cols))), ticktext=cols, tickangle=-60, constrain="domain",
                              title=dict(text="key", standoff=12)),
                   yaxis=dict(axis, tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed",
                              title=dict(text="query", standoff=8),
                              **({} if paired else dict(scaleanchor="x", constrain="domain", constraintoward="top"))))


GRID_COLUMNS = 2  # two heads a row: each map is wide enough for its token labels at 1400 px
GRID_LABELS_UP_TO = 48  # tokens; past this the labels overlap and only hovering names a cell


def attention_grid(tokens: Sequence[str], weights: Tensor, title: str = "", keys: Sequence[str] | None = None
                   ) -> go.Figure:
    """All heads of one layer, two a row, weights[head, query, key], on one colour scale shared by the heads. The
    rows' tokens are named once, left of each row of maps (every map has the same rows: a second set of labels
    between the maps ran into the first map on a phone), in a margin as wide as they need ("condemned" had lost its
    first letters), and the colour bar lies above the maps, so that their width goes to the maps."""
    keys = tokens if keys is None else keys
    _check(tokens, keys, weights, 3)
    row_labels, col_labels = _labels(tokens), _labels(keys)
    heads, n = weights.shape[0], max(len(row_labels), len(col_labels))
    cols = min(GRID_COLUMNS, heads)
    rows = math.ceil(heads / cols)
    labelled = n <= GRID_LABELS_UP_TO
    axis = dict(type="category", showticklabels=labelled, tickfont=dict(size=_tick_font(n)), showgrid=False,
                zeroline=False, automargin=True)
    layout = _panels(heads, cols, h_gap=0.04, v_gap=0.25 / rows, titles=[f"head {h + 1}" for h in range(heads)],
                     x=dict(axis, tickangle=-90), y=dict(axis, autorange="reversed"))
    for h in range(heads):
        if h % cols:  # the same rows as the map on their left
            layout[f"yaxis{_axis(h)}"]["showticklabels"] = False
    # the tokens themselves are the axes (kept distinct), so hovering names a cell without a text per cell:
    # that text was three quarters of the figure's JSON, sent and parsed on every request
    rows_, columns = _distinct(row_labels), _distinct(col_labels)
    traces = [dict(type="heatmap", z=_matrix(weights[h]), x=columns, y=rows_, coloraxis="coloraxis", **_on(h),
                   hovertemplate=f"head {h + 1}<br>%{{y}} → %{{x}}: %{{z:.3f}}<extra></extra>")
              for h in range(heads)]
    label_room = 9 * max(len(t) for t in row_labels + col_labels) if labelled else 0
    bar = dict(orientation="h", thickness=10, len=0.9, y=1.0, yanchor="bottom", ypad=24,
               title=dict(text="weight", side="right"))
    return _figure(traces, title, rows * (max(220, 13 * n) + label_room + 40) + 120, plot_bgcolor="white",
                   **layout, margin={**MARGIN, "t": 130},  # the title, then the colour bar
                   coloraxis=dict(colorscale=COLORSCALE, cmin=0, cmax=colour_top(weights), colorbar=bar))


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


LABEL_SPOTS = ("top center", "bottom center", "middle right", "middle left", "top right", "top left",
               "bottom right", "bottom left")  # where a point's label may go, the first preferred
# where the points lie, (width, height) px, at 390 and at 1400 px (measured): labels apart on a phone may meet where
# the chart is five times wider (two labels facing each other across the gap between their points), so both count
PROJECTION_AREAS_PX = ((200, 250), (1100, 290))
CHAR_PX, LINE_PX, LABEL_GAP_PX = 7.0, 15.0, 5.0  # a label's size at the chart's 12 px font, and its gap to its point
PROJECTION_PAD_PX = 16.0  # the room an axis's automatic range leaves beyond its outermost points


def projection_figure(points: Sequence[tuple[str, float, float]]) -> go.Figure:
    """Words at their embeddings' first two principal components, each labelled on the side of its point where it
    covers the fewest other labels and points ("king" and "england" were drawn over each other)."""
    trace = dict(type="scatter", x=[x for _, x, _ in points], y=[y for _, _, y in points], mode="markers+text",
                 text=[w for w, _, _ in points], textposition=label_spots(points),
                 marker=dict(size=9, color=COLORS["mlm"]), hovertemplate="%{text}: (%{x:.2f}, %{y:.2f})<extra></extra>")
    return _figure([trace], "Embedding space (PCA)", 460,
                   xaxis=dict(title=dict(text="principal component 1"), zeroline=False),
                   yaxis=dict(title=dict(text="principal component 2"), zeroline=False))


def label_spots(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """Each point's label position (LABEL_SPOTS), on a phone's chart and a desktop's alike: chosen one point after
    another to overlap least the points, the labels placed so far and the edges, then each chosen again against all
    the others' (a label placed early could not see those placed after it)."""
    xs, ys = [x for _, x, _ in points], [y for _, _, y in points]
    areas = []  # for each chart size: its points' boxes, each label's box at each spot, and the size
    for width, height in PROJECTION_AREAS_PX:
        scale_x, scale_y = width / ((max(xs) - min(xs)) or 1.0), height / ((max(ys) - min(ys)) or 1.0)
        centres = [((x - min(xs)) * scale_x, (y - min(ys)) * scale_y) for x, y in zip(xs, ys)]
        areas.append(([(cx - 5, cy - 5, cx + 5, cy + 5) for cx, cy in centres],
                      [{spot: _label_box(spot, cx, cy, CHAR_PX * len(word)) for spot in LABEL_SPOTS}
                       for (word, _, _), (cx, cy) in zip(points, centres)], (width, height)))
    spots: list[str | None] = [None] * len(points)

    def cost(i: int, spot: str) -> float:
        total = 0.0
        for dots, boxes, size in areas:
            others = dots + [boxes[j][s] for j, s in enumerate(spots) if j != i and s is not None]
            total += sum(_overlap(boxes[i][spot], box) for box in others) + _outside(boxes[i][spot], *size)
        return total

    for _ in range(2):
        for i in range(len(points)):
            spots[i] = min(LABEL_SPOTS, key=lambda spot: (cost(i, spot), LABEL_SPOTS.index(spot)))
    return spots


def _label_box(spot: str, cx: float, cy: float, width: float) -> tuple[float, float, float, float]:
    """(left, bottom, right, top) of a label at `spot` beside the point (cx, cy), y upwards."""
    vertical, horizontal = spot.split()
    low = {"top": cy + LABEL_GAP_PX, "bottom": cy - LABEL_GAP_PX - LINE_PX, "middle": cy - LINE_PX / 2}[vertical]
    left = {"center": cx - width / 2, "right": cx + LABEL_GAP_PX, "left": cx - LABEL_GAP_PX - width}[horizontal]
    return left, low, left + width, low + LINE_PX


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _outside(box: tuple[float, ...], width: float, height: float) -> float:
    """How much of a label lies past the plotting area and the room plotly leaves around its points (there the
    chart would cut it)."""
    pad = PROJECTION_PAD_PX
    inside = _overlap(box, (-pad, -pad, width + pad, height + pad))
    return (box[2] - box[0]) * (box[3] - box[1]) - inside


def neuron_figure(tokens: Sequence[str], position: int, query: Tensor, keys: Tensor, weights: Tensor,
                  title: str = "") -> go.Figure:
    """How one head's weights for one query token are made (bertviz's neuron view): the query vector q beside each
    token's key vector k (left), their elementwise product q × k, whose sum over the dimensions (divided by the
    square root of their number) is the score (middle), and the softmax of the scores, the weights (right)."""
    rows = _labels(tokens)
    product = keys * query[None]  # (T, D)
    scores = product.sum(dim=1) / math.sqrt(product.shape[1])  # (T,)
    top = max(float(keys.abs().max()), float(query.abs().max()), 1e-6)
    vectors = [[round(v, 4) for v in query.tolist()]] + [[round(v, 4) for v in row] for row in keys.tolist()]
    names = [f"q: {rows[position]}"] + [f"k: {row}" for row in rows]
    traces = [dict(type="heatmap", z=vectors, y=list(range(len(names))), colorscale="RdBu_r", zmid=0, zmin=-top,
                   zmax=top, showscale=False, hovertemplate="%{text}<extra></extra>", xaxis="x", yaxis="y",
                   text=[[f"{name}, dimension {d}: {v:.3f}" for d, v in enumerate(row)]
                         for name, row in zip(names, vectors)]),
              dict(type="heatmap", z=[[None] * product.shape[1]] + [[round(v, 4) for v in row]
                                                                     for row in product.tolist()],
                   y=list(range(len(names))), colorscale="RdBu_r", zmid=0, showscale=False, xaxis="x2", yaxis="y",
                   hovertemplate="q × k, dimension %{x}: %{z:.3f}<extra></extra>"),
              dict(type="bar", orientation="h", x=[None] + [round(w, 4) for w in weights.tolist()],
                   y=list(range(len(names))), marker=dict(color="#1f77b4"), xaxis="x3", yaxis="y",
                   customdata=[None] + [round(v, 3) for v in scores.tolist()],
                   hovertemplate="score %{customdata}, weight %{x:.3f}<extra></extra>")]
    axis = dict(autorange="reversed", tickvals=list(range(len(names))), ticktext=names, automargin=True,
                tickfont=dict(size=_tick_font(len(names))))
    return _figure(traces, title, min(900, max(320, 22 * len(names) + 160)), showlegend=False,
                   xaxis=dict(domain=[0.0, 0.38], title=dict(text="query and keys, by dimension"), showgrid=False),
                   xaxis2=dict(domain=[0.42, 0.8], title=dict(text="q × k, by dimension"), showgrid=False),
                   xaxis3=dict(domain=[0.84, 1.0], title=dict(text="weight"), range=[0, 1]),
                   yaxis=axis)


def attention_thumbnails(weights: Tensor, size: int = 96) -> list[tuple[object, str]]:
    """Every layer's every head as a small picture of its map (bertviz's model view), `size` pixels a side, darker
    for more weight, each scaled to its own largest weight, with its name ("L2 H3"): weights[layer, head, q, k]."""
    from PIL import Image

    layers, heads = weights.shape[:2]
    pictures = []
    for layer in range(layers):
        for head in range(heads):
            w = weights[layer, head].float()
            array = _colours(w, max(float(w.max()), 1e-6), unsigned=True)  # white to Blues' darkest, #08306b
            picture = Image.fromarray(array, "RGB").resize((size, size), Image.NEAREST)
            pictures.append((picture, f"L{layer + 1} H{head + 1}"))
    return pictures


# ----------------------------------------------------------------------------------------------------------------
# the forward pass, step by step

MAX_HEATMAP_CELLS = 40_000  # values a step's heatmap carries (hovering names each); past this, a picture of them
MAX_ROW_LABELS = 40  # rows a picture names: past this, one row in every few (a row is a few pixels high)
SIGNED = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]  # blue below 0, white at 0, red above


MAX_BARS = 16  # values a row a step draws as bars (the heads' scores and guesses): more, a heatmap
MAX_BAR_ROWS = 4  # rows drawn as bars, a chart each


def step_figure(title: str, values: Tensor, rows: Sequence[str], columns: str | Sequence[str],
                cells: Sequence[Sequence[str]] | None = None, probabilities: bool = False) -> go.Figure:
    """A step's values[row, column]: a chart a row where there are few (a head's scores and guesses, `cells` naming
    each row's own columns), bars for `probabilities`, dots for scores; else a heatmap, blue below 0, red above,
    white at 0 (probabilities or a mask: white up to blue), a row a token, hovering a value naming its row and
    column; and past MAX_HEATMAP_CELLS values, a picture, a pixel a value, which a phone still reads as a pattern.
    `columns` names the columns, or says what they are ("dimension")."""
    values = values.detach().float().cpu()
    n_rows, n_cols = values.shape
    named = not isinstance(columns, str)
    if named and n_cols <= MAX_BARS and n_rows <= MAX_BAR_ROWS:
        labels = [list(row) for row in cells] if cells else [list(columns)] * n_rows
        return _bars(title, values, rows, labels, probabilities)
    unsigned = probabilities or bool((values >= 0).all())
    top = max(float(values.abs().max()), 1e-6)
    height = min(760, max(240, 16 * n_rows + 190))
    axis = dict(showgrid=False, zeroline=False, automargin=True)
    y_axis = dict(axis, type="category", autorange="reversed", tickfont=dict(size=_tick_font(n_rows)))
    x_axis = dict(axis, title=dict(text="" if named else columns, standoff=6),
                  **(dict(type="category", tickangle=-60, tickfont=dict(size=_tick_font(n_cols))) if named else {}))
    bar = dict(orientation="h", thickness=10, len=0.9, y=1.0, yanchor="bottom", ypad=4)  # above: the width is the map's
    layout = dict(plot_bgcolor="white", margin={**MARGIN, "t": 110})
    if n_rows * n_cols > MAX_HEATMAP_CELLS:
        every = math.ceil(n_rows / MAX_ROW_LABELS)  # a label every few rows where more would overlap
        y_axis = dict(axis, tickvals=list(range(0, n_rows, every)), ticktext=list(rows)[::every],
                      range=[n_rows - 0.5, -0.5], scaleanchor=False, tickfont=dict(size=_tick_font(n_rows)))
        return _figure([_picture(values, top, unsigned)], title, height,
                       xaxis=dict(x_axis, range=[-0.5, n_cols - 0.5]), yaxis=y_axis, **layout)
    x = _distinct(columns) if named else list(range(n_cols))
    column = "%{x}" if named else f"{columns} %{{x}}"
    decimals = max(4, 3 - math.floor(math.log10(top)))  # four significant digits of the largest, gradients too
    trace = dict(type="heatmap", z=values.round(decimals=decimals).numpy(), x=x, y=_distinct(rows),
                 zmin=0 if unsigned else -top, zmax=top, colorscale=COLORSCALE if unsigned else SIGNED,
                 ygap=1 if n_rows <= 48 else 0, colorbar=bar,
                 hovertemplate=f"%{{y}} · {column}: %{{z:.4g}}<extra></extra>")
    if cells is not None:
        trace.update(text=[list(row) for row in cells], texttemplate="%{text}", textfont=dict(size=10),
                     hovertemplate="%{y} · %{x}: %{text}, %{z:.4g}<extra></extra>")
    return _figure([trace], title, height, xaxis=x_axis, yaxis=y_axis, **layout)


def _bars(title: str, values: Tensor, rows: Sequence[str], labels: list[list[str]], shares: bool) -> go.Figure:
    """values[row, column] a chart a row (titled with the row), each value named by its label: bars from 0 for
    shares (probabilities), dots for scores (logits: a bar from 0 would draw the largest, nearest 0, shortest)."""
    n_rows, n_cols = values.shape
    layout = _panels(n_rows, 1, h_gap=0.0, v_gap=0.12 / max(n_rows - 1, 1), titles=list(rows),
                     x=dict(zeroline=shares, zerolinecolor="#999", showgrid=True, gridcolor="#eee",
                            **({} if shares else dict(title=dict(text="score (higher: more likely)", standoff=4)))),
                     y=dict(type="category", autorange="reversed", automargin=True, tickfont=dict(size=11)))
    look = (dict(type="bar", orientation="h", marker=dict(color=COLORS["mlm"]), textposition="auto") if shares
            else dict(type="scatter", mode="markers+text", marker=dict(color=COLORS["mlm"], size=9),
                      textposition="middle right", cliponaxis=False))
    traces = [dict(look, x=values[r].tolist(), y=_distinct(labels[r]), **_on(r),
                   text=[f"{v:.3g}" for v in values[r].tolist()], hovertemplate="%{y}: %{x:.4g}<extra></extra>")
              for r in range(n_rows)]
    return _figure(traces, title, n_rows * (24 * n_cols + 60) + 90, showlegend=False, plot_bgcolor="white",
                   **layout)


def _picture(values: Tensor, top: float, unsigned: bool) -> dict:
    """An image trace of values[row, column], a pixel a value, on the heatmaps' colours."""
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(_colours(values, top, unsigned), "RGB").save(buffer, format="PNG")
    source = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    return dict(type="image", source=source, x0=0, y0=0, dx=1, dy=1, hoverinfo="skip")


def _colours(values: Tensor, top: float, unsigned: bool) -> object:
    """values[row, column] as RGB pixels (a uint8 array) on the heatmaps' colours, `top` the strongest colour: white
    up to blue for unsigned values, blue below 0, white at 0 and red above for signed ones."""
    import torch

    scaled = (values.float() / top).clamp(-1, 1)
    if unsigned:
        rgb = [255 - scaled * (255 - c) for c in (8, 48, 107)]
    else:
        blue, red, white = (33, 102, 172), (178, 24, 43), 247
        rgb = [torch.where(scaled < 0, white + (-scaled) * (b - white), white + scaled * (r - white))
               for b, r in zip(blue, red)]
    return torch.stack(rgb, dim=-1).round().clamp(0, 255).to(torch.uint8).numpy()


THUMBNAIL_QUANTILE = 0.99  # the size that takes the strongest colour in a grid of a step's pictures


def step_thumbnails(items: Sequence[tuple[Tensor, str]], size: int = 96) -> list[tuple[object, str]]:
    """One step's values in every layer (and head) as small pictures with their captions (`depth.every_layer`),
    all on one colour scale, so that a layer's or a head's larger values show darker: signed values blue and red,
    values never below 0 white to blue. The scale tops at the 99th percentile of all their sizes: a few outliers
    would leave every other picture white."""
    import torch
    from PIL import Image

    if not items:
        return []
    sizes = torch.cat([values.abs().flatten() for values, _ in items]).float()
    sizes = sizes[:: max(1, len(sizes) // 1_000_000)]  # torch.quantile takes at most 16 M values: a sample
    top = max(float(torch.quantile(sizes, THUMBNAIL_QUANTILE)), 1e-12)
    unsigned = all(bool((values >= 0).all()) for values, _ in items)
    return [(Image.fromarray(_colours(values, top, unsigned), "RGB").resize((size, size), Image.NEAREST), caption)
            for values, caption in items]


def step_grid_figure(items: Sequence[tuple[Tensor, str]], columns: int, size: int = 96) -> go.Figure:
    """`step_thumbnails` as one figure, `columns` pictures a row, each titled with its caption: sent in the answer
    itself (a PNG each inside the figure), so that nothing is written to the server's disk for it (a gallery wrote
    32 files a call into gradio's cache)."""
    import base64
    import io

    pictures = step_thumbnails(items, size)
    if not pictures:
        return empty_figure("", height=60)
    rows = math.ceil(len(pictures) / columns)
    hidden = dict(visible=False, showgrid=False, zeroline=False)
    layout = _panels(len(pictures), columns, h_gap=0.02, v_gap=0.25 / rows, titles=[c for _, c in pictures],
                     x=hidden, y=dict(hidden, autorange="reversed"), title_font=dict(size=10))
    traces = []
    for i, (picture, caption) in enumerate(pictures):
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        traces.append(dict(type="image", source="data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(),
                           name=caption, hoverinfo="name", **_on(i)))
    return _figure(traces, "", rows * (size + 26) + 20, margin=dict(l=4, r=4, t=24, b=4), **layout)
