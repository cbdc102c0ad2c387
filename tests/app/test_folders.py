"""bert_demo/app/folders.py: a model folder as the app reads it: its card without YAML and with its pictures
inlined, and its zip, whole even when two visitors ask at once."""
from __future__ import annotations

import json
import threading
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
    assert model.config.num_hidden_layers == 3


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


def test_a_private_runs_zip_and_model_tab_name_no_server_path_nor_whom_it_is_private_to(make_checkpoint, tmp_path):
    """A run's bert_demo.json on disk keeps the upload's path and whom the run is private to, for its privacy; its
    zip and its Model tab let neither out."""
    from bert_demo.app.tabs import model_views
    from bert_demo.config import METADATA_NAME, read_metadata

    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    run = make_checkpoint(tmp_path / "runs" / "run-on-upload", card=None)
    owner, upload = "visitor-0123456789abcdef", "/tmp/bert-demo-upload-4242-x1y2/upload.txt"
    record = read_metadata(run)
    record["train_config"].update(corpus=f"wiki,{upload}", out=str(run),
                                  init_from=str(tmp_path / "checkpoints" / "tiny-test"))
    (run / METADATA_NAME).write_text(json.dumps({**record, "visible_to": owner}))
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    with zipfile.ZipFile(registry.catalog.zip_checkpoint("runs/run-on-upload", owner)) as archive:
        carried = {name: archive.read(name).decode("utf-8", errors="replace") for name in archive.namelist()}
        zipped = json.loads(carried[f"run-on-upload/{METADATA_NAME}"])
    shown = model_views.model_markdown(registry.catalog.model_info("runs/run-on-upload", owner))
    for said in [*carried.values(), shown]:
        assert str(tmp_path) not in said and "/tmp/" not in said and owner not in said
    assert "visible_to" not in zipped and zipped["step"] == 10
    assert {key: zipped["train_config"][key] for key in ("corpus", "out", "init_from", "preset")} == {
        "corpus": "wiki,upload.txt", "out": "run-on-upload", "init_from": "tiny-test", "preset": "tiny"}
    assert read_metadata(run)["visible_to"] == owner  # the app itself still knows whose run it is
