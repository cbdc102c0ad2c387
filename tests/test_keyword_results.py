"""Wide results and settings are built by keyword only (issue 81): a call that hands their fields by position, where
two of a type (β1 and β2, a rank and a local rank, the weights dropped and the weights new) could be swapped and
still pass, is refused before it runs."""
from __future__ import annotations

import dataclasses

import pytest

from bert_demo.config import BertConfig
from bert_demo.data.collator import Example, SpecialIds
from bert_demo.data.pairs import Origin
from bert_demo.inspection import (across_training, attribution, batch_step, by_hand, depth, forward_steps, heads,
                                  over_time, pretraining_example, training_step)
from bert_demo.model import BertPreTrainingOutput, SequenceClassifierOutput
from bert_demo.training.loop import Training
from bert_demo.training.runtime import Distributed
from bert_demo.training.settings import FinetuneConfig, RunConfig, TrainConfig

BY_KEYWORD = [
    training_step.Guess, training_step.Beliefs, training_step.Worked, training_step.PartMoves, training_step.Moves,
    training_step.Gradients, training_step.TrainingStep, training_step.Gain,
    forward_steps.Step, forward_steps.Pass,
    batch_step.InBatch, batch_step.WeightParts, batch_step.Dropout, batch_step.Accumulation, batch_step.BatchStep,
    by_hand.LinearByHand, by_hand.SoftmaxByHand, by_hand.LayerNormByHand, by_hand.ByHand,
    over_time.Trace, over_time.OverTime, Training,
    across_training.Moment, across_training.Depth, depth.Depth, attribution.Attribution, heads.QueryKey,
    pretraining_example.Documents, pretraining_example.Segment, pretraining_example.PretrainingExample,
    pretraining_example.Shares, pretraining_example.ExampleLoss,
    Origin, Example, SpecialIds, BertPreTrainingOutput, SequenceClassifierOutput, BertConfig, Distributed,
    RunConfig, TrainConfig, FinetuneConfig,
]


@pytest.mark.parametrize("result", BY_KEYWORD, ids=lambda result: f"{result.__module__}.{result.__qualname__}")
def test_a_wide_result_refuses_its_fields_by_position(result):
    fields = dataclasses.fields(result)
    with pytest.raises(TypeError, match="positional argument"):
        result(*[None] * len(fields))
