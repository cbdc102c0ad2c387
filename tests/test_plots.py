"""Plotly figures from trainer records and attention tensors: the right traces, small JSON, readable hovers."""
from __future__ import annotations

import json

import pytest
import torch

from bert_demo import plots


def records(steps: int = 40, eval_every: int = 10) -> list[dict]:
    out = [{"kind": "status", "message": "loading"}]
    for step in range(1, steps + 1):
        out.append({"kind": "train", "step": step, "tokens": 100 * step, "mlm_loss": 8 - step / 10,
                    "nsp_loss": 0.7, "mlm_acc": step / 100, "nsp_acc": 0.5, "tokens_per_s": 1000.0,
                    "lr": 1e-3 * min(1, step / 4), "elapsed": step * 0.1})
        if step % eval_every == 0:
            out.append({"kind": "val", "step": step, "tokens": 100 * step, "mlm_loss": 8.1 - step / 10,
                        "mlm_acc": 0.05, "mlm_ppl": 3000.0, "nsp_loss": 0.69, "nsp_acc": 0.52, "elapsed": step / 10})
            out.append({"kind": "probe", "step": step, "text": "a [MASK].", "predictions": [("the", 0.1)]})
    return out


def test_loss_figure_has_train_and_validation_for_both_tasks():
    fig = plots.loss_figure(records())
    names = [t.name for t in fig.data]
    assert names == ["MLM train", "MLM validation", "NSP train", "NSP validation"]
    assert list(fig.data[0].x) == list(range(1, 41)) and list(fig.data[1].x) == [10, 20, 30, 40]
    assert fig.data[0].y[0] == pytest.approx(7.9) and fig.data[1].line.dash == "dash"
    assert fig.layout.template.layout.to_plotly_json() == {}  # template "none"


def test_accuracy_and_learning_rate_figures():
    loss, accuracy, lr = plots.training_figures(records())
    assert [t.name for t in accuracy.data][::2] == ["MLM train", "NSP train"]
    assert [t.xaxis for t in accuracy.data] == ["x", "x", "x2", "x2"]  # MLM left, NSP right: scales differ
    assert [a.text for a in accuracy.layout.annotations] == ["masked LM", "next sentence"]
    assert list(lr.data[0].y[:4]) == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])


def test_figures_grow_with_the_records_and_stay_small():
    short, long = plots.loss_figure(records(10)), plots.loss_figure(records(500, 50))
    assert len(short.data[0].x) == 10 and len(long.data[0].x) == 500
    assert len(long.to_json()) < 40_000


def test_no_records_and_non_finite_values_give_empty_traces():
    fig = plots.loss_figure([{"kind": "train", "step": 1, "mlm_loss": float("nan"), "nsp_loss": float("inf")}])
    assert all(len(t.x) == 0 for t in fig.data)
    assert len(plots.loss_figure([]).data) == 4
    assert plots.empty_figure("nothing yet").layout.annotations[0].text == "nothing yet"


def test_attention_heatmap_has_tokens_on_both_axes_a_scale_up_to_its_largest_weight_and_hover_text():
    tokens = ["[CLS]", "the", "cat", "the", "[SEP]"]  # a repeated token must stay two cells
    weights = torch.softmax(torch.randn(5, 5), dim=-1)
    fig = plots.attention_heatmap(tokens, weights, "Layer 1, head 1")
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
    fig = plots.attention_grid(tokens, weights, "All heads")
    assert len(fig.data) == 12 and all(t.coloraxis == "coloraxis" for t in fig.data)
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0, pytest.approx(float(weights.max())))
    assert [a.text for a in fig.layout.annotations][:2] == ["head 1", "head 2"]
    assert list(fig.data[5].x) == tokens and list(fig.data[5].y) == tokens  # hovering shows "query → key"
    assert "%{y} → %{x}: %{z:.3f}" in fig.data[5].hovertemplate and fig.data[5].text is None
    assert fig.data[5].z[0][1] == pytest.approx(float(weights[5, 0, 1]), abs=1e-4)
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis12.autorange == "reversed"


def test_a_flat_map_gets_a_colour_scale_that_shows_its_structure():
    flat = torch.full((6, 6), 1 / 6) + torch.eye(6) * 0.02  # an average of heads: nearly uniform rows
    assert plots.attention_heatmap(list("abcdef"), flat).data[0].zmax == pytest.approx(1 / 6 + 0.02)


def test_sentence_a_attending_to_sentence_b_is_a_rectangle_with_both_sentences_labelled():
    weights = torch.rand(3, 5)
    fig = plots.attention_heatmap(["the", "cat", "sat"], weights, keys=["it", "was", "on", "a", "mat"])
    assert list(fig.layout.yaxis.ticktext) == ["the", "cat", "sat"] and len(fig.layout.xaxis.ticktext) == 5
    assert fig.data[0].text[2][4] == f"sat → mat: {weights[2, 4]:.3f}"
    grid = plots.attention_grid(["the", "cat", "sat"], torch.rand(4, 3, 5), keys=["it", "was", "on", "a", "mat"])
    assert len(grid.data) == 4 and len(grid.data[0].z[0]) == 5


def test_repeated_tokens_stay_separate_rows_of_the_grid():
    fig = plots.attention_grid(["the", "cat", "the", "the"], torch.softmax(torch.rand(2, 4, 4), -1))
    rows = list(fig.data[0].y)
    assert len(set(rows)) == 4 and [r.replace("\u200b", "") for r in rows] == ["the", "cat", "the", "the"]


def test_grid_labels_stay_at_a_readable_size_up_to_48_tokens():
    for n in (16, 32, 48):
        fig = plots.attention_grid([f"w{i}" for i in range(n)], torch.softmax(torch.rand(4, n, n), -1))
        assert fig.layout.xaxis.showticklabels and fig.layout.xaxis.tickfont.size >= 10
        assert fig.layout.height / 2 >= 13 * n  # two rows of heads, each map at least 13 px per token


def test_head_importance_figure_has_one_map_per_target_on_a_symmetric_scale():
    drops = torch.tensor([[[0.2, -0.1], [0.0, 0.05]], [[0.01, 0.0], [-0.3, 0.0]]])
    fig = plots.head_importance_figure(["[MASK] 1: cat", "[MASK] 2: mat"], drops)
    assert len(fig.data) == 2 and list(fig.data[0].y) == ["L1", "L2"] and list(fig.data[0].x) == ["H1", "H2"]
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (pytest.approx(-0.3), pytest.approx(0.3))


def test_projection_figure_labels_every_word():
    fig = plots.projection_figure([("cat", 0.1, 0.2), ("dog", -0.1, 0.0), ("sun", 0.0, -0.2)])
    assert list(fig.data[0].text) == ["cat", "dog", "sun"] and list(fig.data[0].x) == [0.1, -0.1, 0.0]


def test_a_resumed_runs_clock_carries_on_where_its_last_session_stopped():
    records = [{"kind": "val", "step": s, "tokens": s, "mlm_acc": 0.1, "elapsed": e}
               for s, e in [(1, 60.0), (2, 120.0), (3, 30.0), (4, 90.0)]]  # resumed after step 2
    fig = plots.compare_figure({"run": records}, x="time")
    assert list(fig.data[0].x) == [1.0, 2.0, 2.5, 3.5]


def test_attention_plots_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="do not match"):
        plots.attention_heatmap(["a", "b"], torch.rand(3, 3))
    with pytest.raises(ValueError, match="do not match"):
        plots.attention_grid(["a", "b"], torch.rand(2, 2))


def test_attention_plots_draw_up_to_the_token_cap_and_refuse_longer_input():
    n = plots.MAX_ATTENTION_TOKENS
    tokens = [f"w{i}" for i in range(n)]
    weights = torch.softmax(torch.rand(n, n), dim=-1)
    assert len(plots.attention_heatmap(tokens, weights).data[0].z) == n
    longer = tokens + ["one-too-many"]
    with pytest.raises(ValueError, match=f"at most {n} tokens and this input has {n + 1}"):
        plots.attention_heatmap(longer, torch.rand(n + 1, n + 1))
    with pytest.raises(ValueError, match=f"at most {n} tokens"):
        plots.attention_grid(longer, torch.rand(4, n + 1, n + 1))


def test_the_loss_axis_fits_the_curve_and_accuracy_starts_at_zero():
    loss, accuracy, _ = plots.training_figures(records())
    assert loss.layout.yaxis.rangemode == "normal" and accuracy.layout.yaxis.rangemode == "tozero"


def test_before_the_first_step_the_training_charts_are_blank_with_a_note():
    for fig in plots.training_figures([{"kind": "status", "message": "loading corpus"}]):
        assert not fig.data and fig.layout.annotations and fig.layout.xaxis.visible is False


def test_a_fine_tuning_run_is_compared_by_its_classification_accuracy_and_loss():
    tuned = [{"kind": "train", "step": s, "tokens": 50 * s, "loss": 0.7 - s / 100, "acc": 0.5 + s / 100,
              "elapsed": s * 0.1} for s in range(1, 11)] + [{"kind": "val", "step": 10, "tokens": 500, "acc": 0.61,
                                                             "loss": 0.66, "elapsed": 1.0}]
    fig = plots.compare_figure({"pre-trained": records(), "fine-tuned": tuned})
    drawn = {(t.name, t.xaxis): list(t.y) for t in fig.data}
    assert drawn[("fine-tuned", "x")] == [0.61] and drawn[("fine-tuned", "x2")][0] == pytest.approx(0.69)
    assert drawn[("pre-trained", "x")] == [0.05] * 4  # a pre-training run keeps its masked-LM curves


def test_the_fine_tuning_chart_draws_each_starts_validation_accuracy_and_names_the_line_to_beat():
    runs = {"pretrained": [{"kind": "train", "step": 5, "acc": 0.2}, {"kind": "val", "step": 5, "acc": 0.6}],
            "random": [{"kind": "val", "step": 5, "acc": 0.5}]}
    fig = plots.finetune_figure(runs, chance=0.52)
    assert [t.name for t in fig.data] == ["pre-trained (validation)", "random weights (validation)",
                                          "always the commonest class: 0.52"]  # no swinging batch accuracies
    assert list(fig.data[-1].y) == [0.52, 0.52] and not fig.layout.annotations  # in the legend, not on a curve
    assert fig.layout.yaxis.range[0] == pytest.approx(0.35)  # low enough for the lowest point


def test_a_flat_noisy_loss_is_drawn_on_an_axis_at_least_one_nat_wide():
    flat = [{"kind": "train", "step": s, "mlm_loss": 6.95 + 0.03 * (s % 2), "nsp_loss": 0.69} for s in range(1, 9)]
    fig = plots.loss_figure(flat)
    low, high = fig.layout.yaxis.range
    assert high - low >= plots.MIN_LOSS_SPAN and low <= 6.95 and high >= 6.98


def test_the_label_count_chart_averages_repeated_runs_of_one_count():
    fig = plots.label_count_figure([("pretrained", 100, 0.6), ("pretrained", 100, 0.7), ("random", 1000, 0.8)])
    lines = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert lines["pre-trained"][0] == [100] and lines["pre-trained"][1][0] == pytest.approx(0.65)
    assert lines["random weights"] == ([1000], [0.8])
    spread = fig.data[0].error_y  # the two runs' range around their mean
    assert list(spread.array) == pytest.approx([0.05]) and list(spread.arrayminus) == pytest.approx([0.05])
    assert fig.layout.yaxis.range == pytest.approx([0.48, 1.0])  # from the line to beat, not zoomed to the points
    f1 = plots.label_count_figure([("well-read", 100, 0.8)], "F1")  # a GLUE task's own metric names the chart
    assert f1.layout.title.text == "Test F1 by number of labels" and f1.layout.yaxis.title.text == "test F1"
    assert f1.data[0].name == "Google's BERT-Mini"
