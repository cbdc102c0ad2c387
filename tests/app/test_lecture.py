"""The Step by step tab's fourth section, called as the page calls it, on the example section 1 draws with the same
inputs: each table's cells and each figure's data are read back and checked against the backend's numbers and
against sums and formulas recomputed here; the shared model untouched; bad input refused with a message; each view
in the line of training steps (or the slow line), one at a time."""
from __future__ import annotations

import math
import re

import gradio as gr
import pytest
import torch

from bert_demo.app.guards.admission import SHARES, SLOW, TRAINING_KINDS, kind_of
from bert_demo.app.queries import At
from bert_demo.app.tabs import drawn, lecture
from bert_demo.inspection import batch_step, by_hand, over_time
from bert_demo.inspection.across_training import depth_across
from bert_demo.inspection.pretraining_example import held_out_sample
from bert_demo.training.recipe import make_optimizer
from tests.rendered import after, axis_title, number, table_after, tables, traces

MODEL = "checkpoints/tiny-test"
PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))
EXAMPLE = {"source": drawn.YOUR_TEXT, "typed": PARAGRAPHS, "recipe": "model", "seed": 4}


def _shown(registry):
    return drawn.drawn(registry, At(MODEL), drawn.Draw(**EXAMPLE))


def test_the_batch_view_shows_each_examples_numbers_in_its_own_columns_and_the_parts_adding_up(registry):
    model = registry.catalog.load(MODEL).model
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    shown = lecture.batch_step(registry, MODEL, **EXAMPLE, size=3)["lc_batch"]
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    same = _shown(registry)
    batch = batch_step.draw_batch(same.documents, same.loaded.tokenizer, same.config, 4, 3)
    step = batch_step.step_on_batch(same.loaded.model, batch, same.config)
    rows = tables(shown)[0]
    assert len(rows) == 3
    for row, example in zip(rows, step.examples):
        assert number(row["loss before"]) == pytest.approx(example.loss_before, abs=5e-5)
        assert number(row["after the batch's step"]) == pytest.approx(example.loss_after_batch, abs=5e-5)
        assert number(row["after a step on ex. 1 alone"]) == pytest.approx(example.loss_after_alone, abs=5e-5)
        assert number(row["picked"]) == example.targets
        assert number(row["share of the MLM loss"]) == pytest.approx(example.targets / sum(
            e.targets for e in step.examples), abs=5e-4)
    first = rows[0]
    lowered = [number(first["loss before"]) - number(first[column])
               for column in ("after the batch's step", "after a step on ex. 1 alone")]
    assert after(shown, "lowered example 1's loss by") == pytest.approx(lowered[0], abs=2e-4)
    assert after(shown, "its own step by") == pytest.approx(lowered[1], abs=2e-4)
    weights = table_after(shown, "| weight |")
    for row in weights:
        parts = [number(row[f"ex. {i}"]) for i in (1, 2, 3)]
        assert number(row["sum of the parts"]) == pytest.approx(sum(parts), rel=1e-3, abs=1e-9)
        assert number(row["the batch's gradient (autograd)"]) == pytest.approx(sum(parts), rel=1e-3, abs=1e-9)
    assert "micro-batches" in shown and "dropout 0.1" in shown


def test_the_by_hand_view_lists_the_terms_whose_sum_is_autograds_and_the_largest_first(registry):
    shown = lecture.by_hand(registry, MODEL, **EXAMPLE, part="feed-forward 1", layer=2, head=3)["lc_hand"]
    same = _shown(registry)
    work = by_hand.work(same.loaded.model, same.example.batch, same.config, "feed-forward 1", 2, 3)
    linear = tables(shown)[0]
    i, j = work.linear.index
    terms = [row for row in linear if not row["row"].startswith(("the other", "the sum", "autograd"))]
    products = [number(row["their product"]) for row in terms]
    assert products == sorted(products, key=abs, reverse=True)
    for row in terms:
        x, delta = number(row[f"x[t, {j}] (its input)"]), number(row[f"δ[t, {i}] (the gradient at its output)"])
        assert number(row["their product"]) == pytest.approx(x * delta, rel=2e-3, abs=1e-12)
    rest = [number(row["their product"]) for row in linear if row["row"].startswith("the other")]
    total = next(number(row["their product"]) for row in linear if row["row"].startswith("the sum"))
    assert total == pytest.approx(sum(products) + sum(rest), rel=5e-3, abs=1e-9)
    said = next(number(row["their product"]) for row in linear if row["row"].startswith("autograd"))
    assert said == pytest.approx(work.linear.autograd, rel=1e-5)
    softmax = tables(shown)[1]
    for row in softmax:
        p, dp = number(row["p"]), number(row["∂loss/∂p"])
        centred = number(row["∂loss/∂p − p·∂loss/∂p"])
        assert centred == pytest.approx(dp - work.softmax.p_dot_dp, rel=2e-3, abs=1e-9)
        assert number(row["∂loss/∂s by hand"]) == pytest.approx(p * centred, rel=2e-2, abs=1e-9)
    norm = tables(shown)[2]
    assert [int(row["unit"]) for row in norm] == sorted(int(row["unit"]) for row in norm)
    assert after(shown, "The gradient leaves this row") == pytest.approx(work.layer_norm.gain, abs=0.01)


def test_the_adam_view_draws_each_weights_moves_from_the_run_and_the_rate_over_the_peak(registry):
    shown = lecture.adam_over_time(registry, MODEL, **EXAMPLE, steps=4, batch_size=2)
    same = _shown(registry)
    run = over_time.run(same.loaded.model, same.documents, same.loaded.tokenizer, same.config, 4, 4, 2)
    figure = shown["lc_adam_plot"]
    drawn_traces = traces(figure)
    assert len(drawn_traces) == 4 * len(run.traces)
    for k, trace in enumerate(run.traces):
        adam, sgd, momentum, rates = drawn_traces[4 * k:4 * k + 4]
        assert (adam["name"], sgd["name"], momentum["name"]) == ("AdamW", "SGD", f"SGD, momentum {over_time.MOMENTUM}")
        assert list(adam["customdata"]) == pytest.approx(trace.move, rel=1e-4, abs=1e-12)
        assert list(sgd["customdata"]) == pytest.approx([-r * g for r, g in zip(run.rates, trace.gradient)],
                                                        rel=1e-6, abs=1e-30)
        assert list(rates["y"]) == pytest.approx([r / run.peak_lr for r in run.rates])
    assert axis_title(figure, "yaxis") == "|move| ÷ peak rate"
    table = tables(shown["lc_adam"])[0]
    assert [number(row["learning rate"]) for row in table] == pytest.approx(run.rates, rel=1e-2)
    assert [number(row["the batch's loss"]) for row in table] == pytest.approx(run.losses, abs=5e-5)
    worked = tables(shown["lc_adam"])[1]
    trace = run.traces[0]
    for t, row in enumerate(worked):
        ratio = number(row["m̂/(√v̂+ε)"])
        assert ratio == pytest.approx(trace.m_hat[t] / (math.sqrt(trace.v_hat[t]) + run.eps), abs=1e-3)
        assert number(row["AdamW's move"]) == pytest.approx(trace.move[t], rel=1e-3, abs=1e-12)
    made = make_optimizer(same.loaded.model, same.config).param_groups[0]["betas"]
    assert made[0] != made[1] and run.betas == tuple(made)  # (β1, β2): a swapped pair would read otherwise
    said = shown["lc_adam"][shown["lc_adam"].index("step by step:"):]
    assert (after(said, "m = "), after(said, "v = ")) == run.betas


def test_the_depth_view_says_a_model_without_snapshots_has_none_and_draws_each_snapshots_gradients(
        registry, run_with_timeline):
    none = lecture.depth_across_training(registry, MODEL, **EXAMPLE)
    assert "kept no snapshots of its training" in none["lc_depth"]
    run = run_with_timeline("depth-timeline")
    shown = lecture.depth_across_training(registry, "runs/depth-timeline", **EXAMPLE)
    same = drawn.drawn(registry, At("runs/depth-timeline"), drawn.Draw(**EXAMPLE))
    held = held_out_sample(same.trained)  # the run's own held-out text: it trained on wiki
    batch = batch_step.draw_batch(held, same.loaded.tokenizer, same.config, 4, lecture.DEPTH_BATCH)
    depths = depth_across(same.loaded.model, run, batch, same.config)
    lines = [t for t in traces(shown["lc_depth_plot"]) if t.get("showlegend") is not False]
    assert [t["name"] for t in lines][:2] == ["step 0", "step 10"]
    for line, depth in zip(lines, depths):
        assert list(line["y"]) == pytest.approx(depth.at_outputs, rel=1e-4)
        assert list(line["x"])[0] == "embeddings"
    assert "the run's held-out documents, text it never trained on" in shown["lc_depth"]
    ratio = depths[0].at_outputs[0] / depths[0].at_outputs[-1]
    assert after(shown["lc_depth"], "the embeddings' output gets") == pytest.approx(ratio, rel=1e-2)


@pytest.mark.parametrize("call, message", [
    (lambda r: lecture.batch_step(r, MODEL, **EXAMPLE, size=1), "2 to 6"),
    (lambda r: lecture.batch_step(r, MODEL, **EXAMPLE, size=2.5), "whole number"),
    (lambda r: lecture.by_hand(r, MODEL, **EXAMPLE, part="attention Z"), "attention Q"),
    (lambda r: lecture.by_hand(r, MODEL, **EXAMPLE, layer=9), "1 to 3"),
    (lambda r: lecture.adam_over_time(r, MODEL, **EXAMPLE, steps=20, batch_size=8), "at most 40"),
    (lambda r: lecture.adam_over_time(r, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model", seed=-1,
                                      snapshot="final", steps=2, batch_size=2), "seed")])
def test_a_view_asked_wrongly_gets_a_message(registry, call, message):
    with pytest.raises(gr.Error, match=message):
        call(registry)


def test_the_views_that_copy_the_model_wait_in_the_training_steps_line_and_by_hand_in_the_slow_one():
    for name in ("batch_step", "adam_over_time", "depth_across_training"):
        assert name in TRAINING_KINDS and kind_of(name, {}) == "training_step"
    assert SHARES["by_hand"] is SLOW


def test_the_depths_batch_is_held_out_text_of_a_corpus_the_app_trains_on_and_otherwise_says_where_it_came_from(
        tmp_path):
    from bert_demo.app.tabs import lecture_views
    from bert_demo.inspection.across_training import Depth
    from bert_demo.training.settings import TrainConfig

    corpus = tmp_path / "mine.txt"
    corpus.write_text("One sentence here.\n\nAnother one there.")
    assert lecture._held_out(TrainConfig(corpus="wiki")).sources[0] == "wiki, held out"
    assert lecture._held_out(TrainConfig(corpus=str(corpus))) is None  # a visitor's file: not kept
    assert lecture._held_out(TrainConfig(corpus="v4")) is None  # the shipped models' 12.8 M words: not read here
    assert lecture._held_out(None) is None
    depths = [Depth(step=s, loss=1.0, at_outputs=[2.0, 1.0], in_weights=[1.0]) for s in (0, 10)]
    said = lecture_views.depth_markdown(depths, "m", 4, held_out=False)
    assert "the passages section 1 draws from" in said and "held-out documents" not in said
    assert "**2×** the gradient at the last layer's" in said


def test_a_gradient_by_hand_and_a_batch_step_beside_other_visitors_answer_as_they_do_alone(registry):
    """Both hook or copy a view of the one model every visitor asks: asked in threads beside each other and beside
    Fill-mask, each answer is the one it gives alone."""
    import threading

    from bert_demo.app.tabs import fill

    asks = {"hand": lambda: lecture.by_hand(registry, MODEL, **EXAMPLE, part="attention V", layer=2, head=2)["lc_hand"],
            "batch": lambda: lecture.batch_step(registry, MODEL, **EXAMPLE, size=2)["lc_batch"].split(
                "**Dropout.**")[0],  # dropout's draws are random by design
            "fill": lambda: str({name: value for name, value in fill.fill_mask(registry, MODEL,
                                                                               sentence="the [MASK] sat on the mat.",
                                                                               top_k=5).items() if isinstance(value,
                                                                                                              (str,
                                                                                                               dict))})}
    alone = {name: ask() for name, ask in asks.items()}
    together: dict[str, list[str]] = {name: [] for name in asks}
    threads = [threading.Thread(target=lambda name=name: together[name].append(asks[name]()))
               for name in asks for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert together == {name: [answer, answer] for name, answer in alone.items()}


def test_adam_over_a_run_under_a_lamb_recipe_names_lamb_and_its_trust_ratio_never_adam_as_the_mover(make_checkpoint,
                                                                                                     tmp_path):
    """A model trained with `--optimizer lamb`: the short run takes LAMB's steps, and the table, the rule, the
    comparison with SGD and the chart's legend name LAMB and its trust ratio, never Adam as what moved the weights."""
    from bert_demo.app.tabs import lecture_views
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.config import read_metadata
    from bert_demo.inspection import learning_figures, pretraining_example
    from bert_demo.training.settings import TrainConfig
    from tests.conftest import METADATA

    folder = make_checkpoint(tmp_path / "lamb", train_config={**METADATA["train_config"], "optimizer": "lamb"})
    model, tokenizer = load_pretrained(folder)
    recipe = TrainConfig.from_stored(read_metadata(folder)["train_config"])
    documents = pretraining_example.typed_documents(PARAGRAPHS)
    run = over_time.run(model, documents, tokenizer, recipe, 0, 3, 2)
    said = lecture_views.adam_markdown(run)
    assert run.optimizer == "LAMB" and said.startswith("**3 steps of LAMB**")
    assert "LAMB moves it by −rate·r·(m̂/(√v̂ + ε)" in said and "trust ratio" in said
    assert "| LAMB's move |" in said and "**LAMB against SGD" in said and "LAMB's median move" in said
    assert not re.search(r"Adam(W)? moves|Adam(W)?'s (median )?move|Adam against|AdamW", said)
    worked = tables(said)[1]
    assert [number(row["LAMB's move"]) for row in worked] == pytest.approx(run.traces[0].move, rel=1e-3, abs=1e-12)
    assert traces(learning_figures.adam_figure(run))[0]["name"] == "LAMB"
