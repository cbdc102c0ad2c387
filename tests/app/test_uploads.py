"""bert_demo/app/uploads.py: a visitor's text is checked and copied under a name of ours, private unless shared,
and swept when the app that held it is gone."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bert_demo.app.state.forms import Caps
from bert_demo.app.registry import Registry
from bert_demo.app.uploads import UPLOAD_PREFIX


def test_uploads_are_checked_and_copied_to_a_safe_name(write_corpus, roots, tmp_path, monkeypatch):
    private_temp = tmp_path / "temp"  # other processes' uploads must not show up in the before/after comparison
    private_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_temp))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"],
                        caps=Caps("cpu", {"steps": 10, "batch_size": 8, "seq_len": 64, "vocab_size": 1024,
                                          "preset": ("tiny",)}, max_upload_bytes=2000))
    odd = write_corpus(tmp_path / "my, odd name.txt", documents=4)
    config = registry.forms.train_config(corpus=[], upload=str(odd), steps=10, batch_size=4, seq_len=32, vocab_size=512)
    copied = Path(config.corpus)
    assert copied.name == "upload.txt" and copied.read_text() == odd.read_text() and "," not in config.corpus
    assert "upload" in Path(config.out).name
    with pytest.raises(ValueError, match="at most 0 MB|MB are allowed"):
        registry.forms.train_config(upload=str(write_corpus(tmp_path / "big.txt", documents=60)), steps=10,
                                    batch_size=4, seq_len=32, vocab_size=512)
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"\.txt"):
        registry.forms.train_config(upload=str(tmp_path / "data.csv"), steps=10, batch_size=4, seq_len=32,
                                    vocab_size=512)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        registry.forms.train_config(upload=str(tmp_path / "empty.txt"), steps=10, batch_size=4, seq_len=32,
                              vocab_size=512)
    for name, content, message in [("binary.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks binary"),
                                   ("latin.txt", "Café au lait. Crème brûlée.".encode("latin-1"), "not UTF-8"),
                                   ("line.txt", b"One sentence here. And a second one.", "document")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"cannot be trained on: .*{message}"):
            registry.forms.train_config(corpus=[], upload=str(tmp_path / name), steps=10, batch_size=4, seq_len=32,
                                        vocab_size=512)
    # one document is fine next to a corpus
    beside_wiki = registry.forms.train_config(corpus=["wiki"], upload=str(tmp_path / "line.txt"), steps=10,
                                              batch_size=4, seq_len=32, vocab_size=512)
    assert beside_wiki.corpus.startswith("wiki,")
    uploads = set(private_temp.glob("bert-demo-upload-*"))
    assert copied.parent in uploads
    with pytest.raises(ValueError, match="steps"):
        registry.forms.train_config(upload=str(odd), steps=0)
    assert set(private_temp.glob("bert-demo-upload-*")) == uploads  # a refusal leaves no copy


def test_a_run_on_an_upload_is_shared_only_when_its_owner_says_so(write_corpus, roots, tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    names = {}
    for share in (False, True):
        job = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), steps=2,
                                      batch_size=2, seq_len=32, vocab_size=512, owner="me", share=share,
                                      name=f"shared-{share}")
        job.thread.join(timeout=60)
        names[share] = f"runs/{job.name}"
    seen_by_others = [e.name for e in registry.catalog.list_models("someone else")]
    assert names[True] in seen_by_others and names[False] not in seen_by_others
    assert {names[True], names[False]} <= {e.name for e in registry.catalog.list_models("me")}
    wiki_run = registry.start_training(corpus=["wiki"], steps=1, batch_size=2, seq_len=32, vocab_size=512,
                                       owner="me", name="on-wiki")
    wiki_run.thread.join(timeout=120)
    # no upload: nothing to hide
    assert "runs/on-wiki" in [e.name for e in registry.catalog.list_models("someone else")]


def test_continuing_a_private_run_keeps_it_private_to_its_owner_even_on_a_public_corpus(write_corpus, roots,
                                                                                      tmp_path):
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=tmp_path / "runs", device="cpu")
    small = {"steps": 1, "batch_size": 2, "seq_len": 32, "vocab_size": 512}
    private = registry.start_training(corpus=[], upload=str(write_corpus(tmp_path / "c.txt")), owner="me",
                                      name="private", **small)
    private.thread.join(timeout=60)
    for share in (False, True):  # sharing applies to a new upload; it cannot publish the private model continued
        job = registry.start_training(corpus=["wiki"], init_from="runs/private", owner="me", share=share,
                                      name=f"continued-{share}", **small)
        job.thread.join(timeout=120)
        assert job.done["checkpoint"], job.records
        assert f"runs/{job.name}" in [e.name for e in registry.catalog.list_models("me")]
        assert f"runs/{job.name}" not in [e.name for e in registry.catalog.list_models("someone else")]
        with pytest.raises(ValueError, match="there is no model called"):
            registry.catalog.load(f"runs/{job.name}", "someone else")


def test_private_copies_a_killed_app_left_are_swept_at_start_and_a_live_apps_kept(roots, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{UPLOAD_PREFIX}{int(gone.stdout)}-abc"  # a process that has ended
    live = tmp_path / f"{UPLOAD_PREFIX}{os.getpid()}-def"
    for folder in (left, live):
        folder.mkdir()
        (folder / "upload.txt").write_text("a visitor's private text")
    Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu")
    assert not left.exists() and (live / "upload.txt").is_file()


def test_an_upload_with_words_thousands_of_letters_long_is_refused_before_it_reaches_the_slot(registry, tmp_path):
    upload = tmp_path / "long-words.txt"
    upload.write_text("\n\n".join(f"{'a' * 16_000} {'b' * 16_000}. {'c' * 16_000} ends." for _ in range(40)))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="cannot be trained on: it has a word of 16,00[01] characters; at most 100"):
        registry.forms.train_config(corpus=[], upload=str(upload))
    assert time.perf_counter() - started < 5
