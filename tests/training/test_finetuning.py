"""bert_demo/training/finetuning.py: a short fine-tune learns and writes a folder the text-classification pipeline
loads; a random start is the same architecture with other weights; a frozen start changes only the classifier; the
pooler starts anew only when asked; layer-wise decay gives each depth its own learning rate; the CLI fine-tunes and
classifies, and refuses bad input with a message."""
from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import transformers
from torch.nn import functional as F

import bert_demo.training.finetuning as finetune_module
from bert_demo.__main__ import main
from bert_demo.checkpoint import load_classifier, load_pretrained, read_metadata
from bert_demo.config import PRESETS
from bert_demo.model import BertForSequenceClassification
from bert_demo.training import loop
from bert_demo.training.finetuning import finetuning
from bert_demo.training.recipe import make_optimizer
from bert_demo.training.settings import FinetuneConfig

WORDS = ["river", "garden", "music", "window", "summer", "letter", "station", "forest"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A file whose label a model can read off one word: "wonderful" is positive, "terrible" negative."""
    rows = [{"text": f"the {WORDS[i % 8]} was {'wonderful' if i % 2 else 'terrible'} today.",
             "label": "positive" if i % 2 else "negative"} for i in range(200)]
    path = tmp_path_factory.mktemp("labelled") / "sentiment.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    return path


@pytest.fixture(scope="module")
def pretrained(make_checkpoint, tmp_path_factory, labelled):
    from bert_demo.checkpoint import save_pretrained
    from bert_demo.tokenizer import train_tokenizer

    folder = make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")
    model, _ = load_pretrained(folder)
    texts = [json.loads(line)["text"] for line in labelled.read_text().splitlines()]
    save_pretrained(model.__class__(model.config.with_vocab(300)), train_tokenizer([texts], vocab_size=300,
                                                                                   min_frequency=1), folder)
    return folder


def config(pretrained, labelled, out, **changes) -> FinetuneConfig:
    values = dict(model=str(pretrained), task=str(labelled), out=str(out), steps=40, batch_size=16, lr=3e-3,
                  max_seq_len=32, eval_every=20, log_every=10, outside="none")
    return FinetuneConfig(**{**values, **changes})


def test_a_short_fine_tune_learns_and_writes_a_folder_the_pipeline_loads(pretrained, labelled, tmp_path):
    records = list(finetuning(config(pretrained, labelled, tmp_path / "run")).run())
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"] - 0.2, train
    final = [r for r in records if r["kind"] == "val"][-1]
    assert final["acc"] > 0.9 and final["test_acc"] > 0.9 and records[-1]["reason"] == "finished"
    assert 0.5 <= final["majority"] < 0.8 and 0.5 <= final["test_majority"] < 0.8  # two classes, about even
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "run"))
    assert pipe("the garden was wonderful today.")[0]["label"] == "positive"
    assert read_metadata(tmp_path / "run")["train_config"]["init"] == "pretrained"


def test_scoring_batches_sentences_of_like_length_and_scores_each_as_if_alone():
    torch.manual_seed(0)
    config = replace(PRESETS["tiny"].with_vocab(100), labels=("no", "yes"))
    model = BertForSequenceClassification(config).eval()
    examples = [([2, *torch.randint(5, 100, (3 if i % 2 else 59,)).tolist()], [0] * (4 if i % 2 else 60), i % 3 % 2)
                for i in range(130)]  # short and long sentences in turn
    run = SimpleNamespace(model=model, tokenizer=SimpleNamespace(pad_token_id=0), device=torch.device("cpu"))
    shapes = []
    model.register_forward_pre_hook(lambda module, args: shapes.append(args[0].shape))
    scores = finetune_module._scores(run, examples, "test_", "accuracy")
    computed, tokens = sum(rows * length for rows, length in shapes), sum(len(ids) for ids, _, _ in examples)
    assert computed < 1.1 * tokens  # in the order given, every batch pads to 60 tokens: 1.9 times the sentences
    with torch.no_grad():
        logits = torch.stack([model(torch.tensor([ids]), torch.tensor([segments])).logits[0]
                              for ids, segments, _ in examples])
    labels = torch.tensor([label for _, _, label in examples])
    assert scores["test_loss"] == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-5)
    assert scores["test_acc"] == pytest.approx(float((logits.argmax(-1) == labels).float().mean()))


def test_a_random_start_is_the_same_architecture_with_other_weights(pretrained, labelled, tmp_path):
    tuners = {init: finetuning(config(pretrained, labelled, tmp_path / init, steps=1, init=init))
              for init in ("pretrained", "random")}
    for tuner in tuners.values():
        list(tuner.run())
    ours, theirs = (tuners[i].model.bert.state_dict() for i in ("pretrained", "random"))
    assert ours.keys() == theirs.keys() and all(ours[k].shape == theirs[k].shape for k in ours)
    embeddings = "embeddings.word_embeddings.weight"
    assert not torch.allclose(ours[embeddings], theirs[embeddings], atol=1e-2)


def test_a_frozen_start_trains_only_the_classifier(pretrained, labelled, tmp_path):
    before, _ = load_pretrained(pretrained)
    tuner = finetuning(config(pretrained, labelled, tmp_path / "frozen", steps=5, init="frozen"))
    list(tuner.run())
    after = tuner.model.bert.state_dict()
    assert all(torch.equal(after[k].cpu(), v) for k, v in before.bert.state_dict().items())  # on a GPU too
    fresh = load_classifier(pretrained, labels=("negative", "positive")).model.classifier.weight
    assert fresh.shape == tuner.model.classifier.weight.shape


def test_the_pooler_starts_anew_only_when_asked_and_the_rest_of_the_encoder_stays_pretrained(pretrained, labelled,
                                                                                              tmp_path):
    saved = load_pretrained(pretrained)[0].bert.state_dict()
    for reinit in (False, True):
        tuner = finetuning(config(pretrained, labelled, tmp_path / str(reinit), reinit_pooler=reinit))
        started = finetune_module._classifier(tuner, ("negative", "positive"))[0]
        state = {k: v.cpu() for k, v in started.bert.state_dict().items()}
        pooler = "pooler.dense.weight"
        assert torch.equal(state[pooler], saved[pooler]) is not reinit
        assert all(torch.equal(state[k], v) for k, v in saved.items() if not k.startswith("pooler."))
    with pytest.raises(ValueError, match="frozen encoder keeps its pooler"):
        finetuning(config(pretrained, labelled, tmp_path / "f", reinit_pooler=True, init="frozen"))


def test_layer_decay_gives_each_depth_lr_times_decay_to_the_steps_it_sits_below_the_classifier(pretrained, labelled,
                                                                                               tmp_path):
    model = load_classifier(pretrained, labels=("negative", "positive")).model
    layers, lr, decay = model.config.num_hidden_layers, 1e-3, 0.5
    optimizer = make_optimizer(model, config(pretrained, labelled, tmp_path, lr=lr, layer_decay=decay))
    rate = {id(p): (g["lr"], g["weight_decay"]) for g in optimizer.param_groups for p in g["params"]}
    for name, param in model.named_parameters():
        if name.startswith("bert.encoder.layer."):
            expected = lr * decay ** (layers - int(name.split(".")[3]))
        else:
            expected = lr * decay ** (layers + 1) if name.startswith("bert.embeddings.") else lr
        assert rate[id(param)] == pytest.approx((expected, 0.01 if param.dim() >= 2 else 0.0)), name
    assert optimizer.param_groups[0]["lr"] == lr  # the group whose rate the run logs is the heads'
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)  # the schedule scales every group's own peak
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([g["initial_lr"] / 2 for g in
                                                                      optimizer.param_groups])
    plain = make_optimizer(model, config(pretrained, labelled, tmp_path, lr=lr))
    assert [g["lr"] for g in plain.param_groups] == [lr, lr]


def test_the_run_trains_on_exactly_the_first_n_labelled_examples(pretrained, labelled, tmp_path, monkeypatch):
    from bert_demo.data.labelled import load_file
    from bert_demo.tokenizer import load_tokenizer

    batched, length_grouped = [], finetune_module._length_grouped
    monkeypatch.setattr(finetune_module, "_length_grouped",
                        lambda examples, *rest: batched.append(examples) or length_grouped(examples, *rest))
    records = list(finetuning(config(pretrained, labelled, tmp_path / "n", steps=1, train_examples=30)).run())
    assert any("fine-tuning on 30 labelled examples" in r.get("message", "") for r in records)
    train = load_file(labelled)["train"]
    tokenizer = load_tokenizer(pretrained)
    first_30 = [(tokenizer(text)["input_ids"], label) for text, label in zip(train["text"][:30], train["label"][:30])]
    assert [(ids, label) for ids, _, label in batched[0]] == first_30


def test_the_cli_fine_tunes_classifies_and_refuses_bad_input_with_a_message(pretrained, labelled, tmp_path,
                                                                            capsys):
    assert main(["finetune", "--model", str(pretrained), "--task", str(labelled), "--out", str(tmp_path / "cli"),
                 "--steps", "30", "--lr", "1e-3", "--outside", "none", "--eval-every", "30"]) == 0
    assert main(["classify", str(tmp_path / "cli"), "the river was terrible today."]) == 0
    assert "negative: 0." in capsys.readouterr().out
    assert main(["finetune", "--model", str(pretrained), "--task", "imdb", "--out", str(tmp_path / "x")]) == 2
    assert "error: unknown task 'imdb'" in capsys.readouterr().err
    assert main(["classify", str(pretrained), "a sentence."]) == 2
    assert "has no classifier: fine-tune it on a task first" in capsys.readouterr().err


def test_a_stopped_fine_tune_resumes_where_it_stopped_with_its_schedule_batches_and_classes(pretrained, labelled,
                                                                                             tmp_path, capsys,
                                                                                             monkeypatch):
    seen = []  # each step's batch, by the sum of its token ids
    backward = loop.backward
    monkeypatch.setattr(loop, "backward", lambda forward, batch, *args, **kwargs:
                        seen.append(int(batch["input_ids"].sum())) or backward(forward, batch, *args, **kwargs))
    whole = [r for r in finetuning(config(pretrained, labelled, tmp_path / "whole")).run() if r["kind"] == "train"]
    whole_batches, seen[:] = list(seen), []
    out = tmp_path / "stopped"
    first = finetuning(config(pretrained, labelled, out))
    for record in first.run():
        if record["kind"] == "train" and record["step"] == 20:
            first.stop()
    assert read_metadata(out)["step"] == 20 and (out / "optimizer.safetensors").is_file()
    assert main(["finetune", "--resume", str(out)]) == 0  # the stored settings: model, task, 40 steps
    printed = capsys.readouterr().out
    assert "from step 20" in printed and "finished at step 40" in printed
    history = [r for r in read_metadata(out)["history"] if r["kind"] == "train"]
    assert [r["step"] for r in history] == [10, 20, 30, 40]
    assert history[2]["lr"] == pytest.approx(whole[2]["lr"])  # the schedule carries on, it does not restart
    assert seen == whole_batches  # steps 1-20, then 21-40 after the resume: the batches next due, not the first
    assert load_classifier(out).model.config.labels == ("negative", "positive")
    assert main(["finetune", "--resume", str(out), "--layer-decay", "0.8", "--seed", "3"]) == 2  # its state would
    assert "leave out --layer-decay, --seed" in capsys.readouterr().err                          # not fit
