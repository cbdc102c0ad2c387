"""The inspection tests' shared fixture: a tiny model with random weights of TEST_SHAPE's kind (every size different,
so that a swapped axis fails), a tokenizer and paragraphs to draw pre-training examples from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from bert_demo.config import BertConfig
from bert_demo.inspection import pretraining_example
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import train_tokenizer
from bert_demo.training.settings import TrainConfig
from tests.references import random_weights

PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))


@dataclass(frozen=True)
class Lesson:
    model: BertForPreTraining
    tokenizer: Any
    documents: pretraining_example.Documents
    recipe: TrainConfig


@pytest.fixture(scope="session")
def lesson() -> Lesson:
    """Random weights (LayerNorms and biases too, so that no gradient is zero by symmetry), eval mode."""
    documents = pretraining_example.typed_documents(PARAGRAPHS)
    tokenizer = train_tokenizer(documents.documents, vocab_size=256, min_frequency=1)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=80)
    model = random_weights(config)
    recipe = TrainConfig(seq_len=64, vocab_size=256, nsp_weight=0.5, lr=1e-3, weight_decay=0.01, grad_clip=1.0)
    return Lesson(model, tokenizer, documents, recipe)
