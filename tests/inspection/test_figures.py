"""Figures of what is inside a model: attention maps with readable labels and hovers, every head as a thumbnail, how
a head's weights are made (the neuron view), head importance, the projection."""
from __future__ import annotations

import base64
import io
import json

import pytest
import torch
from PIL import Image

from bert_demo.inspection import figures


def test_attention_heatmap_has_tokens_on_both_axes_a_scale_up_to_its_largest_weight_and_hover_text():
    tokens = ["[CLS]", "the", "cat", "the", "[SEP]"]  # a repeated token must stay two cells
    weights = torch.softmax(torch.randn(5, 5), dim=-1)
    fig = figures.attention_heatmap(tokens, weights, "Layer 1, head 1")
    heatmap = fig.data[0]
    assert (heatmap.zmin, heatmap.zmax) == (0, pytest.approx(float(weights.max()))) and len(heatmap.z) == 5
    assert list(fig.layout.xaxis.ticktext) == tokens and list(fig.layout.yaxis.ticktext) == tokens
    assert fig.layout.yaxis.autorange == "reversed"
    assert heatmap.text[1][2] == f"the → cat: {weights[1, 2]:.3f}"
    assert "%{text}" in heatmap.hovertemplate
    assert fig.layout.title.text == "Layer 1, head 1"
    json.loads(fig.to_json())


def test_attention_grid_has_one_heatmap_per_head_on_a_shared_scale():
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    weights = torch.softmax(torch.randn(12, 4, 4), dim=-1)
    fig = figures.attention_grid(tokens, weights, "All heads")
    assert len(fig.data) == 12 and all(t.coloraxis == "coloraxis" for t in fig.data)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, pytest.approx(float(weights.max())))
    assert [a.text for a in fig.layout.annotations][:2] == ["head 1", "head 2"]
    assert list(fig.data[5].x) == tokens and list(fig.data[5].y) == tokens  # hovering shows "query → key"
    assert "%{y} → %{x}: %{z:.3f}" in fig.data[5].hovertemplate and fig.data[5].text is None
    assert fig.data[5].z[0][1] == pytest.approx(float(weights[5, 0, 1]), abs=1e-4)
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis12.autorange == "reversed"


def test_the_grid_names_its_rows_once_a_row_of_maps_in_a_margin_that_fits_them_and_its_scale_above():
    """On a phone the second map's labels ran into the first map and "condemned" read "ndemned"."""
    fig = figures.attention_grid(["[CLS]", "condemned", "[SEP]"], torch.softmax(torch.rand(4, 3, 3), -1))
    labelled = [fig.layout[f"yaxis{suffix}"].showticklabels is not False for suffix in ("", "2", "3", "4")]
    assert labelled == [True, False, True, False]  # the left map of each row of two
    assert fig.layout.yaxis.automargin and fig.layout.xaxis3.automargin
    assert fig.layout.coloraxis.colorbar.orientation == "h"  # the maps, not the scale, have the width


def test_a_flat_map_gets_a_colour_scale_that_shows_its_structure():
    flat = torch.full((6, 6), 1 / 6) + torch.eye(6) * 0.02  # an average of heads: nearly uniform rows
    assert figures.attention_heatmap(list("abcdef"), flat).data[0].zmax == pytest.approx(1 / 6 + 0.02)


def test_sentence_a_attending_to_sentence_b_is_a_rectangle_with_both_sentences_labelled():
    weights = torch.rand(3, 5)
    fig = figures.attention_heatmap(["the", "cat", "sat"], weights, keys=["it", "was", "on", "a", "mat"])
    assert list(fig.layout.yaxis.ticktext) == ["the", "cat", "sat"] and len(fig.layout.xaxis.ticktext) == 5
    assert fig.data[0].text[2][4] == f"sat → mat: {weights[2, 4]:.3f}"
    grid = figures.attention_grid(["the", "cat", "sat"], torch.rand(4, 3, 5), keys=["it", "was", "on", "a", "mat"])
    assert len(grid.data) == 4 and len(grid.data[0].z[0]) == 5


def test_repeated_tokens_stay_separate_rows_of_the_grid():
    fig = figures.attention_grid(["the", "cat", "the", "the"], torch.softmax(torch.rand(2, 4, 4), -1))
    rows = list(fig.data[0].y)
    assert len(set(rows)) == 4 and [r.replace("\u200b", "") for r in rows] == ["the", "cat", "the", "the"]


def test_grid_labels_stay_at_a_readable_size_up_to_48_tokens():
    for n in (16, 32, 48):
        fig = figures.attention_grid([f"w{i}" for i in range(n)], torch.softmax(torch.rand(4, n, n), -1))
        assert fig.layout.xaxis.showticklabels and fig.layout.xaxis.tickfont.size >= 10
        assert fig.layout.height / 2 >= 13 * n  # two rows of heads, each map at least 13 px per token


def test_head_importance_figure_has_one_map_per_target_on_a_symmetric_scale():
    drops = torch.tensor([[[0.2, -0.1], [0.0, 0.05]], [[0.01, 0.0], [-0.3, 0.0]]])
    fig = figures.head_importance_figure(["[MASK] 1: cat", "[MASK] 2: mat"], drops)
    assert len(fig.data) == 2 and list(fig.data[0].y) == ["L1", "L2"] and list(fig.data[0].x) == ["H1", "H2"]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (pytest.approx(-0.3), pytest.approx(0.3))


def test_projection_figure_labels_every_word():
    fig = figures.projection_figure([("cat", 0.1, 0.2), ("dog", -0.1, 0.0), ("sun", 0.0, -0.2)])
    assert list(fig.data[0].text) == ["cat", "dog", "sun"] and list(fig.data[0].x) == [0.1, -0.1, 0.0]


def test_attention_plots_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        figures.attention_heatmap(["a", "b"], torch.rand(3, 3))
    with pytest.raises(ValueError, match="do not match"):
        figures.attention_grid(["a", "b"], torch.rand(2, 2))


def test_attention_plots_draw_up_to_the_token_cap_and_refuse_longer_input():
    n = figures.MAX_ATTENTION_TOKENS
    tokens = [f"w{i}" for i in range(n)]
    weights = torch.softmax(torch.rand(n, n), dim=-1)
    assert len(figures.attention_heatmap(tokens, weights).data[0].z) == n
    longer = tokens + ["one-too-many"]
    with pytest.raises(ValueError, match=f"at most {n} tokens and this input has {n + 1}"):
        figures.attention_heatmap(longer, torch.rand(n + 1, n + 1))
    with pytest.raises(ValueError, match=f"at most {n} tokens"):
        figures.attention_grid(longer, torch.rand(4, n + 1, n + 1))


def test_the_neuron_view_draws_the_query_the_keys_their_product_and_the_weights():
    tokens = ["[CLS]", "the", "cat", "[SEP]"]
    query, keys = torch.tensor([1.0, -2.0]), torch.tensor([[0.5, 0.0], [1.0, 1.0], [0.0, -1.0], [2.0, 2.0]])
    weights = (keys @ query / 2 ** 0.5).softmax(-1)
    fig = figures.neuron_figure(tokens, 2, query, keys, weights)
    vectors, product, bars = fig.data
    assert list(vectors.z[0]) == [1.0, -2.0] and [list(row) for row in vectors.z[1:]] == keys.tolist()
    assert [list(row) for row in product.z[1:]] == (keys * query).tolist()  # what the score sums
    assert list(bars.x[1:]) == pytest.approx(weights.tolist(), abs=1e-4) and bars.x[0] is None
    assert list(fig.layout.yaxis.ticktext) == ["q: cat", "k: [CLS]", "k: the", "k: cat", "k: [SEP]"]


def test_the_model_view_has_a_named_thumbnail_for_every_head_darkest_where_it_looks_most():
    weights = torch.zeros(2, 3, 4, 4)
    weights[1, 2, 0, 3] = 1.0  # layer 2, head 3: the first token looks at the last
    pictures = figures.attention_thumbnails(weights, size=8)
    assert [name for _, name in pictures] == ["L1 H1", "L1 H2", "L1 H3", "L2 H1", "L2 H2", "L2 H3"]
    picture = pictures[-1][0]
    assert picture.size == (8, 8) and picture.getpixel((7, 0)) == (8, 48, 107) and picture.getpixel((0, 7)) == (
        255, 255, 255)


def test_two_words_at_one_place_in_the_projection_get_labels_on_different_sides():
    spots = figures.label_spots([("king", 0.40, -0.05), ("england", 0.40, -0.05), ("paris", -0.8, 0.7),
                              ("man", -0.2, 0.3)])
    assert spots[0] != spots[1] and spots[3] == figures.LABEL_SPOTS[0]  # a word alone keeps the usual place


def test_a_step_past_the_heatmaps_cells_is_drawn_as_a_picture_a_pixel_a_value_in_the_signed_colours():
    """A step too large for a heatmap (a long input to the shipped model: 500 tokens x 512) is a picture instead."""
    values = torch.linspace(-1, 1, 300 * 200).reshape(300, 200)  # 60,000 values: past MAX_HEATMAP_CELLS
    figure = figures.step_figure("", values, [f"{i} w" for i in range(300)], "dimension")
    (picture,) = figure.data
    assert picture.type == "image" and picture.source.startswith("data:image/png;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(picture.source.split(",", 1)[1])))
    assert image.size == (200, 300)
    first, last = image.getpixel((0, 0)), image.getpixel((199, 299))
    assert first[2] > first[0] and last[0] > last[2]  # -1 blue, +1 red
    axis = figure.layout.yaxis  # a label every 8 rows (at most 40 labels): each names the row it sits at
    assert len(axis.ticktext) <= figures.MAX_ROW_LABELS and axis.tickvals[:3] == (0, 8, 16)
    assert all(text == f"{row} w" for row, text in zip(axis.tickvals, axis.ticktext))


def test_a_grid_of_a_steps_pictures_shares_one_scale_and_keeps_its_captions():
    quiet, loud = torch.full((4, 4), 0.01), torch.full((4, 4), 1.0)
    (small, first), (large, second) = figures.step_thumbnails([(quiet, "L1 H1"), (loud, "L2 H1")], size=8)
    assert (first, second) == ("L1 H1", "L2 H1") and small.size == (8, 8)
    assert sum(small.getpixel((0, 0))) > sum(large.getpixel((0, 0)))  # the quiet one is paler on the shared scale


def test_the_grid_of_a_steps_pictures_is_one_figure_a_picture_a_panel_in_its_captions_order():
    """Every layer's (and head's) picture inside one figure, `columns` a row: nothing for the server to write to
    disk (a gallery wrote 32 files a call into gradio's cache)."""
    items = [(torch.full((3, 5), float(i)), f"L{i // 4 + 1} H{i % 4 + 1}") for i in range(12)]
    figure = figures.step_grid_figure(items, columns=4)
    assert [trace.type for trace in figure.data] == ["image"] * 12
    assert [trace.name for trace in figure.data] == [caption for _, caption in items]
    assert [a.text for a in figure.layout.annotations] == [caption for _, caption in items]
    assert all(trace.source.startswith("data:image/png;base64,") for trace in figure.data)
    rows = {round(figure.layout[f"yaxis{'' if i == 0 else i + 1}"].domain[1], 6) for i in range(12)}
    columns = {round(figure.layout[f"xaxis{'' if i == 0 else i + 1}"].domain[0], 6) for i in range(12)}
    assert len(rows) == 3 and len(columns) == 4  # three layers of four heads, a layer a row
    assert figures.step_grid_figure([], columns=4).data == ()
