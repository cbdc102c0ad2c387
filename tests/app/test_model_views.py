"""bert_demo/app/tabs/model_views.py: what the Model tab says about how a model was trained, and on which text each
of its figures was measured."""
from __future__ import annotations

from bert_demo.app.tabs.model_views import model_markdown
from bert_demo.data.sources import MIX_ABOUT

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
    assert f"Corpus **everyday** ({MIX_ABOUT['everyday']}; the card below lists them), continued from " \
           "**v3-stage1**, 100 of 100 steps" in shown
    assert "tiny" not in shown


def test_a_fine_tune_that_its_epochs_decided_says_the_steps_it_planned():
    """A CLI fine-tune with `--epochs` has no `steps` setting: the steps it planned are saved with it."""
    tuned = {"task": "movie-reviews", "init": "pretrained", "model": "checkpoints/mini-english", "steps": None,
             "train_examples": 300, "batch_size": 16, "lr": 5e-5}
    shown = model_markdown({**info("runs/tuned", tuned), "step": 40, "planned_steps": 57})  # stopped at step 40
    assert "300 labelled sentences, 40 of 57 steps, batch 16" in shown


def test_the_model_tabs_figures_say_which_text_they_were_measured_on():
    """The tab showed NSP 96.9% and MLM 52.1% with no text named, beside a card and a README of other figures."""
    config = {**TRAINED, "corpus": "v4", "val_fraction": 0.05, "mask_prob": 0.25}
    shown = model_markdown({**info("checkpoints/small-english", config),
                            "last_train": {"step": 100, "mlm_loss": 2.0, "mlm_acc": 0.5, "nsp_loss": 0.1,
                                           "nsp_acc": 0.97},
                            "last_val": {"step": 100, "mlm_loss": 2.1, "mlm_acc": 0.521, "nsp_loss": 0.1,
                                         "nsp_acc": 0.969}})
    assert ("on 5% of the documents of v4 that it never trained on, 25% of their word pieces masked as in "
            "training") in shown
    assert "| | train | held out |" in shown and "| NSP accuracy | 97.0% | 96.9% |" in shown
    assert f"Corpus **v4** ({MIX_ABOUT['v4']}" in shown  # the mix explained outside the collapsed card
