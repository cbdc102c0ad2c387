"""bert_demo/app/text.py: what the Model tab says about how a model was trained."""
from __future__ import annotations

from bert_demo.app.text import model_markdown

TRAINED = {"corpus": "news,wiki", "preset": "tiny", "steps": 100, "batch_size": 32, "seq_len": 128, "lr": 1e-3}
SHAPE = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
         "max_position_embeddings": 512, "hidden_dropout_prob": 0.0}


def info(name: str, train_config: dict) -> dict:
    """What the catalogue says of a checkpoint (`Catalog.model_info`), for a mini-shaped one."""
    return {"name": name, "config": SHAPE, "parameters": 5_529_090, "device": "cpu", "vocab_size": 8192,
            "train_config": train_config, "step": 100}


def test_a_model_trained_from_scratch_is_described_by_its_preset():
    shown = model_markdown(info("runs/tiny", TRAINED))
    assert "Corpus **news + wiki**, preset **tiny**, 100 of 100 steps" in shown


def test_a_continued_model_names_the_model_it_continued_never_the_preset_its_config_carries():
    config = {**TRAINED, "corpus": "everyday", "init_from": "runs/v3-stage1"}  # preset "tiny" is the unused default
    shown = model_markdown(info("runs/mini-english-v3", config))
    assert "Corpus **everyday**, continued from **v3-stage1**, 100 of 100 steps" in shown
    assert "tiny" not in shown
