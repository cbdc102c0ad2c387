"""A view's inputs declared once (`bert_demo.app.queries`): the components, the handlers' parameters, the API's
names and defaults and each event's inputs all come from the declaration, and no handler takes more than six
parameters."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

import gradio as gr
import pytest

from bert_demo.app import ui
from bert_demo.app.handlers import FINAL
from bert_demo.app.queries import At, Query, ask, inputs, takes
from bert_demo.app.tabs import drawn, finetune, learning, lecture, steps, train

MAX_PARAMETERS = 6  # issue 81: a handler of 16 positional parameters broke when one was swapped
QUERIES = [At, drawn.Draw, steps.Show, learning.Take, lecture.Batch, lecture.ByHand, lecture.Run,
           finetune.Experiment, train.Reading]


@dataclass(frozen=True)
class Asked(Query):
    """A query of two fields, for the tests of the machinery itself."""

    PREFIX = "q"
    count: int = ask(3, "How many", bounds=(1, 9), whole=True, noun="number of things")
    word: str = ask("one", "Which", choices=["one", "two"], component="elsewhere")


@takes(at=At, asked=Asked)
def _handler(registry, at: At, asked: Asked, owner: str | None = None) -> tuple:
    return registry, at, asked, owner


@pytest.fixture(scope="module")
def demo(tmp_path_factory, make_checkpoint):
    root = tmp_path_factory.mktemp("queries")
    make_checkpoint(root / "checkpoints" / "tiny-test")
    from bert_demo.app.registry import Registry

    return ui.build_demo(Registry(checkpoints_dir=root / "checkpoints", runs_dir=root / "runs", device="cpu",
                                  allow_hub=False))


def test_a_handler_is_called_by_each_fields_name_and_gets_its_queries_built_with_the_declared_defaults():
    assert list(inspect.signature(_handler).parameters) == ["registry", "model_name", "snapshot", "count", "word",
                                                            "owner"]
    registry, at, asked, owner = _handler("r", "checkpoints/x", count=5.0, owner="me")
    assert (registry, owner) == ("r", "me")
    assert at == At(model_name="checkpoints/x", snapshot=FINAL) and asked == Asked(count=5, word="one")
    assert isinstance(asked.count, int)  # gradio's 5.0, a whole number
    built = Asked(count=2, word="two")
    assert _handler("r", at=at, asked=built)[2] is built  # a query already built passes as it is


def test_a_whole_number_field_refuses_what_is_not_one_by_its_noun():
    with pytest.raises(ValueError, match="the number of things must be a whole number, got 1.5"):
        _handler("r", "m", count=1.5)


def test_an_input_is_the_declared_component_with_its_label_help_default_choices_and_bounds():
    with gr.Blocks():
        slider = Asked.input("count", gr.Slider, scale=2)
        radio = Asked.input("word", gr.Radio)
        moved = Asked.input("count", gr.Number, value=7)
    assert (slider.label, slider.value, slider.minimum, slider.maximum, slider.step) == ("How many", 3, 1, 9, 1)
    assert slider.elem_id == "q-count" and slider.scale == 2
    assert radio.elem_id == "elsewhere" and [value for _, value in radio.choices] == ["one", "two"]
    assert moved.value == 7  # the layout may start it elsewhere: the page's first example


def test_an_events_inputs_are_the_components_of_the_handlers_parameters_in_their_order():
    c = {name: name.upper() for name in ("model", "step", "q_count", "elsewhere", "renamed")}
    assert inputs(c, _handler) == ["MODEL", "STEP", "Q_COUNT", "ELSEWHERE"]
    assert inputs(c, _handler, word="renamed") == ["MODEL", "STEP", "Q_COUNT", "RENAMED"]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.__name__)
def test_every_field_of_the_apps_queries_is_declared_with_a_label(query):
    for f in fields(query):
        assert f.metadata["ask"].label, f"{query.__name__}.{f.name}"


def test_no_handler_the_page_wires_takes_more_than_six_parameters(demo):
    wide = {}
    for block_fn in demo.fns.values():
        handler = getattr(block_fn.fn, "handler", None)
        if handler is None:
            continue
        own = inspect.signature(inspect.unwrap(handler)).parameters.values()
        count = sum(p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in own)
        if count > MAX_PARAMETERS:
            wide[handler.__name__] = count
    assert not wide, wide


def test_the_api_names_each_declared_field_and_takes_its_declared_default(demo):
    """An API caller names what it asks (gradio_client's keyword arguments) and leaves the rest at the page's first
    values, which are the declaration's: /forward_steps, /training_step and /by_hand, checked field by field."""
    endpoints = demo.get_api_info()["named_endpoints"]
    for endpoint, queries in [("/forward_steps", (drawn.Draw, steps.Show)), ("/training_step", (drawn.Draw,
                                                                                               learning.Take)),
                              ("/by_hand", (drawn.Draw, lecture.ByHand))]:
        declared = {p["parameter_name"]: p for p in endpoints[endpoint]["parameters"]}
        assert list(declared)[:2] == ["model_name", "snapshot"]
        for query in queries:
            for f in fields(query):
                if f.name == "step":  # the pass's step picker: its choices and value come with the model
                    continue
                assert f.name in declared, (endpoint, f.name)
                assert declared[f.name]["parameter_default"] == f.default, (endpoint, f.name)
