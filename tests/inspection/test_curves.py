"""Plotly figures from a run's records: the right traces, small JSON, axes that never exaggerate."""
from __future__ import annotations

import pytest

from bert_demo.inspection import curves


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
    fig = curves.loss_figure(records())
    names = [t.name for t in fig.data]
    assert names == ["MLM train", "MLM validation", "NSP train", "NSP validation"]
    assert list(fig.data[0].x) == list(range(1, 41)) and list(fig.data[1].x) == [10, 20, 30, 40]
    assert fig.data[0].y[0] == pytest.approx(7.9) and fig.data[1].line.dash == "dash"
    assert fig.layout.template.layout.to_plotly_json() == {}  # template "none"


def test_accuracy_and_learning_rate_figures():
    loss, accuracy, lr = curves.training_figures(records())
    assert [t.name for t in accuracy.data] == ["MLM train", "MLM validation", "NSP train", "NSP validation", "chance"]
    assert [t.xaxis for t in accuracy.data] == ["x", "x", "x2", "x2", "x2"]  # MLM left, NSP right: scales differ
    assert list(accuracy.data[-1].y) == [0.5, 0.5] and list(accuracy.data[-1].x) == [1, 40]
    assert [a.text for a in accuracy.layout.annotations] == ["masked LM", "next sentence"]
    assert list(lr.data[0].y[:4]) == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])


def test_figures_grow_with_the_records_and_stay_small():
    short, long = curves.loss_figure(records(10)), curves.loss_figure(records(500, 50))
    assert len(short.data[0].x) == 10 and len(long.data[0].x) == 500
    assert len(long.to_json()) < 40_000


def test_no_records_and_non_finite_values_give_empty_traces():
    fig = curves.loss_figure([{"kind": "train", "step": 1, "mlm_loss": float("nan"), "nsp_loss": float("inf")}])
    assert all(len(t.x) == 0 for t in fig.data)
    assert len(curves.loss_figure([]).data) == 4
    assert curves.empty_figure("nothing yet").layout.annotations[0].text == "nothing yet"


def test_a_resumed_runs_clock_carries_on_where_its_last_session_stopped():
    records = [{"kind": "val", "step": s, "tokens": s, "mlm_acc": 0.1, "elapsed": e}
               for s, e in [(1, 60.0), (2, 120.0), (3, 30.0), (4, 90.0)]]  # resumed after step 2
    fig = curves.compare_figure({"run": records}, x="time")
    assert list(fig.data[0].x) == [1.0, 2.0, 2.5, 3.5]


def test_the_loss_axis_fits_the_curve_and_accuracy_starts_at_zero():
    loss, accuracy, _ = curves.training_figures(records())
    assert loss.layout.yaxis.rangemode == "normal" and accuracy.layout.yaxis.rangemode == "tozero"


def test_before_the_first_step_the_training_charts_are_blank_with_a_note():
    for fig in curves.training_figures([{"kind": "status", "message": "loading corpus"}]):
        assert not fig.data and fig.layout.annotations and fig.layout.xaxis.visible is False


def test_a_fine_tuning_run_is_compared_by_its_classification_accuracy_and_loss():
    tuned = [{"kind": "train", "step": s, "tokens": 50 * s, "loss": 0.7 - s / 100, "acc": 0.5 + s / 100,
              "elapsed": s * 0.1} for s in range(1, 11)] + [{"kind": "val", "step": 10, "tokens": 500, "acc": 0.61,
                                                             "loss": 0.66, "elapsed": 1.0}]
    fig = curves.compare_figure({"pre-trained": records(), "fine-tuned": tuned})
    drawn = {(t.name, t.xaxis): list(t.y) for t in fig.data}
    assert drawn[("fine-tuned", "x")] == [0.61] and drawn[("fine-tuned", "x2")][0] == pytest.approx(0.69)
    assert drawn[("pre-trained", "x")] == [0.05] * 4  # a pre-training run keeps its masked-LM curves


def test_the_fine_tuning_chart_draws_each_starts_validation_accuracy_and_names_the_line_to_beat():
    runs = {"pretrained": [{"kind": "train", "step": 5, "acc": 0.2}, {"kind": "val", "step": 5, "acc": 0.6}],
            "random": [{"kind": "val", "step": 5, "acc": 0.5}]}
    fig = curves.finetune_figure(runs, chance=0.52)
    assert [t.name for t in fig.data] == ["pre-trained (validation)", "random weights (validation)",
                                          "always the commonest class: 0.52"]  # no swinging batch accuracies
    assert list(fig.data[-1].y) == [0.52, 0.52] and not fig.layout.annotations  # in the legend, not on a curve
    assert fig.layout.yaxis.range[0] == pytest.approx(0.35)  # low enough for the lowest point


def test_a_flat_noisy_loss_is_drawn_on_an_axis_at_least_one_nat_wide():
    flat = [{"kind": "train", "step": s, "mlm_loss": 6.95 + 0.03 * (s % 2), "nsp_loss": 0.69} for s in range(1, 9)]
    fig = curves.loss_figure(flat)
    low, high = fig.layout.yaxis.range
    assert high - low >= curves.MIN_LOSS_SPAN and low <= 6.95 and high >= 6.98


def test_the_label_count_chart_averages_repeated_runs_of_one_count():
    fig = curves.label_count_figure([("pretrained", 100, 0.6), ("pretrained", 100, 0.7), ("random", 1000, 0.8)])
    lines = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert lines["pre-trained"][0] == [100] and lines["pre-trained"][1][0] == pytest.approx(0.65)
    assert lines["random weights"] == ([1000], [0.8])
    spread = fig.data[0].error_y  # the two runs' range around their mean
    assert list(spread.array) == pytest.approx([0.05]) and list(spread.arrayminus) == pytest.approx([0.05])
    assert fig.layout.yaxis.range == pytest.approx([0.48, 1.0])  # from the line to beat, not zoomed to the points
    f1 = curves.label_count_figure([("well-read", 100, 0.8)], "F1")  # a GLUE task's own metric names the chart
    assert f1.layout.title.text == "Test F1 by number of labels" and f1.layout.yaxis.title.text == "test F1"
    assert f1.data[0].name == "Google's BERT, same shape"


def test_next_sentence_prediction_held_out_under_each_random_b_is_a_curve_of_its_own():
    """A random B of any document can be told by its topic alone, one of A's own source only by whether it follows
    (ALBERT): each draw's held-out accuracy is a curve of its own, beside chance."""
    drawn = records()
    for record in drawn:
        if record["kind"] == "val":
            record.update(nsp_acc_any=0.6 + record["step"] / 1000, nsp_acc_same=0.52)
    accuracy = curves.accuracy_figure(drawn)
    names = [t.name for t in accuracy.data]
    assert "NSP validation" not in names and "NSP train" in names and "chance" in names
    any_b, same_b = (next(t for t in accuracy.data if t.name == curves.NSP_DRAWS[key][0])
                     for key in ("nsp_acc_any", "nsp_acc_same"))
    assert list(any_b.y) == pytest.approx([0.61, 0.62, 0.63, 0.64]) and list(same_b.y) == [0.52] * 4
    assert any_b.xaxis == same_b.xaxis == "x2"
