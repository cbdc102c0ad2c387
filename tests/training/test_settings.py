"""The one schema of a run: every setting has a flag, bounds are checked once, old stored configs keep BERT's recipe."""
from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from bert_demo.training.settings import (
    BERT_RECIPE,
    TrainConfig,
    add_flags,
    given_flags,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(list(argv))


def test_every_setting_has_a_command_line_flag_with_its_help():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    flags = {action.dest: action for action in parser._actions}
    for f in fields(TrainConfig):
        assert f.name in flags and flags[f.name].help == f.metadata["help"].replace("%", "%%"), f.name


def test_every_setting_of_every_config_has_one_concern_and_the_help_lists_the_flags_by_concern():
    from bert_demo.training.settings import GROUPS, FinetuneConfig

    for config in (TrainConfig, FinetuneConfig):
        assert {f.metadata["group"] for f in fields(config)} <= set(GROUPS)
        parser = argparse.ArgumentParser()
        add_flags(parser, config)
        sections = {group.title: [a.dest for a in group._group_actions] for group in parser._action_groups}
        for f in fields(config):
            assert f.name in sections[GROUPS[f.metadata["group"]]], f.name
    with pytest.raises(ValueError, match="unknown group"):
        from bert_demo.training.settings import setting
        setting(1, "a setting of no concern", group="misc")


def test_only_the_flags_given_override_and_they_arrive_typed():
    given = given_flags(parse("--steps", "30", "--lr", "3e-4", "--no-unigram-bias", "--schedule", "triangle"))
    assert given == {"steps": 30, "lr": 3e-4, "unigram_bias": False, "schedule": "triangle"}
    with pytest.raises(SystemExit):
        parse("--schedule", "cosine")  # argparse lists the choices


def test_a_config_stored_before_the_recipe_levers_resumes_with_berts_recipe():
    stored = {"preset": "mini", "steps": 86000, "mask_prob": 0.15}  # an old checkpoint's train_config
    config = TrainConfig.from_stored(stored)
    assert {key: getattr(config, key) for key in BERT_RECIPE} == BERT_RECIPE
    assert TrainConfig.from_stored({"local_heads": 2}).local_heads == 2  # what was stored wins


def test_a_config_no_run_can_use_is_refused_when_it_is_made_and_none_is_changed_after_its_check():
    from dataclasses import FrozenInstanceError, replace

    from bert_demo.training.settings import FinetuneConfig

    with pytest.raises(ValueError, match="steps must be between 1 and 10,000,000, got 0"):
        TrainConfig(steps=0)
    for config in (TrainConfig(), FinetuneConfig()):
        with pytest.raises(FrozenInstanceError):
            config.grad_accum = 3  # a setting assigned after its check
        with pytest.raises(ValueError, match="batch size 32 must be a multiple of grad_accum 3"):
            replace(config, grad_accum=3)  # a changed copy is a new config, checked as it is made


def test_levers_that_cannot_go_together_are_refused():
    with pytest.raises(ValueError, match="at most the 2 heads of a tiny layer"):
        TrainConfig(preset="tiny", local_heads=3)
    with pytest.raises(ValueError, match="own position code"):
        TrainConfig(sinusoid_positions=True)
    with pytest.raises(ValueError, match="needs local_heads of at least 1"):
        TrainConfig(local_heads=0, global_cls=True)
    TrainConfig(global_cls=True)  # with the default local heads it is a lever like the others


def test_a_warm_up_longer_than_the_steps_is_refused_except_on_a_time_budget_whose_steps_come_later():
    with pytest.raises(ValueError, match="warm-up steps must be between 0 and steps"):
        TrainConfig(steps=200, warmup_steps=1000)
    assert TrainConfig(minutes=6.5, warmup_steps=1000).warmup_steps == 1000
