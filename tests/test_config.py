"""Configs validate their values, and presets are the published sizes."""
from __future__ import annotations

import time

import pytest

from bert_demo.config import PRESETS, BertConfig, trained_on, whole_number


def test_presets_have_the_turc_et_al_and_bert_base_sizes():
    sizes = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
             for name, c in PRESETS.items()}
    assert sizes == {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
                     "base": (12, 768, 12, 3072)}


def test_hf_dict_round_trip_keeps_every_value():
    config = PRESETS["mini"].with_vocab(8192)
    assert BertConfig.from_hf_dict(config.to_hf_dict()) == config


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 0}, "hidden_size=0 must be an integer between 1 and 4096"),
    ({"hidden_size": -4}, "hidden_size=-4 must be an integer between 1 and 4096"),
    ({"num_hidden_layers": 1000}, "num_hidden_layers=1000 must be an integer between 1 and 48"),
    ({"vocab_size": 10**9}, "vocab_size=1000000000 must be an integer between 1 and 250000"),
    ({"hidden_size": 100, "num_attention_heads": 3}, "hidden_size 100 is not divisible by num_attention_heads 3"),
    ({"hidden_dropout_prob": 1.5}, r"hidden_dropout_prob must be in \[0, 1\)"),
    ({"hidden_size": 12.5}, "hidden_size=12.5 must be an integer"),
    ({"pad_token_id": 40000}, "pad_token_id 40000 is outside the vocabulary"),
    ({"num_attention_heads": True}, "num_attention_heads=True must be an integer"),
])
def test_invalid_sizes_raise_value_error(change, message):
    with pytest.raises(ValueError, match=message):
        BertConfig(**change)


def test_foreign_architectures_are_refused():
    with pytest.raises(ValueError, match="not BERT"):
        BertConfig.from_hf_dict({"model_type": "roberta"})
    with pytest.raises(ValueError, match="GELU"):
        BertConfig.from_hf_dict({"hidden_act": "relu"})


def test_parameter_count_is_known_before_building_and_huge_configs_are_refused():
    from bert_demo.model import BertForPreTraining

    for name in ("tiny", "mini"):
        config = PRESETS[name].with_vocab(1000)
        assert config.num_parameters == BertForPreTraining(config).num_parameters()
    large = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    assert 330e6 < large.num_parameters < 340e6  # BERT-large
    with pytest.raises(ValueError, match="10,726 M parameters; at most 500 M are allowed"):
        BertConfig(vocab_size=250_000, hidden_size=4096, num_hidden_layers=48, num_attention_heads=64,
                   intermediate_size=16384)


@pytest.mark.parametrize("metadata, machines", [
    ({"hardware": ["NVIDIA H100", "AMD EPYC"], "device": "cpu", "step": 9}, ["NVIDIA H100", "AMD EPYC"]),
    ({"hardware": "NVIDIA H100", "step": 9}, ["NVIDIA H100"]),  # a hand-edited file: one machine, not its letters
    ({"hardware": [5, None]}, ["5", "None"]),
    ({"hardware": {"gpu": 1}, "device": "cuda", "step": 9}, ["cuda"]),  # not a list: the device type instead
    ({"device": "cuda", "step": 9}, ["cuda"]),  # saved before runs recorded their hardware
    ({"device": "cuda", "step": 0}, []),
    ({}, []),
])
def test_the_machines_a_run_trained_on_are_read_from_any_metadata_as_a_list_of_names(metadata, machines):
    assert trained_on(metadata) == machines


def test_the_hub_is_never_asked_under_hf_hub_offline_and_a_silent_one_is_answered_for_within_a_second(monkeypatch):
    from bert_demo import config

    monkeypatch.setattr(config.socket, "create_connection", lambda *args, **kwargs: pytest.fail("the hub was asked"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert config.hub_reachable() is False
    monkeypatch.undo()
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://192.0.2.1:443")  # TEST-NET-1: no answer
    started = time.monotonic()
    assert config.hub_reachable() is False and time.monotonic() - started < config.HUB_PROBE_S + 0.5
    # the answer kept: not asked again (it had been timed under 10 ms, a coin toss on a busy host)
    monkeypatch.setattr(config.socket, "create_connection", lambda *args, **kwargs: pytest.fail("asked again"))
    assert config.hub_reachable() is False


def test_a_whole_number_is_an_int_or_a_whole_float_in_its_range_and_nothing_else():
    assert [whole_number(v, "the seed", 0, 9) for v in (0, 9, 3.0)] == [0, 9, 3]
    assert type(whole_number(3.0, "the seed")) is int and whole_number(10**12, "the seed") == 10**12
    for value in (1.5, True, "3", None, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="^steps must be a whole number, got"):
            whole_number(value, "steps")
    for value in (-1, 10, 10.0):
        with pytest.raises(ValueError, match=f"^the seed must be a whole number from 0 to 9, got {int(value)}$"):
            whole_number(value, "the seed", 0, 9)
