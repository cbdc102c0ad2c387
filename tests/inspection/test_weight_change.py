"""bert_demo/inspection/weight_change.py: each part's relative change is the norm of its difference over the norm of its
start, the parts run bottom to top, and the heads one model lacks are left out."""
from __future__ import annotations

import pytest
import torch

from bert_demo.inspection.weight_change import part_of, relative_change


def test_weights_belong_to_their_part_and_the_heads_to_none():
    assert part_of("bert.embeddings.word_embeddings.weight") == "embeddings"
    assert part_of("bert.encoder.layer.0.attention.self.query.weight") == "layer 1"
    assert part_of("bert.encoder.layer.11.output.dense.bias") == "layer 12"
    assert part_of("bert.pooler.dense.weight") == "pooler"
    assert part_of("classifier.weight") is None and part_of("cls.predictions.bias") is None


def test_the_change_is_the_norm_of_the_difference_over_the_norm_of_the_start_per_part_bottom_to_top():
    before = {"bert.pooler.dense.weight": torch.ones(2, 2),
              "bert.encoder.layer.1.output.dense.weight": torch.ones(4),
              "bert.encoder.layer.0.output.dense.weight": torch.full((3,), 2.0),
              "bert.encoder.layer.0.output.dense.bias": torch.zeros(1),
              "bert.embeddings.word_embeddings.weight": torch.ones(5),
              "cls.predictions.bias": torch.ones(3)}
    after = {key: value.clone() for key, value in before.items() if not key.startswith("cls.")}
    after["bert.encoder.layer.1.output.dense.weight"] += torch.tensor([1.0, 1.0, 1.0, 1.0])  # |d| = 2, |w| = 2
    after["bert.encoder.layer.0.output.dense.bias"] += 3.0  # |d| = 3 over |w| = sqrt(12) with the weight beside it
    after["classifier.weight"] = torch.ones(2, 4)
    change = relative_change(before, after)
    assert [part for part, _ in change] == ["embeddings", "layer 1", "layer 2", "pooler"]
    values = dict(change)
    assert values["embeddings"] == 0.0 and values["pooler"] == 0.0
    assert values["layer 2"] == pytest.approx(1.0)
    assert values["layer 1"] == pytest.approx(3 / 12 ** 0.5)


def test_two_models_without_a_shared_encoder_weight_are_refused():
    with pytest.raises(ValueError, match="not one architecture"):
        relative_change({"bert.pooler.dense.weight": torch.ones(2, 2)}, {"bert.pooler.dense.weight": torch.ones(3)})
