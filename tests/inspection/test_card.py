"""The model card: measured from the checkpoint (metrics through ours and transformers, plain sentences), with a
learning curve drawn as an SVG by our own code."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from bert_demo.inspection.card import (
    CURVE_NAME,
    PLAIN_SENTENCES,
    command,
    continued_from,
    curve_title,
    how_long,
    knowledge,
    learning_curve_svg,
    weights_dtype,
    write_card,
)
from bert_demo.training.pretraining import pretraining
from bert_demo.training.runtime import describe_hardware, resolve_precision
from bert_demo.training.settings import TrainConfig

SVG = "{http://www.w3.org/2000/svg}"
ROOT = Path(__file__).resolve().parents[2]


def test_the_learning_curve_is_an_svg_with_one_point_per_validation():
    history = [{"kind": "val", "step": s, "tokens": 4096 * s, "mlm_acc": 0.01 * s} for s in (10, 100, 1000)]
    history.insert(1, {"kind": "train", "step": 50, "tokens": 4096 * 50, "mlm_acc": 0.9})  # not drawn
    root = ET.fromstring(learning_curve_svg(history, "a <title> & more"))
    points = root.find(f"{SVG}polyline").get("points").split()
    assert len(points) == 3
    ys = [float(p.split(",")[1]) for p in points]
    assert ys[0] > ys[1] > ys[2]  # accuracy rises, so the line climbs (SVG's y grows downwards)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "a <title> & more" in texts and "tokens seen" in texts and "10M" in texts
    with pytest.raises(ValueError, match="no validation records"):
        learning_curve_svg([history[1]], "t")


def test_a_continued_models_curve_says_it_starts_where_its_start_left_off():
    assert curve_title("v3", {"init_from": "runs/v3-stage1"}) == ("v3: learning curve, continuing v3-stage1 (tokens "
                                                                   "seen since)")
    assert curve_title("mini", {"preset": "mini"}) == "mini: learning curve"


def test_a_plain_sentence_counts_as_known_only_with_a_fitting_word_in_the_top_3(trained_tiny, tokenizer):
    rows = knowledge(trained_tiny, tokenizer)
    assert [row["text"] for row in rows] == [text for text, _ in PLAIN_SENTENCES]
    for row, (_, fitting) in zip(rows, PLAIN_SENTENCES):
        assert len(row["guesses"]) == 3
        assert row["knows"] == any(token in fitting for token, _ in row["guesses"])


def test_the_card_reports_held_out_and_never_seen_text_through_ours_and_transformers(write_corpus, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    config = TrainConfig(preset="tiny", corpus=str(corpus), steps=20, batch_size=4, seq_len=32, vocab_size=300,
                         out=str(tmp_path / "run"), eval_every=10)
    list(pretraining(config).run())
    card = write_card(tmp_path / "run", outside=["lee"], batches=2).read_text()  # its own corpus by default
    assert f"| {corpus} (held out) |" in card and "| lee (never seen) |" in card
    assert card.count("| yes |") == 2  # ours and transformers agree on both
    assert "python -m bert_demo train --preset tiny" in card and f"![learning curve]({CURVE_NAME})" in card
    cpu = torch.device("cpu")  # auto is bf16 where this CPU computes it natively, fp32 where it emulates it
    assert f"on {describe_hardware(cpu)}, computing in {resolve_precision('auto', cpu)}; the weights are fp32) with " \
           "one command" in card
    assert (tmp_path / "run" / CURVE_NAME).read_text().startswith("<svg")
    assert "trained on far less text than BERT read (3.3 billion words)" in card  # not "a few million words"


def test_the_readmes_headline_figures_are_the_shipped_cards_and_each_says_whose_it_is():
    """The README's "0.846 next-sentence accuracy (0.893)" did not say that the bracketed figure was mini-english's,
    nor agree with the card's."""
    readme = (ROOT / "README.md").read_text()
    bullet = readme[readme.index("- **The shipped model**"):].split("\n- ")[0]
    news = {model: re.search(r"\| news \(held out\) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|",
                             (ROOT / "checkpoints" / model / "README.md").read_text()).groups()
            for model in ("small-english", "mini-english")}
    (mlm, nsp), (mini_mlm, mini_nsp) = news["small-english"], news["mini-english"]
    assert "on held-out news" in bullet and f"{mlm} masked-word accuracy (`mini-english`" in bullet
    assert f"{nsp} next-sentence accuracy (`mini-english`: {mini_nsp})" in bullet
    assert re.search(rf"\(`mini-english`[^()]*: {mini_mlm}\)", bullet) and "(42%)" not in bullet


def test_the_command_is_the_one_that_ran_including_a_continued_runs_start_and_changed_settings(tmp_path):
    fresh = {"preset": "mini", "corpus": "news", "steps": 100, "batch_size": 32, "seq_len": 128, "vocab_size": 8192,
             "lr": TrainConfig().lr, "out": "/somewhere", "eval_every": 7}
    assert command(fresh, "m") == ("python -m bert_demo train --preset mini --corpus news --steps 100 "
                                   "--batch-size 32 --seq-len 128 --vocab-size 8192 --out checkpoints/m")
    # the defaults and where it ran are left out
    continued = {**fresh, "preset": "tiny", "init_from": str(tmp_path / "gone"), "lr": 5e-4, "warmup_steps": 1000}
    line = command(continued, "m")
    assert "--preset" not in line and "--vocab-size" not in line  # the model it continues decides them
    assert "--lr 0.0005 --init-from checkpoints/gone --warmup-steps 1000" in line
    assert "no longer here" in continued_from(continued)[0] and continued_from(fresh) == []


def test_a_run_on_a_time_budget_shows_the_steps_its_time_held_and_bf16_weights_are_said_to_be_bf16(tmp_path):
    from safetensors.torch import save_file

    budget = {"preset": "small", "corpus": "v4", "steps": 16068, "batch_size": 256, "seq_len": 128,
              "vocab_size": 16384, "minutes": 2.45, "data_workers": 8}
    assert command(budget, "s") == ("python -m bert_demo train --preset small --corpus v4 --steps 16068 "
                                    "--batch-size 256 --seq-len 128 --vocab-size 16384 --out checkpoints/s")
    for dtype, said in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        save_file({"w": torch.zeros(2, dtype=dtype)}, str(tmp_path / "model.safetensors"))
        assert weights_dtype(tmp_path) == said
    assert how_long({"step": 5, "elapsed": 492, "precision": "bf16"}, "bf16").endswith(
        "computing in bf16; the weights are bf16)")


def test_a_continued_models_card_names_every_earlier_stage_with_its_command(tmp_path):
    import json

    def saved(name, config):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "bert_demo.json").write_text(json.dumps({"train_config": config, "step": 10,
                                                                     "elapsed": 60.0, "precision": "fp32"}))
        return str(tmp_path / name)

    first = saved("first", {"preset": "mini", "corpus": "news", "steps": 10})
    second = saved("second", {"corpus": "v3", "steps": 20, "init_from": first})
    text = continued_from({"corpus": "everyday", "init_from": second})[0]
    assert text.startswith("It continues `checkpoints/second`, trained by this project's code on `v3`")
    assert "stopped at step 10 of 20" in text and "stopped at step 10 of 10" not in text
    assert "That continues `checkpoints/first`, trained by this project's code on `news` for 10 steps" in text
    assert "--init-from" in text and "python -m bert_demo train --preset mini --corpus news --steps 10" in text
