"""Fine-tuning's model (Devlin et al. 2019, §4.1): BertForSequenceClassification gives the numbers of transformers'
class of that name in both directions, its folders work in `pipeline("text-classification")` with the same labels
and probabilities, and a pre-trained checkpoint starts one with its heads dropped and a new classifier."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import transformers

from bert_demo.checkpoint import load_checkpoint, load_classifier, save_pretrained
from bert_demo.config import PRESETS, BertConfig
from bert_demo.inference import classify
from bert_demo.model import BertForPreTraining, BertForSequenceClassification

LABELS = ("negative", "positive")
PAIRS = [("the film was a delight from start to finish.", None), ("the sun rises in the east.", "it sets in the west."),
         ("paris is the capital of france.", None)]


def config_for(tokenizer, labels=LABELS) -> BertConfig:
    return replace(PRESETS["tiny"].with_vocab(len(tokenizer)), labels=labels)


def batch_of(tokenizer):
    return tokenizer([a for a, _ in PAIRS], [b or "" for _, b in PAIRS], padding=True, return_tensors="pt")


def test_ours_saved_loads_in_transformers_with_the_same_logits_and_class_names(tokenizer, tmp_path):
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config_for(tokenizer)).eval()
    save_pretrained(ours, tokenizer, tmp_path / "clf")
    theirs = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "clf").eval()
    assert theirs.config.id2label == {0: "negative", 1: "positive"} and theirs.config.num_labels == 2
    batch = batch_of(tokenizer)
    with torch.no_grad():
        ours_logits = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
        theirs_logits = theirs(**batch).logits
    assert (ours_logits - theirs_logits).abs().max() < 1e-5


def test_a_transformers_classifier_loads_here_with_the_same_logits_and_classes(tokenizer, tmp_path):
    torch.manual_seed(1)
    hf_config = transformers.BertConfig(**PRESETS["tiny"].with_vocab(len(tokenizer)).to_hf_dict(),
                                        id2label={0: "no", 1: "maybe", 2: "yes"})
    theirs = transformers.BertForSequenceClassification(hf_config).eval()
    theirs.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    ours = load_classifier(tmp_path / "hf")
    assert ours.model.config.labels == ("no", "maybe", "yes") and ours.new == [] and ours.dropped == []
    batch = batch_of(tokenizer)
    with torch.no_grad():
        assert (ours.model(**batch).logits - theirs(**batch).logits).abs().max() < 1e-5


def test_our_probabilities_and_labels_equal_the_text_classification_pipelines(tokenizer, tmp_path):
    torch.manual_seed(2)
    model = BertForSequenceClassification(config_for(tokenizer))
    torch.nn.init.normal_(model.classifier.weight, std=0.5)  # probabilities far from one half
    save_pretrained(model, tokenizer, tmp_path / "clf")
    loaded = load_classifier(tmp_path / "clf")
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "clf"), top_k=None)
    for text_a, text_b in PAIRS:
        ours = dict(classify(loaded.model, loaded.tokenizer, text_a, text_b))
        answer = pipe({"text": text_a, "text_pair": text_b} if text_b else text_a)
        theirs = {r["label"]: r["score"] for r in (answer[0] if isinstance(answer[0], list) else answer)}
        assert ours.keys() == theirs.keys() == set(LABELS)
        assert max(abs(ours[label] - theirs[label]) for label in LABELS) < 1e-5
    assert 0.1 < abs(ours["positive"] - 0.5)  # not a trivial one half


def test_a_pretrained_checkpoint_starts_a_classifier_with_its_encoder_and_reports_the_dropped_heads(tokenizer,
                                                                                                   tmp_path):
    torch.manual_seed(3)
    pretrained = BertForPreTraining(PRESETS["tiny"].with_vocab(len(tokenizer)))
    save_pretrained(pretrained, tokenizer, tmp_path / "pre")
    loaded = load_classifier(tmp_path / "pre", labels=LABELS)
    assert loaded.new == ["classifier.bias", "classifier.weight"]
    assert "cls.seq_relationship.weight" in loaded.dropped and "cls.predictions.bias" in loaded.dropped
    ours, theirs = loaded.model.bert.state_dict(), pretrained.bert.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with pytest.raises(ValueError, match="has no classifier: fine-tune it on a task first"):
        load_classifier(tmp_path / "pre")


def test_new_classes_start_a_new_output_layer_and_a_classifier_refuses_to_pretend_it_has_an_mlm_head(tokenizer,
                                                                                                  tmp_path):
    save_pretrained(BertForSequenceClassification(config_for(tokenizer)), tokenizer, tmp_path / "clf")
    relabelled = load_classifier(tmp_path / "clf", labels=("a", "b", "c"))
    assert relabelled.dropped == ["classifier.bias", "classifier.weight"]
    assert relabelled.model.classifier.out_features == 3
    with pytest.raises(ValueError, match="is a fine-tuned classifier \\(negative, positive\\): it has no masked-LM"):
        load_checkpoint(tmp_path / "clf")
    pretrained = BertForPreTraining(PRESETS["tiny"].with_vocab(len(tokenizer)))
    with pytest.raises(ValueError, match="this model has no classifier"):
        classify(pretrained, tokenizer, "a sentence.")


@pytest.mark.parametrize("labels, message", [
    (("only",), "between 2 and 20 classes, got 1"),
    (tuple(f"class {i}" for i in range(21)), "between 2 and 20 classes, got 21"),
    (("same", "same"), "class names must be different"),
    (("", "empty"), "1 to 100 characters long"),
])
def test_class_lists_a_classifier_cannot_have_are_refused_with_the_rule(labels, message):
    with pytest.raises(ValueError, match=message):
        replace(PRESETS["tiny"], labels=labels)


def test_a_config_json_with_broken_class_names_is_refused(tokenizer, tmp_path):
    save_pretrained(BertForSequenceClassification(config_for(tokenizer)), tokenizer, tmp_path / "clf")
    config = json.loads((tmp_path / "clf" / "config.json").read_text())
    config["id2label"] = {"0": "a", "5": "b"}
    (tmp_path / "clf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="keyed by the class indices 0, 1"):
        load_classifier(tmp_path / "clf")
