"""bert_demo/app/folders.py: a model folder as the app reads it: its card without YAML and with its pictures inlined,
and its zip, whole even when two visitors ask at once."""
from __future__ import annotations

import json
import threading
import time
import zipfile
from pathlib import Path

from bert_demo.app import folders
from bert_demo.app.folders import MAX_CARD_CHARS
from bert_demo.app.registry import Registry


def test_model_card_is_shown_without_its_yaml_metadata_and_cut_when_too_long(make_checkpoint, tmp_path):
    registry = Registry(checkpoints_dir=tmp_path, runs_dir=tmp_path / "runs", device="cpu", allow_hub=False)
    make_checkpoint(tmp_path / "carded", card="---\nlanguage: en\ntags: [bert]\n---\n\n# Carded\nText.\n")
    assert registry.catalog.model_info("checkpoints/carded")["model_card"] == "\n# Carded\nText.\n"
    long_card = "---\nlicense: mit\n---\n# Long\n" + "word " * MAX_CARD_CHARS
    make_checkpoint(tmp_path / "long-card", card=long_card)
    shown = registry.catalog.model_info("checkpoints/long-card")["model_card"]
    assert shown.startswith("# Long\nword ") and "license" not in shown
    assert len(shown) < MAX_CARD_CHARS + 100 and shown.endswith(f"longer than {MAX_CARD_CHARS:,} characters.)*")


def test_zip_download_is_a_transformers_folder(registry, tmp_path):
    from transformers import BertForPreTraining as HFBert

    (registry.roots["checkpoints"] / "tiny-test" / "optimizer.safetensors").write_bytes(b"resume only")
    archive = registry.catalog.zip_checkpoint("checkpoints/tiny-test")
    assert archive.name == "tiny-test.zip"
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        z.extractall(tmp_path)
    assert "tiny-test/config.json" in names and "tiny-test/model.safetensors" in names
    assert not any(n.endswith("optimizer.safetensors") for n in names)
    model = HFBert.from_pretrained(tmp_path / "tiny-test")
    assert model.config.num_hidden_layers == 2


def test_two_downloads_of_the_same_model_at_once_both_get_a_whole_zip(registry, monkeypatch):
    registry.catalog.zip_checkpoint("checkpoints/tiny-test").unlink()  # as if nobody had downloaded it yet
    in_step = threading.Barrier(2, timeout=30)
    write = zipfile.ZipFile.write

    def write_in_step(self, *args, **kwargs):  # both downloads are half-way through their zip at the same time
        write(self, *args, **kwargs)
        in_step.wait()

    monkeypatch.setattr(zipfile.ZipFile, "write", write_in_step)
    results = []

    def download():
        try:
            results.append(registry.catalog.zip_checkpoint("checkpoints/tiny-test"))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            results.append(exc)

    threads = [threading.Thread(target=download) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(isinstance(r, Path) for r in results) and len(results) == 2, results
    with zipfile.ZipFile(results[0]) as archive:
        assert archive.testzip() is None and "tiny-test/model.safetensors" in archive.namelist()
    assert not [p for p in results[0].parent.iterdir() if p.name.endswith(".tmp")]


def test_a_cards_svg_pictures_are_inlined_and_nothing_outside_its_folder_is_read(tmp_path, monkeypatch):
    (tmp_path / "learning-curve.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (tmp_path / "big.svg").write_text("<svg>" + " " * 300 + "</svg>")
    (tmp_path / "README.md").write_text("![curve](learning-curve.svg) ![up](../secret.svg) ![abs](/etc/x.svg) "
                                        "![gone](missing.svg) ![big](big.svg)")
    monkeypatch.setattr(folders, "MAX_PICTURE_BYTES", 200)
    text = folders.card_text(tmp_path / "README.md")
    assert "![curve](data:image/svg+xml;base64," in text
    assert "![up](../secret.svg)" in text and "![abs](/etc/x.svg)" in text  # paths are never followed
    assert "![gone](missing.svg)" in text and "![big](big.svg)" in text  # missing or too big: left as written
