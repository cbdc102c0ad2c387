"""benchmarks/finetune.py's summary: each start chosen by validation alone, and each pre-trained model measured
against random weights of its own shape."""
from __future__ import annotations

import pytest

from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def finetune():
    return benchmark_script("finetune")


def rows(model: str, init: str, test_acc: float) -> list[dict]:
    return [{"init": init, "model": model, "labels": "all", "lr": 1e-4, "epochs": 3.0, "steps": 100, "seed": seed,
             "val_acc": test_acc, "test_acc": test_acc + 0.01 * seed, "outside_acc": test_acc, "seconds": 1.0}
            for seed in range(2)]


def test_random_starts_of_two_shapes_stay_apart_and_each_model_is_measured_against_its_own(finetune, capsys):
    small = "checkpoints/small-english"
    chosen = finetune.summarise(rows(finetune.DEFAULT_MODEL, "pretrained", 0.78) + rows(finetune.DEFAULT_MODEL,
                                "random", 0.70) + rows(small, "pretrained", 0.80) + rows(small, "random", 0.76))
    assert chosen[(f"random ({small}'s shape)", "all")]["seeds"] == 2  # not merged with the default's random start
    assert chosen[("random", "all")]["seeds"] == 2
    gaps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gap")]
    assert len(gaps) == 2
    assert any(f"({small})" in line and "test +4.0 points" in line for line in gaps), gaps
    assert any("gap pretrained - random" in line and "test +8.0 points" in line for line in gaps), gaps
