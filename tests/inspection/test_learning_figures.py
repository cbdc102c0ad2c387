"""bert_demo/inspection/learning_figures.py: what each chart of the training step's section says by its axes, read
from the figure's own data and layout: which numbers sit on which axis, in which direction, under which title."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from bert_demo.inspection import learning_figures


def test_across_training_draws_the_loss_and_each_labels_rank_against_the_step_rank_1_on_top():
    moments = [SimpleNamespace(step=0, loss=6.5, ranks=[40, 3]), SimpleNamespace(step=10, loss=4.25, ranks=[2, 1]),
               SimpleNamespace(step=300, loss=1.125, ranks=[1, 1])]
    figure = learning_figures.across_figure(moments, ["cat", "mat"])
    loss, *ranks = figure.data
    assert list(loss.x) == [1, 10, 300] and list(loss.y) == [6.5, 4.25, 1.125]  # step 0 drawn at 1 on a log axis
    assert list(loss.customdata) == [0, 10, 300] and (loss.xaxis, loss.yaxis) in (("x", "y"), (None, None))
    assert [trace.name for trace in ranks] == ["cat", "mat"]
    assert [list(trace.y) for trace in ranks] == [[40, 2, 1], [3, 1, 1]]
    assert all(list(trace.x) == [1, 10, 300] and (trace.xaxis, trace.yaxis) == ("x2", "y2") for trace in ranks)
    layout = figure.layout
    assert layout.xaxis.type == layout.xaxis2.type == "log" and layout.yaxis2.type == "log"
    assert layout.yaxis2.autorange == "reversed"  # rank 1, the top guess, at the top
    assert layout.yaxis.title.text == "the example's loss" and layout.yaxis2.title.text == "each label's rank (1: top)"
    assert layout.xaxis.title.text == layout.xaxis2.title.text == "training step (0 drawn at 1)"


def test_the_heads_chart_reads_layer_1_at_the_top_a_cell_a_head_with_its_size_written_in():
    sizes = torch.tensor([[0.5, 0.25, 0.125], [2.0, 4.0, 8.0]])  # 2 layers of 3 heads: an axis swap shows
    figure = learning_figures.head_flow_figure(sizes)
    (cells,) = figure.data
    assert list(cells.y) == ["layer 1", "layer 2"] and list(cells.x) == ["1", "2", "3"]
    assert [list(row) for row in cells.z] == sizes.tolist() and cells.text[1][2] == "8"
    assert figure.layout.yaxis.autorange == "reversed" and figure.layout.xaxis.title.text == "head"


def test_the_parts_chart_puts_each_parts_size_on_a_log_axis_in_the_forward_passs_order_ticked_in_powers_of_ten():
    rows = [("embeddings", "word embeddings", 0.03), ("layer 1", "attention", 2.5), ("masked-LM head", "decoder", 40.0)]
    figure = learning_figures.gradient_norms_figure(rows)
    (bars,) = figure.data
    assert list(bars.x) == [0.03, 2.5, 40.0] and list(bars.y) == [f"{g} · {p}" for g, p, _ in rows]
    axis = figure.layout.xaxis
    assert axis.type == "log" and axis.title.text == "gradient size (L2)"
    assert list(axis.tickvals) == [10.0 ** p for p in range(-2, 3)] and list(axis.ticktext) == [
        "0.01", "0.1", "1", "10", "100"]
    assert figure.layout.yaxis.autorange == "reversed"  # the embeddings first, at the top


def test_the_losses_chart_puts_the_loss_after_each_step_taken_with_the_loss_before_at_0():
    figure = learning_figures.losses_figure([4.5, 2.25, 1.0])
    (line,) = figure.data
    assert list(line.x) == [0, 1, 2] and list(line.y) == [4.5, 2.25, 1.0]
    assert figure.layout.xaxis.title.text == "steps taken on this example"
    assert figure.layout.yaxis.title.text == "its loss"
