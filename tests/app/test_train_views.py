"""bert_demo/app/tabs/train_views.py: what the Train tab says of the line for the slot, of someone else's run, and
of next-sentence prediction before a run."""
from __future__ import annotations

from dataclasses import replace

from bert_demo.app.policy import CPU_STEPS
from bert_demo.app.runs.slot import Busy, Place
from bert_demo.app.state.forms import Caps
from bert_demo.app.tabs import train_views
from bert_demo.app.tabs.train_views import busy_text


def test_a_visitor_in_line_hears_their_number_and_the_time_left_once_it_is_known():
    assert train_views.waiting_text(None, "Starting your run…") == "Starting your run…"  # their turn has come
    assert train_views.waiting_text(Place(1, False, None), "") == "Waiting for the training slot: you are next in line."
    assert train_views.waiting_text(Place(3, True, 600.0), "") == (
        "Waiting for the training slot: you are number 3 in line, after the run training now. The runs ahead of "
        "yours have about 10 min left.")


def test_someone_elses_run_is_told_with_how_long_a_run_started_now_would_wait():
    busy = Busy(fine_tuning=False, step=120, steps=1000, of_experiment=None, waiting=0, seconds_ahead=None,
                max_wait_s=900.0)
    assert busy_text(None) == ""
    assert busy_text(busy) == ("**Busy:** someone else's pre-training run has the training slot now (step 120 "
                                    "of 1,000). A run you start now waits in line for it.")
    later = replace(busy, waiting=2, seconds_ahead=1500.0)
    assert busy_text(later).endswith("and 2 more visitors wait in line. The line takes no more runs for about "
                                          "10 min: nobody is asked to wait more than 15 min.")


def test_the_train_tab_says_what_next_sentence_prediction_will_do_from_measurement_and_why_it_is_drawn_twice():
    tiny = train_views.nsp_expectation("tiny", 1000, 32)
    assert "expect chance (0.5), or little above it** in this run's 32,000 pairs" in tiny and "96,000 pairs" in tiny
    assert "after 125 of its million steps" in tiny and "ALBERT" in tiny and "topic" in tiny
    assert "a slow rise above chance" in train_views.nsp_expectation("mini", 1400, 64)  # 89,600 pairs
    assert "expect chance" in train_views.nsp_expectation("mini", 1000, 32)  # 32,000: mini read 0.52-0.57
    assert "expect chance" in train_views.nsp_expectation("tiny", 20_000, 256)  # tiny never left it
    assert "a slow rise above chance" in train_views.nsp_expectation("small", 1000, 256)  # not measured: 256,000
    assert "not measured at this size" in train_views.nsp_expectation("small", 100, 32)
    assert train_views.nsp_expectation("tiny", "many", 32) == ""


def test_the_limits_line_names_every_setting_the_app_caps_on_this_machine():
    said = train_views.caps_text(Caps("cpu", limits={"mask_prob": 0.5}), "2 CPU cores")
    assert said.startswith(f"Limits on this machine (2 CPU cores): preset tiny or mini, steps at most {CPU_STEPS:,}, "
                           "batch size at most 64, learning rate at most 0.01, sequence length at most 128, vocabulary "
                           "size at most 16,384, masking rate at most 0.5; uploads up to 10 MB.")


def test_a_recipe_that_changes_every_setting_of_the_papers_recipe_is_told_a_row_each_in_words():
    from bert_demo.training.settings import PAPER_RECIPE, TrainConfig

    changed = {"schedule": "triangle", "mask_prob": 0.4, "dropout": 0.2, "adam_eps": 1e-9, "qk_scale": 2.0,
               "mimetic": True, "sinusoid_positions": False,  # as the paper: local heads bring their own code
               "position_scale": 2.0, "local_heads": 1,
               "unigram_bias": True, "nsp_weight": 0.5, "short_seq_steps": 10, "random_b": "same-source",
               "mask_replace": 1.0, "beta2": 0.98}
    assert changed.keys() == PAPER_RECIPE.keys()  # a setting added to the recipe is added here, with its words
    told = train_views.recipe_markdown(TrainConfig(**changed, steps=100))
    assert told.count("\n- ") == len(changed) - 1 and "of the picked, made [MASK]: **100%" in told
