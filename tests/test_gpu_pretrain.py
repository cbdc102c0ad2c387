"""benchmarks/gpu_pretrain.py: the corpus travels to a lent GPU whole, and a checkpoint comes back from it in parts
that join into the same files, or into nothing."""
from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_pretrain.py"


@pytest.fixture(scope="module")
def gpu_pretrain():
    import sys
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports benchmarks/_common
    spec = importlib.util.spec_from_file_location("gpu_pretrain", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pack_then_unpack_gives_back_each_sources_cache(gpu_pretrain, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    for part in ("news", "wiki"):
        (cache / f"{part}-v{gpu_pretrain.CACHE_VERSION}.json").write_text(json.dumps({"part": part}))
    monkeypatch.setenv("BERT_DEMO_CACHE", str(cache))
    monkeypatch.setattr(gpu_pretrain, "load_corpus", lambda part: None)  # already cached: nothing to fetch
    archive = gpu_pretrain.pack("news,wiki", tmp_path / "carry" / "corpus.tar.xz")
    gpu_pretrain.unpack(archive, tmp_path / "there")
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == sorted(p.name for p in cache.iterdir())
    assert all((tmp_path / "there" / p.name).read_bytes() == p.read_bytes() for p in cache.iterdir())


def test_unpack_refuses_a_path_outside_the_cache(gpu_pretrain, tmp_path):
    archive = tmp_path / "evil.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo("../escaped.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(SystemExit, match="not a cache file"):
        gpu_pretrain.unpack(archive, tmp_path / "cache")
    assert not (tmp_path / "escaped.json").exists()


def _checkpoint(folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    files = {"model.safetensors": bytes(range(256)) * 41, "config.json": b'{"hidden_size": 8}'}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "timeline").mkdir()
    return files


def test_a_split_checkpoint_joins_into_the_same_files(gpu_pretrain, tmp_path):
    files = _checkpoint(tmp_path / "run")
    manifest = gpu_pretrain.split(tmp_path / "run", part_bytes=1000)
    assert len(manifest["model.safetensors"]["parts"]) == 11 and not (tmp_path / "run" / "timeline").exists()
    assert all(p.stat().st_size <= 1000 for p in (tmp_path / "run").glob("*.part*"))
    out = gpu_pretrain.join(tmp_path / "run", tmp_path / "joined")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_a_damaged_part_leaves_no_checkpoint(gpu_pretrain, tmp_path):
    _checkpoint(tmp_path / "run")
    gpu_pretrain.split(tmp_path / "run", part_bytes=1000)
    part = tmp_path / "run" / "model.safetensors.part03"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(SystemExit, match="SHA-256 differs"):
        gpu_pretrain.join(tmp_path / "run", tmp_path / "joined")
    assert [p.name for p in tmp_path.iterdir() if "joined" in p.name] == []


def test_a_machine_without_torch_is_refused_before_any_work(gpu_pretrain, monkeypatch):
    calls = []
    monkeypatch.setattr(gpu_pretrain.importlib.util, "find_spec", lambda name: None if name == "torch" else object())
    monkeypatch.setattr(gpu_pretrain.subprocess, "run", lambda *a, **k: calls.append(a))
    with pytest.raises(SystemExit, match="lacks torch"):
        gpu_pretrain.install_missing()
    assert calls == []
