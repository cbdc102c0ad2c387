"""bert_demo/app/state/forms.py: a visitor's settings read into a checked config within the machine's caps."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bert_demo.app.policy import APP_GPU_RUN, APP_RUN, GPU_BATCH_TOKENS
from bert_demo.app.state.forms import Caps
from bert_demo.app.registry import Registry
from bert_demo.config import PRESETS
from bert_demo.training.settings import TrainConfig, default


@pytest.mark.parametrize("settings, message", [
    ({"preset": "base"}, "not available on this machine"),
    ({"steps": Caps("cpu").bounds("steps")[1] + 1}, "steps must be between"),
    ({"batch_size": 1000}, "batch size must be between"),
    ({"seq_len": 512}, "sequence length must be between"),
    ({"vocab_size": 100}, "vocabulary size must be between"),
    ({"steps": 10.5}, "whole number"),
    ({"steps": "many"}, "whole number"),
    ({"lr": 5.0}, "learning rate must be between"),
    ({"lr": "fast"}, "learning rate must be a number"),
    ({"corpus": ["wiki", "/etc/passwd"]}, "unknown corpus"),
    ({"corpus": ["wiki", "wikitext-103"]}, r"wikitext-103 is too large to train on in the app: use the command line"),
    ({"corpus": []}, "choose a corpus"),
])
def test_training_settings_beyond_the_caps_are_refused(registry, settings, message):
    with pytest.raises(ValueError, match=message):
        registry.forms.train_config(**settings)


def test_where_a_gpu_trains_the_default_run_is_the_gpus_and_a_batch_holds_at_most_its_tokens(roots):
    gpu = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu", allow_hub=False,
                   caps=Caps("gpu"), run_device="cuda")
    config = gpu.forms.train_config()
    assert {key: getattr(config, key) for key in APP_GPU_RUN} == APP_GPU_RUN and config.device == "cuda"
    assert config.batch_size * config.seq_len == GPU_BATCH_TOKENS  # BERT's 256 x 128 ...
    gpu.forms.train_config(batch_size=64, seq_len=512)  # ... and 64 x 512 fit, 256 x 512 does not
    with pytest.raises(ValueError, match="is 131,072 tokens; at most 32,768 are allowed on this machine"):
        gpu.forms.train_config(batch_size=256, seq_len=512)


def test_the_apps_default_run_is_within_the_cpu_caps_and_uses_the_default_recipe(registry):
    config = registry.forms.train_config()  # what one click on Start training asks for
    assert {key: getattr(config, key) for key in APP_RUN} == APP_RUN
    assert registry.caps.machine == "cpu"  # validated against the CPU caps by train_config
    assert (config.local_heads, config.mask_prob, config.dropout) == (default("local_heads"), default("mask_prob"),
                                                                      default("dropout"))
    assert Path(config.out).parent == registry.roots["runs"]
    assert config.log_every == APP_RUN["steps"] // 50
    validated = [step for step in range(1, config.steps + 1) if step % config.eval_every == 0 or step == config.steps]
    assert len(validated) == 6 and validated[-1] - validated[-2] > config.eval_every / 2  # never two in a row


def test_a_run_on_two_corpora_gets_a_valid_folder_name(registry):
    config = registry.forms.train_config(corpus=["news", "wiki"])
    assert config.corpus == "news,wiki" and Path(config.out).name.startswith("tiny-news-wiki-")


def test_continuing_a_saved_model_names_its_folder_and_refuses_what_cannot_be_continued(registry, roots,
                                                                                         monkeypatch):
    config = registry.forms.train_config(corpus=["wiki"], init_from="checkpoints/tiny-test")
    assert config.init_from == str(roots["checkpoints"] / "tiny-test")
    assert Path(config.out).name.startswith("tiny-test-continued-wiki-")
    with pytest.raises(ValueError, match="no model called"):
        registry.forms.train_config(corpus=["wiki"], init_from="checkpoints/missing")
    tiny_only = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu",
                         allow_hub=False, caps=Caps("cpu", {"preset": ("tiny",)}))
    monkeypatch.setitem(PRESETS, "tiny", replace(PRESETS["tiny"], hidden_size=64))  # the checkpoint is wider
    with pytest.raises(ValueError, match="bigger than the models this machine trains \\(tiny\\)"):
        tiny_only.forms.train_config(corpus=["wiki"], init_from="checkpoints/tiny-test")


def test_the_apps_runs_keep_no_optimizer_state_which_the_command_lines_keep_for_resume(registry):
    assert registry.forms.train_config().save_optimizer is False and TrainConfig().save_optimizer is True
