"""Shared fixtures: a small tokenizer and a tiny BERT trained for a few seconds on a handful of sentences."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bert_demo.config import PRESETS
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import train_tokenizer

SENTENCES = [
    "the cat sat on the mat.",
    "the dog sat on the rug.",
    "paris is the capital of france.",
    "berlin is the capital of germany.",
    "the sun rises in the east.",
    "the sun sets in the west.",
    "water boils at one hundred degrees.",
    "albert einstein developed the theory of relativity.",
]


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer([SENTENCES] * 20, vocab_size=200, min_frequency=1)


@pytest.fixture(scope="session")
def trained_tiny(tokenizer):
    """A tiny BERT that has memorised SENTENCES with one masked word each (a few seconds on 2 cores)."""
    torch.manual_seed(0)
    config = replace(PRESETS["tiny"].with_vocab(len(tokenizer)), hidden_dropout_prob=0.0)
    model = BertForPreTraining(config)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    special = torch.tensor(tokenizer.all_special_ids)
    for _ in range(300):
        ids = batch["input_ids"].clone()
        candidates = ~torch.isin(ids, special)
        scores = torch.rand(ids.shape).masked_fill(~candidates, -1)
        position = scores.argmax(dim=1, keepdim=True)  # one random word per sentence
        labels = torch.full_like(ids, -100).scatter(1, position, ids.gather(1, position))
        ids.scatter_(1, position, tokenizer.mask_token_id)
        loss = model(ids, batch["token_type_ids"], batch["attention_mask"], mlm_labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
