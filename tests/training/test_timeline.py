"""A run's timeline: snapshots at growing intervals, written atomically with each save, kept across saves and
resumes, within a disk budget; and the app showing a model as it was at one of them."""
from __future__ import annotations

import json

import pytest
import torch

from bert_demo.app import header
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import attention, fill
from bert_demo.config import PRESETS
from bert_demo.model import BertForPreTraining
from bert_demo.training import timeline
from bert_demo.training.pretraining import pretraining
from bert_demo.training.settings import TrainConfig


@pytest.fixture(scope="module")
def corpus(write_corpus, tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("timeline") / "corpus.txt")


def config(corpus, out, **changes) -> TrainConfig:
    values = dict(preset="tiny", corpus=str(corpus), steps=120, batch_size=4, seq_len=32, vocab_size=300,
                  out=str(out), save_every=50, eval_every=60, log_every=20, eval_batches=1)
    return TrainConfig(**{**values, **changes})


def test_snapshots_are_taken_at_growing_intervals_below_the_last_step():
    assert timeline.snapshot_steps(1000) == [0, 10, 30, 100, 300]
    assert timeline.snapshot_steps(40_000) == [0, 10, 30, 100, 300, 1000, 3000, 10_000, 30_000]
    assert timeline.snapshot_steps(1) == [0]


def test_a_run_keeps_its_snapshots_across_saves_and_each_holds_the_weights_of_its_step(corpus, tmp_path):
    trainer, at_30 = pretraining(config(corpus, tmp_path / "run", log_every=10)), None
    for record in trainer.run():
        if record["kind"] == "train" and record["step"] == 30:
            at_30 = {name: t.detach().clone() for name, t in trainer.model.state_dict().items()}
    assert record["reason"] == "finished"
    assert timeline.steps(tmp_path / "run") == [0, 10, 30, 100]  # 0-30 written at step 50, 100 at step 100
    snapshot = timeline.load(tmp_path / "run", 30)
    assert snapshot and set(snapshot) <= set(at_30)
    for name, tensor in snapshot.items():
        torch.testing.assert_close(tensor, at_30[name], atol=1e-3, rtol=1e-3)  # half precision


def test_a_resumed_run_adds_to_the_timeline_it_had(corpus, tmp_path):
    first = list(pretraining(config(corpus, tmp_path / "run", steps=60)).run())[-1]
    assert timeline.steps(first["checkpoint"]) == [0, 10, 30]
    list(pretraining(config(corpus, tmp_path / "run", steps=120), resume=first["checkpoint"]).run())
    assert timeline.steps(tmp_path / "run") == [0, 10, 30, 100]  # 100 its own, the others kept


def test_snapshots_past_the_disk_budget_are_skipped_with_a_message(corpus, tmp_path, monkeypatch):
    one = timeline.size(timeline.snapshot(BertForPreTraining(PRESETS["tiny"].with_vocab(300))))  # at most this
    monkeypatch.setattr(timeline, "BUDGET_BYTES", int(2.5 * one))
    records = list(pretraining(config(corpus, tmp_path / "run")).run())
    assert timeline.steps(tmp_path / "run") == [0, 10]
    assert any("no timeline snapshot at step 30" in r.get("message", "") for r in records if r["kind"] == "status")


def test_an_unknown_snapshot_step_is_refused_with_the_steps_there_are(corpus, tmp_path):
    list(pretraining(config(corpus, tmp_path / "run", steps=40)).run())
    with pytest.raises(ValueError, match="no snapshot at step 20: it has 0, 10, 30"):
        timeline.load(tmp_path / "run", 20)


def test_the_app_shows_a_run_at_any_snapshot_and_compares_two_steps(corpus, tmp_path):
    list(pretraining(config(corpus, tmp_path / "runs" / "a-run")).run())
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    chosen = header.selected(registry, "runs/a-run", 1, 1)
    assert chosen["step"].constructor_args["visible"] is True
    assert [value for _, value in chosen["step"].constructor_args["choices"]] == ["final", "0", "10", "30", "100"]
    at_start = registry.catalog.load_at("runs/a-run", 0).model
    final = registry.catalog.load_at("runs/a-run", None).model
    start_table = at_start.bert.embeddings.word_embeddings.weight
    assert not torch.equal(start_table, final.bert.embeddings.word_embeddings.weight)
    assert at_start.cls.predictions.decoder.weight is start_table  # still tied
    early = fill.fill_mask(registry, "runs/a-run", sentence="the [MASK] sat on the mat.", top_k=3, heads_off=[],
                           snapshot="0")
    late = fill.fill_mask(registry, "runs/a-run", sentence="the [MASK] sat on the mat.", top_k=3, heads_off=[],
                          snapshot="final")
    assert early["mask_label_0"] != late["mask_label_0"]
    both = attention.attention(registry, "runs/a-run", text_a="the cat sat.", text_b="", layer=1, head=1,
                               view=attention.VIEW_HEAD, hide=False, pair=attention.PAIR_ALL,
                               snapshot="final", compare="0")
    assert both["compare_plot"].visible and "Step 0" in json.loads(both["compare_plot"].value["plot"])["layout"][
        "title"]["text"]
    with pytest.raises(Exception, match="(?i)unknown training step 'soon'"):
        fill.fill_mask(registry, "runs/a-run", sentence="the [MASK] sat.", top_k=3, heads_off=[], snapshot="soon")


def test_a_new_run_over_an_old_folder_starts_its_own_timeline(corpus, tmp_path):
    list(pretraining(config(corpus, tmp_path / "run")).run())
    assert 100 in timeline.steps(tmp_path / "run")
    list(pretraining(config(corpus, tmp_path / "run", steps=40, seed=1)).run())  # not a resume: a new run
    assert timeline.steps(tmp_path / "run") == [0, 10, 30]


def test_a_run_probes_before_its_first_step_and_a_finished_run_its_last_step_once(corpus, tmp_path):
    records = list(pretraining(config(corpus, tmp_path / "run", steps=70, eval_every=60)).run())
    assert [r["step"] for r in records if r["kind"] == "probe"] == [0, 60, 70]
    assert [r["step"] for r in records if r["kind"] == "readout"] == [60, 70]


def test_a_snapshot_loads_whole_into_its_model_and_one_missing_a_weight_is_refused(tmp_path):
    from safetensors.torch import save_file

    from bert_demo.checkpoint import TIED_KEYS

    torch.manual_seed(0)
    model, other = BertForPreTraining(PRESETS["tiny"]), BertForPreTraining(PRESETS["tiny"])
    (tmp_path / timeline.FOLDER).mkdir()
    state = timeline.snapshot(model, skip=frozenset(TIED_KEYS))
    save_file(state, str(tmp_path / timeline.file_name(0)))
    timeline.load_into(other, tmp_path, 0)
    assert all(torch.equal(other.state_dict()[name], tensor.float()) for name, tensor in state.items())
    assert torch.equal(other.cls.predictions.decoder.weight, other.bert.embeddings.word_embeddings.weight)  # tied
    save_file({k: v for k, v in state.items() if k != "bert.pooler.dense.bias"}, str(tmp_path / timeline.file_name(10)))
    with pytest.raises(ValueError, match="pooler.dense.bias"):
        timeline.load_into(other, tmp_path, 10)
