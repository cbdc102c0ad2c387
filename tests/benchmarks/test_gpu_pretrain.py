"""benchmarks/gpu_pretrain.py: the corpus and its vocabulary travel to a lent GPU whole, a run there is timed and
planned from a step measured there, and its checkpoint comes back within the machine's limits (at most 8 files of
16 MiB) in parts that join into the same files, or into nothing."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def gpu_pretrain():
    return benchmark_script("gpu_pretrain")


def test_pack_then_unpack_gives_back_each_sources_cache_and_the_vocabulary(gpu_pretrain, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "prepared").mkdir(parents=True)
    for part in ("news", "wiki"):
        (cache / f"{part}-v{gpu_pretrain.CACHE_VERSION}.json").write_text(json.dumps({"part": part}))
    vocabulary = cache / "prepared" / "vocab-0123.txt"
    vocabulary.write_text("[PAD]\n[UNK]")
    monkeypatch.setenv("BERT_DEMO_CACHE", str(cache))
    monkeypatch.setattr(gpu_pretrain, "load_corpus", lambda part: None)  # already cached: nothing to fetch
    monkeypatch.setattr(gpu_pretrain, "_vocabulary_file", lambda corpus, size: vocabulary)
    archive = gpu_pretrain.pack("news,wiki", tmp_path / "carry" / "corpus.tar.xz", vocab_size=300)
    gpu_pretrain.unpack(archive, tmp_path / "there")
    sent = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path / "there") for p in (tmp_path / "there").rglob("*") if p.is_file()) == sent
    assert all((tmp_path / "there" / p).read_bytes() == (cache / p).read_bytes() for p in sent)


@pytest.mark.parametrize("name", ["../escaped.json", "prepared/../../escaped.json", "a/b.json", ".hidden"])
def test_unpack_refuses_a_path_outside_the_cache(gpu_pretrain, tmp_path, name):
    archive = tmp_path / "evil.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(SystemExit, match="not a cache file"):
        gpu_pretrain.unpack(archive, tmp_path / "cache")
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "cache" / "a").exists()


def _checkpoint(folder: Path, weights: int = 1000, optimizer: bool = True) -> dict[str, bytes]:
    """A checkpoint folder: `weights` fp32 numbers, AdamW's moments (twice as many), a config and a timeline."""
    folder.mkdir()
    torch.manual_seed(0)
    save_file({"w": torch.randn(weights), "step": torch.tensor([3])}, str(folder / "model.safetensors"))
    if optimizer:
        save_file({"m": torch.randn(2 * weights)}, str(folder / "optimizer.safetensors"))
    (folder / "config.json").write_bytes(b'{"hidden_size": 8}')
    (folder / "timeline").mkdir()
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _returned(folder: Path, gpu_pretrain) -> list[Path]:
    """What would come back from $OUT/run: every file, each checked against the call's limits."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) <= gpu_pretrain.RETURN_FILES - 1  # one file is left for a log
    assert all(p.stat().st_size <= gpu_pretrain.RETURN_FILE_BYTES for p in files)
    assert sum(p.stat().st_size for p in files) <= gpu_pretrain.RETURN_BYTES
    return files


def test_a_split_checkpoint_joins_into_the_same_files(gpu_pretrain, tmp_path):
    files = _checkpoint(tmp_path / "run")
    manifest = gpu_pretrain.split(tmp_path / "run", part_bytes=8000, budget=30_000)  # a tar pads to 10,240 bytes
    assert len(manifest["parts"]) == 3 and manifest["weights"] == "fp32" and manifest["optimizer"]
    assert sorted(p.name for p in _returned(tmp_path / "run", gpu_pretrain)) == [*manifest["parts"], "parts.json"]
    out = gpu_pretrain.join(tmp_path / "run", tmp_path / "joined")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_weights_come_back_through_bf16_and_without_the_moments_where_fp32_would_not_fit(gpu_pretrain, tmp_path):
    _checkpoint(tmp_path / "run", weights=6000)  # fp32: 24 kB of weights, 48 kB of moments
    sent = load_file(str(tmp_path / "run" / "model.safetensors"))
    manifest = gpu_pretrain.split(tmp_path / "run", part_bytes=8000, budget=30_000)
    assert manifest["weights"] == "bf16" and not manifest["optimizer"]
    _returned(tmp_path / "run", gpu_pretrain)
    back = load_file(str(gpu_pretrain.join(tmp_path / "run", tmp_path / "joined") / "model.safetensors"))
    assert back["w"].dtype == torch.float32 and torch.equal(back["w"], sent["w"].bfloat16().float())
    assert torch.equal(back["step"], sent["step"]) and not (tmp_path / "joined" / "optimizer.safetensors").exists()


def test_a_checkpoint_too_big_even_in_bf16_is_refused_before_anything_is_cut(gpu_pretrain, tmp_path):
    files = _checkpoint(tmp_path / "run", weights=6000, optimizer=False)  # 12 kB even in bf16
    with pytest.raises(SystemExit, match="even in bf16"):
        gpu_pretrain.split(tmp_path / "run", part_bytes=8000, budget=10_000)
    assert "model.safetensors" in files and (tmp_path / "run" / "config.json").exists()


def test_a_damaged_part_leaves_no_checkpoint(gpu_pretrain, tmp_path):
    _checkpoint(tmp_path / "run")
    manifest = gpu_pretrain.split(tmp_path / "run", part_bytes=8000, budget=30_000)
    part = tmp_path / "run" / manifest["parts"][1]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(SystemExit, match="SHA-256 differs"):
        gpu_pretrain.join(tmp_path / "run", tmp_path / "joined")
    assert [p.name for p in tmp_path.iterdir() if "joined" in p.name] == []


def test_a_continuation_is_sent_with_bf16_weights_and_without_the_moments(gpu_pretrain, tmp_path):
    _checkpoint(tmp_path / "run")
    start = gpu_pretrain.pack_start(tmp_path / "run", tmp_path / "start")
    assert sorted(p.name for p in start.iterdir()) == ["config.json", "model.safetensors"]
    assert load_file(str(start / "model.safetensors"))["w"].dtype == torch.bfloat16


def test_a_shipped_model_is_cut_into_bf16_shards_under_the_limit_and_keeps_its_card(gpu_pretrain, tmp_path,
                                                                                    monkeypatch):
    from bert_demo.checkpoint import stored_weights

    _checkpoint(tmp_path / "run")
    weights = {f"w{i}": torch.randn(1000) for i in range(6)}  # 2 kB each in bf16
    save_file(weights, str(tmp_path / "run" / "model.safetensors"))
    shipped = tmp_path / "checkpoints" / "model"
    shipped.mkdir(parents=True)
    (shipped / "README.md").write_text("the card")
    (shipped / "model.safetensors").write_bytes(b"an older model's weights")
    monkeypatch.setattr(gpu_pretrain, "SHIPPED_SHARD_BYTES", 5000)
    gpu_pretrain.ship(tmp_path / "run", shipped)
    names = sorted(p.name for p in shipped.iterdir())
    assert names == ["README.md", "config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                     "model-00003-of-00003.safetensors", "model.safetensors.index.json"]
    assert all(shard.stat().st_size <= 5000 + 200 for shard in shipped.glob("model-*"))  # the header beside the data
    back = stored_weights(shipped)
    sent = load_file(str(tmp_path / "run" / "model.safetensors"))
    assert all(back[k].dtype == torch.bfloat16 and torch.equal(back[k], sent[k].bfloat16()) for k in sent)
    gpu_pretrain.ship(shipped, shipped)  # in place: the same weights, the same files
    assert sorted(p.name for p in shipped.iterdir()) == names
    assert all(torch.equal(v, back[k]) for k, v in stored_weights(shipped).items())
    start = gpu_pretrain.pack_start(shipped, tmp_path / "start")  # a shipped model continues from one bf16 file
    assert all(torch.equal(v, back[k]) for k, v in load_file(str(start / "model.safetensors")).items())


def test_a_run_whose_time_ran_out_before_its_first_step_says_so_instead_of_failing_to_read_what_it_saved(
        gpu_pretrain, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_pretrain, "_train", lambda args, out, deadline: None)  # stopped before step 1: no files
    with pytest.raises(SystemExit, match="its 5 minutes were up before its first step .*give it more --minutes"):
        gpu_pretrain.train(["--preset", "tiny"], tmp_path / "run", minutes=5)


def test_a_resumed_runs_speed_is_the_median_of_its_own_records_not_of_the_earlier_calls_in_its_history(
        gpu_pretrain, tmp_path):
    run, start = tmp_path / "run", tmp_path / "start"
    run.mkdir(), start.mkdir()
    earlier = [{"kind": "train", "step": step, "tokens": step, "tokens_per_s": 1000.0} for step in range(10, 110, 10)]
    this_call = [{"kind": "train", "step": step, "tokens": step, "tokens_per_s": 2000.0}
                 for step in range(110, 160, 10)]
    (start / "bert_demo.json").write_text(json.dumps({"step": 100}))
    (run / "bert_demo.json").write_text(json.dumps({"step": 150, "elapsed": 60, "history": earlier + this_call}))
    assert "2,000 real tokens/s" in gpu_pretrain.summary(run, gpu_pretrain._resumed_step(["--resume", str(start)]))
    assert "1,000 real tokens/s" in gpu_pretrain.summary(run, gpu_pretrain._resumed_step(["--preset", "small"]))


def test_a_machine_without_torch_is_refused_before_any_work(gpu_pretrain, monkeypatch):
    calls = []
    monkeypatch.setattr(gpu_pretrain.importlib.util, "find_spec", lambda name: None if name == "torch" else object())
    monkeypatch.setattr(gpu_pretrain.subprocess, "run", lambda *a, **k: calls.append(a))
    with pytest.raises(SystemExit, match="lacks torch"):
        gpu_pretrain.install_missing()
    assert calls == []


def test_pack_then_a_small_timed_run_then_split_and_join_give_a_model_on_the_carried_vocabulary(
        gpu_pretrain, tmp_path, monkeypatch):
    """The whole path at small scale on this CPU: the run there trains on the vocabulary packed here (it does not
    train its own), and comes back within the limits."""
    from bert_demo.checkpoint import load_pretrained, read_metadata
    from bert_demo.tokenizer import vocabulary

    monkeypatch.setenv("BERT_DEMO_CACHE", str(tmp_path / "here"))
    archive = gpu_pretrain.pack("wiki", tmp_path / "carry" / "corpus.tar.xz", vocab_size=300)
    gpu_pretrain.unpack(archive, tmp_path / "there")
    [sent] = (tmp_path / "there" / "prepared").glob("vocab-*.txt")
    packed = sent.read_text(encoding="utf-8").split("\n")
    packed[-20:] = packed[-20:][::-1]  # a vocabulary no training there would make: the run must read this one
    sent.write_text("\n".join(packed), encoding="utf-8")
    monkeypatch.setenv("BERT_DEMO_CACHE", str(tmp_path / "there"))
    gpu_pretrain.train(["--preset", "tiny", "--corpus", "wiki", "--vocab-size", "300", "--batch-size", "4",
                        "--seq-len", "32", "--device", "cpu", "--warmup-steps", "5", "--eval-batches", "1",
                        "--steps", "70"], tmp_path / "out" / "run", minutes=5)
    _returned(tmp_path / "out", gpu_pretrain)
    model, tokenizer = load_pretrained(gpu_pretrain.join(tmp_path / "out" / "run", tmp_path / "joined"))
    assert vocabulary(tokenizer) == packed and model.config.vocab_size == len(packed)
    assert read_metadata(tmp_path / "joined")["step"] == 70  # (the time budget's own tests are in test_loop.py)

def test_what_travels_is_the_tracked_and_unignored_files_and_the_carry_less_the_weights_left_home(
        gpu_pretrain, tmp_path):
    import subprocess

    root = tmp_path / "repo"
    (root / "checkpoints" / "mini").mkdir(parents=True)
    (root / "gpu-carry").mkdir()
    ignore = "/gpu-carry/\n/gpu-home/\n/runs/\n"
    (root / ".gitignore").write_text(ignore)
    (root / "checkpoints" / "small").mkdir()
    shards = {"checkpoints/small/model-00001-of-00002.safetensors": 3000,
              "checkpoints/small/model-00002-of-00002.safetensors": 2000,
              "checkpoints/small/model.safetensors.index.json": 40}
    files = {"checkpoints/mini/model.safetensors": 5000, "checkpoints/mini/config.json": 70,
             "checkpoints/small/config.json": 70, **shards, "gpu-carry/corpus.tar.xz": 900, "notes.txt": 30}
    for name, size in files.items():
        (root / name).write_bytes(b"x" * size)
    (root / "runs").mkdir()
    (root / "runs" / "ignored.bin").write_bytes(b"x" * 10_000)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", ".gitignore", "checkpoints"], cwd=root, check=True)
    assert gpu_pretrain.travel_bytes(root) == sum(files.values()) + len(ignore)
    weights = ["checkpoints/mini/model.safetensors", *shards]
    assert sorted(gpu_pretrain.leave_home(root, root / "gpu-home")) == sorted(map(Path, weights))
    assert gpu_pretrain.travel_bytes(root) == sum(files.values()) + len(ignore) - sum(files[name] for name in weights)
    gpu_pretrain.come_back(root, root / "gpu-home")
    assert all((root / name).read_bytes() == b"x" * files[name] for name in weights)
