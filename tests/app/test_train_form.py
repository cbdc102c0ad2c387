"""The Train form is built from the settings it names (`policy.FORM`): each input, /train's parameters and the run's
config follow from one name and its cap."""
from __future__ import annotations

import importlib

import gradio as gr
import pytest

from bert_demo.app import policy
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import train
from bert_demo.app.ui import build_demo
from bert_demo.training.settings import TrainConfig, default

JOINED = "the test took the run's config"  # the slot's answer in place of taking the run: nothing starts


@pytest.fixture
def registry(tmp_path) -> Registry:
    return Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                    allow_hub=False)


@pytest.fixture
def masking_on_the_form(monkeypatch):
    """The masking rate added to the form as a maintainer would add it: its name in FORM, its cap in CAPS; the tab
    is imported again, as a restarted app would import it."""
    monkeypatch.setattr(policy, "FORM", (*policy.FORM, "mask_prob"))
    monkeypatch.setitem(policy.CAPS["cpu"], "mask_prob", 0.5)
    importlib.reload(train)
    yield
    monkeypatch.undo()
    importlib.reload(train)


def run_config(registry: Registry, monkeypatch, *args, **kwargs) -> TrainConfig:
    """The config of the run /train's handler asks the slot for, called with `args` and `kwargs` as gradio calls it."""
    asked = []

    def join(configs, owner, share):
        asked.append(configs["run"])
        raise ValueError(JOINED)

    monkeypatch.setattr(registry.slot, "join", join)
    with pytest.raises(gr.Error, match=JOINED[1:]):
        list(train.train(registry, *args, **kwargs))
    return asked[0]


def test_a_setting_added_to_the_form_is_an_input_a_parameter_of_train_and_a_value_of_the_run(
        masking_on_the_form, registry, monkeypatch):
    with gr.Blocks():
        parts = train.layout(registry)
    box = parts["mask_prob"]
    assert isinstance(box, gr.Number) and box.maximum == 0.5 and box.value == default("mask_prob")
    assert box.label == "Masking rate" and box.elem_id == "mask-prob"

    demo = build_demo(registry)
    names = [p["parameter_name"] for p in demo.get_api_info()["named_endpoints"]["/train"]["parameters"]]
    assert names[:9] == ["corpus", "upload", "preset", "steps", "batch_size", "lr", "seq_len", "vocab_size",
                         "mask_prob"]

    config = run_config(registry, monkeypatch, ["wiki"], None, "tiny", 10, 4, 1e-3, 32, 512, 0.4, owner="visitor")
    assert config.mask_prob == 0.4 and config.steps == 10
    paper = run_config(registry, monkeypatch, ["wiki"], None, mask_prob=0.4, recipe="paper")
    assert paper.mask_prob == 0.4 and paper.beta2 == 0.999  # the form's value wins over the recipe's
    assert run_config(registry, monkeypatch, ["wiki"], None, recipe="paper").mask_prob == 0.15  # left out: the recipe's
    with pytest.raises(gr.Error, match="Masking rate must be between 0.01 and 0.5 on this machine, got 0.7"):
        list(train.train(registry, ["wiki"], None, "tiny", 10, 4, 1e-3, 32, 512, 0.7))


def test_a_setting_left_out_of_a_call_takes_the_machines_default_run(registry, monkeypatch):
    config = run_config(registry, monkeypatch, ["wiki"], None, steps=20, owner="visitor")
    assert (config.preset, config.steps, config.lr) == (policy.APP_RUN["preset"], 20, policy.APP_RUN["lr"])


def test_each_setting_of_the_form_is_capped_within_its_own_bounds_on_each_machine():
    for machine, caps in policy.CAPS.items():
        for name, cap in caps.items():
            assert name in policy.FORM, f"{name} is capped on a {machine} but not on the form"
            for value in (cap if isinstance(cap, tuple) else (cap,)):
                TrainConfig(**{name: value})  # a cap no run could use would refuse every value


def test_a_page_opened_while_the_slot_was_free_keeps_asking_so_that_it_hears_of_a_run_started_later(registry):
    """The line about someone else's run stays hidden while the slot is free, and the page asks again every
    WATCH_IDLE_S: a visitor whose page opened before another's run started is told of it (their estimate said
    "about 6 min" and nothing of the run)."""
    from bert_demo.app.tabs import train

    idle = train.watch_slot(registry, "a visitor")
    assert not idle["slot_busy"].constructor_args["visible"]
    assert idle["slot_watch"].constructor_args == {"value": train.WATCH_IDLE_S, "active": True}
    assert train.WATCH_IDLE_S > train.WATCH_EVERY_S
