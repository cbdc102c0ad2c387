"""The app's policy: its default runs, and the caps one visitor's run has on a shared machine."""
from __future__ import annotations

import pytest

from bert_demo.app.policy import (
    APP_RUN,
    APP_RUNS,
    CPU_STEPS,
    check_batch_tokens,
    check_limits,
    shared_limits,
)
from bert_demo.training.settings import TrainConfig, bounds


def test_the_shared_machine_caps_are_tighter_and_said_to_be_this_machines():
    assert shared_limits("cpu")["steps"] == CPU_STEPS and shared_limits("gpu")["steps"] == 20_000
    assert bounds("steps")[1] > 20_000
    TrainConfig(steps=5000)
    with pytest.raises(ValueError, match=f"steps must be between 1 and {CPU_STEPS:,} on this machine, got 5,000"):
        check_limits({"steps": 5000}, shared_limits("cpu"))
    with pytest.raises(ValueError, match="preset 'base' is not available on this machine: choose tiny, mini"):
        check_limits({"preset": "base"}, shared_limits("cpu"))


def test_the_apps_default_run_is_valid_on_a_shared_cpu():
    check_limits(APP_RUN, shared_limits("cpu"))
    TrainConfig(**APP_RUN)


def test_the_default_run_of_each_kind_of_machine_is_within_that_machines_caps():
    for machine, run in APP_RUNS.items():
        check_limits(run, shared_limits(machine))
        check_batch_tokens(run["batch_size"], run["seq_len"], machine)


def test_a_gpu_batch_of_more_tokens_than_one_visitor_may_have_is_refused_and_a_cpu_leaves_it_to_its_caps():
    with pytest.raises(ValueError, match="at most 32,768 are allowed on this machine"):
        check_batch_tokens(128, 512, "gpu")
    check_batch_tokens(128, 512, "cpu")
    with pytest.raises(ValueError, match="unknown machine kind 'tpu'"):
        shared_limits("tpu")
