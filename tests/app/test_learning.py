"""The training step's handler, called as the page calls it: on the example the section above draws with the same
inputs, its numbers the backend's, the shared model untouched, bad input refused with a message, and its place in
the slow line."""
from __future__ import annotations

import re

import gradio as gr
import pytest
import torch

from bert_demo.app.guards.admission import SHARES, SLOW, TRAINING_STEP
from bert_demo.app.queries import At
from bert_demo.app.tabs import drawn, learning, steps
from bert_demo.inspection.training_step import take

MODEL = "checkpoints/tiny-test"
PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))


def step_of(registry, **change):
    asked = {"source": drawn.YOUR_TEXT, "typed": PARAGRAPHS, "recipe": "model", "seed": 4, "snapshot": "final",
             "steps": 1, "dropout": "off", **change}
    return learning.training_step(registry, MODEL, **asked)


def test_the_step_is_taken_on_the_example_the_section_above_draws_and_leaves_the_shared_model_as_it_was(registry):
    model = registry.catalog.load(MODEL).model
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    shown = step_of(registry)
    assert set(shown) == set(learning.OUT)
    example = steps.pretraining_example(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                        seed=4)
    same = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                       seed=4))
    taken = take(same.loaded.model, same.example, same.config)
    assert f"| {taken.loss_before:.4f} | {taken.loss_after:.4f} |" in shown["ts_summary"]
    assert f"**{taken.before.mlm_loss:.4f}**" in example["ex_loss"]  # the loss above is the step's loss before
    assert f"{len(same.example.picked)} picked positions" in shown["ts_start"]
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    for name in ("ts_flow", "ts_heads", "ts_params", "ts_losses"):
        assert shown[name].to_json(), name


def test_more_steps_show_each_weights_update_step_after_step(registry):
    shown = step_of(registry, steps=3.0, dropout="paper")
    assert "after 3 steps" in shown["ts_summary"] and "Step after step" in shown["ts_adam"]
    assert "with dropout 0.1" in shown["ts_summary"]


@pytest.mark.parametrize("change, message", [({"steps": 0}, "steps"), ({"steps": 1.5}, "whole number"),
                                             ({"steps": 21}, "steps"),
                                             ({"dropout": 0.1}, "Dropout is 'off' or 'paper'"),
                                             ({"seed": -1}, "seed"), ({"recipe": "mine"}, "recipe")])
def test_a_step_asked_wrongly_gets_a_message(registry, change, message):
    with pytest.raises(gr.Error, match=message):
        step_of(registry, **change)


def test_a_training_step_is_taken_one_at_a_time_and_following_an_example_waits_in_the_slow_line():
    assert SHARES["training_step"] is TRAINING_STEP and TRAINING_STEP.running == 1 and TRAINING_STEP.heavy
    assert SHARES["across_training"] is SLOW and SLOW.heavy


def test_a_model_without_snapshots_is_said_to_have_none(registry):
    shown = learning.across_training(registry, MODEL, drawn.YOUR_TEXT, PARAGRAPHS, "model", 4)
    assert "kept no snapshots of its training" in shown["ex_across_note"]


def test_the_example_is_followed_through_each_snapshot_of_a_run(registry, run_with_timeline):
    run_with_timeline("with-timeline")
    shown = learning.across_training(registry, "runs/with-timeline", drawn.YOUR_TEXT, PARAGRAPHS, "model", 4)
    assert "from step 0 to " in shown["ex_across_note"]
    data = shown["ex_across_plot"].data
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                          seed=4)).example
    assert len(data) == 1 + len(example.picked)  # the loss, and a line a picked label
    assert list(data[0].customdata)[:2] == [0, 10]
    said = re.search(r"from step (\d+) to (\d+): its loss went from \*\*([\d.]+)\*\* to \*\*([\d.]+)\*\*, and the "
                     r"labels guessed first from (\d+) of (\d+) to (\d+)", shown["ex_across_note"]).groups()
    losses, ranks = list(data[0].y), [list(trace.y) for trace in data[1:]]
    first, last = [sum(line[at] == 1 for line in ranks) for at in (0, -1)]  # the note's, read off the chart
    assert [int(said[0]), float(said[2]), float(said[3]), int(said[4]), int(said[5]), int(said[6])] == [
        0, pytest.approx(losses[0], abs=5e-4), pytest.approx(losses[-1], abs=5e-4), first, len(ranks), last]
    offered = steps.timeline_of(registry, "runs/with-timeline")["ex_at"]
    assert offered.visible and [value for _, value in offered.choices] == ["final", "0", "10"]


def test_a_steps_gradients_are_kept_for_the_visitor_who_took_it_alone(registry, monkeypatch):
    """The training step leaves its gradients for the forward pass's gradient view: for its visitor, whose view
    reads them, and never for another visitor asking about the same example, whose view takes its own step."""
    from bert_demo.inspection import training_step

    taken, take_step, backward = [], training_step.take, training_step.gradients_at_steps
    monkeypatch.setattr(training_step, "take", lambda *args, **kwargs: taken.append(1) or take_step(*args, **kwargs))
    monkeypatch.setattr(training_step, "gradients_at_steps",
                        lambda *args, **kwargs: taken.append(1) or backward(*args, **kwargs))
    asked = (drawn.YOUR_TEXT, PARAGRAPHS, "model", 6, "final")
    learning.training_step(registry, MODEL, **dict(zip(("source", "typed", "recipe", "seed", "snapshot"), asked)),
                           steps=1, dropout="off", owner="visitor-a")
    assert len(taken) == 1
    view = {"reads": "example", "shows": "gradient", "source": asked[0], "typed": asked[1], "recipe": asked[2],
            "seed": asked[3]}
    steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=5, owner="visitor-a",
                        **view)
    assert len(taken) == 1  # visitor a's own step, kept
    steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=5, owner="visitor-b",
                        **view)
    assert len(taken) == 2  # visitor b's backward pass is b's own


def test_a_visitors_kept_gradients_are_for_that_example_alone(registry, monkeypatch):
    """The gradient view reads the visitor's kept gradients only for the very example they came from: another typed
    text, recipe or seed is another example, whose backward pass is taken anew."""
    from bert_demo.inspection import training_step

    taken, backward = [], training_step.gradients_at_steps
    monkeypatch.setattr(training_step, "gradients_at_steps",
                        lambda *args, **kwargs: taken.append(1) or backward(*args, **kwargs))
    other_text = PARAGRAPHS.replace("river", "lake")
    asked = {"reads": "example", "shows": "gradient", "source": drawn.YOUR_TEXT, "typed": PARAGRAPHS,
             "recipe": "model", "seed": 6}
    for change in ({}, {"typed": other_text}, {"recipe": "paper"}, {"seed": 7}):
        steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=5, owner="visitor-c",
                            **{**asked, **change})
    assert len(taken) == 4
    steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=5, owner="visitor-c",
                        **{**asked, "typed": other_text})
    assert len(taken) == 4  # that one is kept


def test_the_note_across_training_reads_its_first_and_last_moments():
    """The sentence over the chart: the loss and the count of labels guessed first at the first moment, then at the
    last (moments made here, whose two counts differ)."""
    from types import SimpleNamespace

    from bert_demo.app.tabs.learning_views import across_markdown

    moments = [SimpleNamespace(step=0, loss=6.5, ranks=[40, 3, 9]),
               SimpleNamespace(step=10, loss=4.25, ranks=[2, 1, 5]),
               SimpleNamespace(step=30, loss=1.125, ranks=[1, 1, 2])]
    said = across_markdown(moments, ["a", "b", "c"], "runs/mine")
    assert "from step 0 to 30: its loss went from **6.500** to **1.125**" in said
    assert "guessed first from 0 of 3 to 2." in said
