"""Checkpoints move between this project and `transformers` both ways, atomically, and never via pickle."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
from safetensors import SafetensorError

from bert_demo.checkpoint import (
    HUB_TIMEOUT_S,
    MissingWeightsWarning,
    download,
    load_checkpoint,
    load_pretrained,
    read_metadata,
    recover_folder,
    recover_leftovers,
    save_pretrained,
    stored_weights,
    write_weights,
)
from bert_demo.config import INDEX_NAME, PRESETS
from bert_demo.inference import fill_mask
from bert_demo.model import BertForPreTraining
from tests.conftest import SENTENCES

ROOT = Path(__file__).resolve().parents[1]


def sample_batch(tokenizer):
    return tokenizer(SENTENCES[:3], SENTENCES[3:6], padding=True, return_tensors="pt")


def test_saved_folder_loads_in_transformers_with_same_logits(trained_tiny, tokenizer, tmp_path):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny", metadata={"steps": 150})
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "bert_demo.json"} <= set(
        os.listdir(tmp_path / "tiny"))
    theirs = transformers.BertForPreTraining.from_pretrained(tmp_path / "tiny").eval()
    batch = sample_batch(tokenizer)
    with torch.no_grad():
        a, b = trained_tiny(**batch), theirs(**batch)
    assert torch.allclose(a.mlm_logits, b.prediction_logits, atol=1e-5)
    assert torch.allclose(a.nsp_logits, b.seq_relationship_logits, atol=1e-5)
    assert read_metadata(tmp_path / "tiny") == {"steps": 150}


def test_weights_kept_in_bf16_load_as_fp32_in_both_and_give_the_same_logits(trained_tiny, tokenizer, tmp_path):
    """A checkpoint sent back from a GPU keeps its weights in bf16 (half the bytes); both sides compute in fp32."""
    from safetensors.torch import load_file, save_file

    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k: v.bfloat16() for k, v in weights.items()}, str(folder / "model.safetensors"))
    ours, _ = load_pretrained(folder)
    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    assert theirs.dtype == torch.float32 == next(ours.parameters()).dtype
    batch = sample_batch(tokenizer)
    with torch.no_grad():
        a, b = ours(**batch), theirs(**batch)
    assert torch.allclose(a.mlm_logits, b.prediction_logits, atol=1e-5)


def test_vocabulary_size_survives_the_round_trip(trained_tiny, tokenizer, tmp_path):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "tiny")
    _, our_tokenizer = load_pretrained(tmp_path / "tiny")
    assert len(hf_tokenizer) == len(our_tokenizer) == len(tokenizer) == trained_tiny.config.vocab_size
    vocab_txt = (tmp_path / "tiny" / "vocab.txt").read_text().splitlines()
    assert len(vocab_txt) == len(tokenizer) and vocab_txt[0] == "[PAD]"


def test_fill_mask_pipeline_agrees_with_ours_on_top5(trained_tiny, tokenizer, tmp_path):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    pipe = transformers.pipeline("fill-mask", model=str(tmp_path / "tiny"), top_k=5)
    model, tok = load_pretrained(tmp_path / "tiny")
    for text in ["paris is the [MASK] of france.", "the [MASK] sat on the mat.", "the sun sets in the [MASK]."]:
        theirs = pipe(text)
        ours = fill_mask(model, tok, text, top_k=5)[0]
        assert [t for t, _ in ours] == [p["token_str"].replace(" ", "") for p in theirs]
        assert [p for _, p in ours] == pytest.approx([p["score"] for p in theirs], abs=1e-5)
    assert fill_mask(model, tok, "paris is the [MASK] of france.")[0][0][0] == "capital"


@pytest.mark.parametrize("hf_class", [transformers.BertForPreTraining, transformers.BertForMaskedLM,
                                      transformers.BertModel])
def test_folders_written_by_transformers_load_with_same_numbers(hf_class, tokenizer, tmp_path):
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**PRESETS["tiny"].with_vocab(len(tokenizer)).to_hf_dict())
    theirs = hf_class(hf_config).eval()
    theirs.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    if hf_class is transformers.BertForPreTraining:
        ours, _, missing = load_checkpoint(tmp_path / "hf")
        assert missing == []
    else:
        with pytest.warns(MissingWeightsWarning, match="randomly initialised"):
            ours, _, missing = load_checkpoint(tmp_path / "hf")
        assert any(k.startswith("cls.") for k in missing)
    batch = sample_batch(tokenizer)
    with torch.no_grad():
        out = ours(**batch, output_hidden_states=True)
        ref = theirs(**batch, output_hidden_states=True)
    assert torch.allclose(out.hidden_states[-1], ref.hidden_states[-1], atol=1e-5)
    if hf_class is transformers.BertForMaskedLM:
        assert torch.allclose(out.mlm_logits, ref.logits, atol=1e-5)


def test_old_gamma_beta_layernorm_names_are_understood(trained_tiny, tokenizer, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "old")
    state = load_file(folder / "model.safetensors")
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in state.items()}
    save_file(renamed, folder / "model.safetensors")
    model, _, missing = load_checkpoint(folder)
    assert missing == []
    assert torch.equal(model.bert.embeddings.LayerNorm.weight, trained_tiny.bert.embeddings.LayerNorm.weight)


def test_saving_over_an_existing_checkpoint_replaces_it_and_leaves_no_temp_folders(trained_tiny, tokenizer, tmp_path):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt", metadata={"v": 1})
    save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt", metadata={"v": 2})
    assert read_metadata(tmp_path / "ckpt") == {"v": 2}
    assert os.listdir(tmp_path) == ["ckpt"]


@pytest.mark.parametrize("error, message", [  # safetensors reports a full disk as its own error: made an OSError
    (OSError("disk full"), "disk full"),
    (SafetensorError("Error while serializing: No space left on device (os error 28)"), "No space left"),
])
def test_failed_write_keeps_the_previous_checkpoint(trained_tiny, tokenizer, tmp_path, monkeypatch, error, message):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt", metadata={"v": 1})

    def crash(*args, **kwargs):
        raise error

    monkeypatch.setattr("bert_demo.checkpoint.save_file", crash)
    with pytest.raises(OSError, match=message):
        save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt", metadata={"v": 2})
    assert read_metadata(tmp_path / "ckpt") == {"v": 1}
    assert os.listdir(tmp_path) == ["ckpt"]
    load_pretrained(tmp_path / "ckpt")


KILLED_WRITER = """
import sys, time
import bert_demo.checkpoint as checkpoint
model, tokenizer = checkpoint.load_pretrained(sys.argv[1])
real_save_file = checkpoint.save_file

def slow_save_file(*args, **kwargs):
    real_save_file(*args, **kwargs)
    print("writing", flush=True)
    time.sleep(120)

checkpoint.save_file = slow_save_file
for parameter in model.parameters():
    parameter.data.add_(1.0)
checkpoint.save_pretrained(model, tokenizer, sys.argv[1], metadata={"v": 2})
"""


def test_a_process_killed_while_writing_leaves_the_previous_checkpoint_intact(trained_tiny, tokenizer, tmp_path):
    path = tmp_path / "ckpt"
    save_pretrained(trained_tiny, tokenizer, path, metadata={"v": 1})
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert writer.stdout.readline().strip() == "writing"  # the new weights are half-way to disk
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert any(name.endswith(".tmp") for name in os.listdir(tmp_path))  # the killed writer's leftovers
    model, _ = load_pretrained(path)
    assert read_metadata(path) == {"v": 1}
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), trained_tiny.state_dict().values()))
    save_pretrained(trained_tiny, tokenizer, path, metadata={"v": 3})
    assert os.listdir(tmp_path) == ["ckpt"]  # the next save clears them


def test_a_checkpoint_set_aside_by_a_writer_killed_between_renames_is_put_back(trained_tiny, tokenizer, tmp_path):
    path = tmp_path / "ckpt"
    save_pretrained(trained_tiny, tokenizer, path, metadata={"v": 1})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.replace(path, tmp_path / f".ckpt.{dead.pid}.old")  # `_replace_folder`'s first rename, then the writer died
    running = tmp_path / f".ckpt.{os.getpid()}.abc.tmp"  # a writer that is still at work (this process)
    running.mkdir()
    with pytest.raises(ValueError):
        load_pretrained(path)  # reading never repairs
    recover_folder(path)
    assert read_metadata(path) == {"v": 1} and sorted(os.listdir(tmp_path)) == sorted(["ckpt", running.name])


def test_pickle_weights_are_refused_never_unpickled(tokenizer, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(PRESETS["tiny"].with_vocab(len(tokenizer)).to_hf_dict()))
    tokenizer.save_pretrained(folder)
    marker = tmp_path / "pwned"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Exploit(str(marker))))
    with pytest.raises(ValueError, match="pickle, which we never load"):
        load_pretrained(folder)
    assert not marker.exists()


class Exploit:
    """Unpickling this would create a file: the test proves it never happens."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_wrong_shapes_are_reported_by_name(trained_tiny, tokenizer, tmp_path):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 256
    (folder / "config.json").write_text(json.dumps(config))
    size = trained_tiny.config.intermediate_size
    with pytest.raises(ValueError, match=rf"intermediate.dense.\w+ has shape \({size}"):
        load_pretrained(folder)


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 10**9}, "hidden_size"),
    ({"num_attention_heads": 5}, "not divisible"),
    ({"model_type": "gpt2"}, "not BERT"),
    ({"vocab_size": "many"}, "vocab_size"),
])
def test_absurd_or_foreign_configs_are_refused(trained_tiny, tokenizer, tmp_path, change, message):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt")
    config = {**json.loads((folder / "config.json").read_text()), **change}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        load_pretrained(folder)


def shard_bytes(state: dict) -> int:
    """A shard size that cuts these weights into at least three shards (none smaller than the largest tensor)."""
    sizes = [tensor.numel() * tensor.element_size() for tensor in state.values()]
    return max(max(sizes), sum(sizes) // 4)


def test_weights_in_shards_load_here_and_in_transformers_with_the_same_logits(trained_tiny, tokenizer, tmp_path):
    """A shipped model keeps its weights in shards under the repository's file size (Hugging Face's layout: an index
    naming each weight's shard), and both sides read them back as one model."""
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    state = stored_weights(folder)
    most = shard_bytes(state)
    written = write_weights(state, folder, max_shard_bytes=most)
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 3 and not (folder / "model.safetensors").exists() and folder / INDEX_NAME in written
    assert all(shard.stat().st_size <= most + 10_000 for shard in shards)  # the header's bytes beside the data
    assert {k: v.shape for k, v in stored_weights(folder).items()} == {k: v.shape for k, v in state.items()}
    ours, _ = load_pretrained(folder)
    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    batch = sample_batch(tokenizer)
    with torch.no_grad():
        a, b, c = trained_tiny(**batch), ours(**batch), theirs(**batch)
    assert torch.equal(a.mlm_logits, b.mlm_logits)
    assert torch.allclose(a.mlm_logits, c.prediction_logits, atol=1e-5)
    write_weights(state, folder)  # back in one file: the shards and their index are gone
    assert [p.name for p in folder.glob("model*.safetensors*")] == ["model.safetensors"]


@pytest.mark.parametrize("damage, message", [
    (lambda index, names: index["weight_map"].update({"bert.pooler.dense.bias": "../elsewhere.safetensors"}),
     "must be a .safetensors file in the folder itself"),
    (lambda index, names: index["weight_map"].update({"bert.pooler.dense.bias": names[0]}), "do not hold what"),
    (lambda index, names: index["weight_map"].update({"bert.made.up": names[0]}), "bert.made.up in model-00001"),
    (lambda index, names: index["weight_map"].update(
        {k: "model-00009-of-00009.safetensors" for k, v in index["weight_map"].items() if v == names[-1]}),
     "names model-00009-of-00009.safetensors, which is not there"),
    (lambda index, names: index.pop("weight_map"), "has no weight_map"),
])
def test_a_shard_index_that_points_elsewhere_or_disagrees_with_its_shards_is_refused(trained_tiny, tokenizer,
                                                                                    tmp_path, damage, message):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    state = stored_weights(folder)
    write_weights(state, folder, max_shard_bytes=shard_bytes(state))
    index = json.loads((folder / INDEX_NAME).read_text())
    damage(index, sorted(set(index["weight_map"].values())))
    (folder / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(ValueError, match=message):
        load_pretrained(folder)


def test_garbage_safetensors_and_missing_folder_give_clear_errors(trained_tiny, tokenizer, tmp_path):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt")
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_pretrained(folder)
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        load_pretrained(tmp_path / "does-not-exist")


def test_hub_id_offline_fails_with_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="Hugging Face Hub"):
        load_pretrained("bert-base-uncased")


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """The Hugging Face Hub as its client answers: a listing with file sizes, config.json, then the snapshot."""
    import huggingface_hub

    monkeypatch.setattr("bert_demo.checkpoint.hub_reachable", lambda: True)

    hub = {"sizes": {"config.json": 600, "model.safetensors": 20_000_000}, "config": PRESETS["tiny"].to_hf_dict(),
           "snapshots": [], "timeouts": []}

    def model_info(self, repo, files_metadata=False, timeout=None):
        hub["timeouts"].append(timeout)
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=n, size=b) for n, b in hub["sizes"].items()])

    def hf_hub_download(repo, filename, cache_dir=None):
        folder = tmp_path / "hub-config" / repo.replace("/", "--")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / filename).write_text(json.dumps(hub["config"]))
        return str(folder / filename)

    def snapshot_download(repo, allow_patterns=None, cache_dir=None):  # the hub cache's layout
        hub["snapshots"].append(repo)
        folder = Path(cache_dir) / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return hub


def test_a_hub_model_is_checked_for_size_and_config_before_its_weights_are_downloaded(fake_hub, tmp_path):
    fake_hub["sizes"]["model.safetensors"] = 3_000_000_000
    with pytest.raises(ValueError, match="is 2,861 MB; at most 954 MB are downloaded"):
        download("someone/huge", cache_dir=tmp_path / "cache")
    fake_hub["sizes"]["model.safetensors"] = 20_000_000
    fake_hub["config"]["hidden_size"] = 10**7
    with pytest.raises(ValueError, match="hidden_size=10000000 must be an integer"):
        download("someone/foreign", cache_dir=tmp_path / "cache")
    del fake_hub["sizes"]["model.safetensors"]
    with pytest.raises(ValueError, match="has no model.safetensors"):
        download("someone/pickled", cache_dir=tmp_path / "cache")
    fake_hub["sizes"]["model.safetensors"] = 20_000_000
    fake_hub["config"]["hidden_size"] = 128

    def refuse(config):
        raise ValueError(f"{config.hidden_size} is too wide here")
    with pytest.raises(ValueError, match="128 is too wide here"):
        download("someone/refused", cache_dir=tmp_path / "cache", check=refuse)
    assert fake_hub["snapshots"] == []  # nothing was downloaded beyond config.json
    assert set(fake_hub["timeouts"]) == {HUB_TIMEOUT_S}  # a silent network cannot hold the caller for minutes


def test_a_hub_model_in_shards_is_downloaded_and_its_shards_count_towards_the_size_limit(fake_hub, tmp_path):
    del fake_hub["sizes"]["model.safetensors"]
    fake_hub["sizes"] |= {"model.safetensors.index.json": 30_000, "model-00001-of-00002.safetensors": 600_000_000,
                          "model-00002-of-00002.safetensors": 600_000_000}
    with pytest.raises(ValueError, match="is 1,144 MB; at most 954 MB are downloaded"):
        download("someone/large-in-shards", cache_dir=tmp_path / "cache")
    fake_hub["sizes"]["model-00002-of-00002.safetensors"] = 100_000_000
    download("someone/in-shards", cache_dir=tmp_path / "cache")
    assert fake_hub["snapshots"] == ["someone/in-shards"]


def test_the_hub_cache_keeps_only_the_most_recently_used_models(fake_hub, tmp_path):
    cache = tmp_path / "cache"
    for i in range(7):
        if i == 5:  # five models kept; model-0, the oldest, is asked for again: used now, so not the one pruned
            download("someone/model-0", cache_dir=cache, max_bytes=10**9)
        folder = download(f"someone/model-{i}", cache_dir=cache, max_bytes=10**9)
        os.utime(folder.parents[1], (time.time() - 100 + i, time.time() - 100 + i))  # older ones first
    kept = sorted(p.name for p in cache.iterdir())
    assert len(kept) == 5 and "models--someone--model-6" in kept and "models--someone--model-1" not in kept
    assert "models--someone--model-0" in kept


def test_model_is_returned_in_eval_mode_on_requested_device(trained_tiny, tokenizer, tmp_path):
    save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt")
    model, _ = load_pretrained(tmp_path / "ckpt", device="cpu")
    assert not model.training
    assert isinstance(model, BertForPreTraining)
    assert model.bert.embeddings.word_embeddings.weight.device.type == "cpu"


def test_saved_folder_is_readable_by_others_like_any_model_folder(trained_tiny, tokenizer, tmp_path):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "tiny")
    assert folder.stat().st_mode & 0o777 == 0o755
    assert all(file.stat().st_mode & 0o777 == 0o644 for file in folder.iterdir())


def test_cleanup_leaves_alone_the_live_temp_folder_of_a_checkpoint_with_a_longer_name(trained_tiny, tokenizer,
                                                                                    tmp_path):
    other = tmp_path / f".ckpt.v2.{os.getpid()}.abc.tmp"  # "ckpt.v2" being written by a live process
    other.mkdir()
    save_pretrained(trained_tiny, tokenizer, tmp_path / "ckpt", metadata={"v": 1})
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt", other.name])


def test_cleanup_for_a_name_never_takes_the_set_aside_folder_of_a_longer_name_ending_in_digits(trained_tiny,
                                                                                             tokenizer, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"run.{dead.pid}"  # a checkpoint whose writer (this process) is between its two renames
    save_pretrained(trained_tiny, tokenizer, tmp_path / name)
    aside = tmp_path / f".{name}.{os.getpid()}.old"
    os.replace(tmp_path / name, aside)
    recover_folder(tmp_path / "run")  # "run" has no leftovers: ".run.<dead pid>.<pid>.old" is not one of them
    recover_leftovers(tmp_path)  # the leftover of "run.<dead pid>", whose writer is alive: left alone
    assert os.listdir(tmp_path) == [aside.name]
