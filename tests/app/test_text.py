"""bert_demo/app/text.py: what the Model tab says about how a model was trained, and on which text each of its
figures was measured."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from bert_demo.app import text
from bert_demo.app.runs.slot import Busy, Place
from bert_demo.app.text import model_markdown
from bert_demo.config import BertConfig
from bert_demo.data.sources import MIX_ABOUT

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"

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


def test_the_header_says_which_model_how_big_and_where_it_runs():
    config = BertConfig(**SHAPE, vocab_size=8192)
    assert text.model_summary("checkpoints/mini-english", config, "cpu") == (
        "checkpoints/mini-english: 4 layers, hidden size 256, 4 heads, vocabulary 8,192; runs on cpu")


def test_a_visitor_in_line_hears_their_number_and_the_time_left_once_it_is_known():
    assert text.waiting_text(None, "Starting your run…") == "Starting your run…"  # their turn has come
    assert text.waiting_text(Place(1, False, None), "") == "Waiting for the training slot: you are next in line."
    assert text.waiting_text(Place(3, True, 600.0), "") == (
        "Waiting for the training slot: you are number 3 in line, after the run training now. The runs ahead of "
        "yours have about 10 min left.")


def test_someone_elses_run_is_told_with_how_long_a_run_started_now_would_wait():
    busy = Busy(fine_tuning=False, step=120, steps=1000, of_experiment=None, waiting=0, seconds_ahead=None,
                max_wait_s=900.0)
    assert text.busy_text(None) == ""
    assert text.busy_text(busy) == ("**Busy:** someone else's pre-training run has the training slot now (step 120 "
                                    "of 1,000). A run you start now waits in line for it.")
    later = replace(busy, waiting=2, seconds_ahead=1500.0)
    assert text.busy_text(later).endswith("and 2 more visitors wait in line. The line takes no more runs for about "
                                          "10 min: nobody is asked to wait more than 15 min.")


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


def test_the_page_the_fine_tune_tab_and_the_cards_agree_on_how_much_text_the_shipped_models_read():
    """The header said "13 million words", the card "a few million words"."""
    for model, said in text.WORDS_READ.items():
        metadata = json.loads((SHIPPED / model / "bert_demo.json").read_text())
        corpus = metadata["train_config"]["corpus"]
        if corpus in MIX_ABOUT:
            assert re.search(r"([\d.]+) M words", MIX_ABOUT[corpus])[1] == said.split()[0]
        card = (SHIPPED / model / "README.md").read_text()
        assert "million words" not in card or said in card
    assert f"on {text.WORDS_READ['small-english']} words" in text.INTRO


def test_the_guesses_at_every_layer_are_one_a_line_so_that_a_phone_shows_the_table_whole():
    table = text.layer_table([[[("door", 0.05), ("night", 0.03)], [("door", 0.67), ("window", 0.04)]]])
    assert "| 2 (last) | door 67%<br>window 4% |" in table


def test_the_train_tab_says_what_next_sentence_prediction_will_do_from_measurement_and_why_it_is_drawn_twice():
    tiny = text.nsp_expectation("tiny", 1000, 32)
    assert "expect chance (0.5), or little above it** in this run's 32,000 pairs" in tiny and "96,000 pairs" in tiny
    assert "after 125 of its million steps" in tiny and "ALBERT" in tiny and "topic" in tiny
    assert "a slow rise above chance" in text.nsp_expectation("mini", 20_000, 256)
    assert "not measured at this size" in text.nsp_expectation("small", 100, 32)
    assert text.nsp_expectation("tiny", "many", 32) == ""
