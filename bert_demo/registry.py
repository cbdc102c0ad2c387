"""The app's backend state: which models exist, the loaded ones (a small LRU cache), and the one training run.

The UI asks this module everything that is not a single inference call:
- `Registry.list_models()`: shipped checkpoints (`checkpoints/<name>`), runs trained in the app (`runs/<name>`),
  an optional extra folder (`$BERT_DEMO_MODELS_DIR`, shown as `models/<name>`), and the run now training.
- `Registry.load(name)`: a model and its tokenizer, loaded once and kept for the next few requests.
  A name is never used as a file path unchecked: it must be `<root>/<folder>` (or a path) naming a direct
  sub-folder of one of the roots above, or a Hugging Face hub id.
- `Registry.start_training(...)`: one run at a time for everyone, in a background thread that runs
  `Trainer.run()` and appends its records to a list that any number of readers can follow. Inference on the
  run in progress uses `Trainer.snapshot()`, a copy taken between optimizer steps.
- `Caps`: the limits a shared machine puts on a run, shown in the UI.

torch and transformers are imported on first use, not at import time, so the app's page is up in a few seconds.
"""
from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from bert_demo.config import PRESETS

if TYPE_CHECKING:
    from transformers import BertTokenizerFast

    from bert_demo.model import BertForPreTraining

log = logging.getLogger(__name__)

# File names of bert_demo.checkpoint, repeated here so listing models needs no torch (a test checks they agree).
CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"

DEVICE_ENV = "BERT_DEMO_DEVICE"  # "cpu" or "cuda"; default: CUDA when an NVIDIA GPU is visible
CHECKPOINTS_ENV = "BERT_DEMO_CHECKPOINTS"  # shipped models; default ./checkpoints
RUNS_ENV = "BERT_DEMO_RUNS"  # runs trained in the app; default ./runs
EXTRA_ENV = "BERT_DEMO_MODELS_DIR"  # one more folder of models, listed as models/<name>
HUB_ENV = "BERT_DEMO_HUB"  # "0" refuses hub ids
MAX_RUNS_ENV = "BERT_DEMO_MAX_RUNS"  # runs kept in runs/ (oldest deleted when a new one starts); default 20
LIVE = "live"  # the name of the run in progress in the model selector
CORPORA = ("wiki", "news", "wikitext-2")
NOT_ZIPPED = ("optimizer.safetensors",)  # needed to resume, not to use the model
MODEL_CARD = "README.md"
MAX_WAITING = 4  # visitors who may wait in line for the training slot; more are refused at once
WAIT_POLL_S = 1.0  # how often a waiting visitor's place in line is re-checked and shown
MAX_CARD_CHARS = 50_000  # longer cards are cut in the Model tab, and say so

_IMPORTING = threading.Lock()
_FOLDER = re.compile(r"[A-Za-z0-9][\w.-]{0,99}", re.ASCII)  # no "/", no leading "."
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)  # a Hugging Face card's YAML metadata
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?", re.ASCII)


@dataclass(frozen=True)
class Caps:
    """What one run may ask for on this machine (the trainer itself accepts more)."""

    max_steps: int
    max_batch: int
    max_seq_len: int
    max_vocab: int
    presets: tuple[str, ...]
    max_upload_bytes: int = 10 * 1024 * 1024
    min_vocab: int = 512

    def describe(self, device: str) -> str:
        return (f"Limits on this machine ({device}): at most {self.max_steps:,} steps, batch {self.max_batch}, "
                f"sequence length {self.max_seq_len}, vocabulary {self.max_vocab:,}, presets "
                f"{', '.join(self.presets)}, uploads up to {self.max_upload_bytes // 2**20} MB. "
                "One run trains at a time for everyone.")


CPU_CAPS = Caps(max_steps=1000, max_batch=64, max_seq_len=128, max_vocab=16384, presets=("tiny", "mini"))
GPU_CAPS = Caps(max_steps=20000, max_batch=256, max_seq_len=512, max_vocab=32768, presets=tuple(PRESETS))


def import_backend() -> None:
    """Import torch, transformers and the model code, one thread at a time.

    The app starts without them (the page is served within seconds) and imports them on first use, in Gradio's
    worker threads. Two threads importing transformers at once can see a half-initialised module ("cannot import
    name 'BertTokenizerFast'"), so every handler calls this first; once imported, it returns at once.
    """
    with _IMPORTING:
        import bert_demo.checkpoint  # noqa: F401
        import bert_demo.inference  # noqa: F401
        import bert_demo.trainer  # noqa: F401


@dataclass(frozen=True)
class TrainDefaults:
    """Settings that finish in about a minute on a 2-core CPU."""

    corpus: tuple[str, ...] = ("wiki",)
    preset: str = "tiny"
    steps: int = 150
    batch_size: int = 16
    lr: float = 1e-3
    seq_len: int = 64
    vocab_size: int = 4096


DEFAULTS = TrainDefaults()


@dataclass(frozen=True)
class ModelEntry:
    """One model the selector can offer: `name` is what the UI and the API pass around."""

    name: str
    label: str
    folder: Path | None  # None for a hub id (downloaded on load) and for the live run


@dataclass
class Loaded:
    model: BertForPreTraining
    tokenizer: BertTokenizerFast
    entry: ModelEntry
    folder: Path | None


class Registry:
    """Models by name and the training run; one instance serves every user of the app."""

    def __init__(self, checkpoints_dir: str | Path | None = None, runs_dir: str | Path | None = None,
                 extra_dir: str | Path | None = None, device: str | None = None, cache_size: int = 3,
                 allow_hub: bool | None = None, caps: Caps | None = None):
        self.roots: dict[str, Path] = {
            "checkpoints": Path(checkpoints_dir or os.environ.get(CHECKPOINTS_ENV) or "checkpoints"),
            "runs": Path(runs_dir or os.environ.get(RUNS_ENV) or "runs"),
        }
        extra = extra_dir or os.environ.get(EXTRA_ENV)
        if extra:
            self.roots["models"] = Path(extra)
        self.device = device or os.environ.get(DEVICE_ENV) or _visible_device()
        self._fixed_caps = caps
        self.caps = caps or (GPU_CAPS if self.device.startswith("cuda") else CPU_CAPS)
        self.allow_hub = os.environ.get(HUB_ENV, "1") != "0" if allow_hub is None else allow_hub
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, Loaded] = OrderedDict()
        self._lock = threading.RLock()
        self.job: TrainingJob | None = None
        self.line: list[Ticket] = []  # visitors waiting for the training slot, first in line first
        self.max_waiting = MAX_WAITING
        self.finish_wait_s = 30.0  # how long a new run waits for the previous one to save its checkpoint
        self.max_runs = int(os.environ.get(MAX_RUNS_ENV) or 20)

    # ------------------------------------------------------------------------------------------------------------
    # models

    def list_models(self) -> list[ModelEntry]:
        """The live run (if any), shipped checkpoints by name, runs newest first, then the extra folder."""
        entries = []
        job = self.job
        if job is not None and job.running and job.trainer.model is not None:
            entries.append(ModelEntry(LIVE, f"⏺ run in progress ({job.name}, step {job.trainer.step})", None))
        labels = {"checkpoints": "shipped", "runs": "trained here", "models": "extra folder"}
        for key, root in self.roots.items():
            folders = _model_folders(root)
            if key == "runs":
                folders.sort(key=lambda f: f.stat().st_mtime, reverse=True)
            entries += [ModelEntry(f"{key}/{f.name}", f"{f.name} ({labels[key]})", f) for f in folders]
        return entries

    def choices(self) -> list[tuple[str, str]]:
        """(label, name) pairs for a dropdown."""
        return [(e.label, e.name) for e in self.list_models()]

    def default_model(self) -> str | None:
        """The first shipped checkpoint, else the newest run, else None (nothing to show until one is trained)."""
        entries = [e for e in self.list_models() if e.name != LIVE]
        return entries[0].name if entries else None

    def resolve(self, name: str | None) -> ModelEntry:
        """Check a user-supplied model name and say what it refers to; ValueError when it is not allowed."""
        if name is not None and not isinstance(name, str):
            raise ValueError(f"a model name must be text, not {type(name).__name__}")
        name = (name or "").strip()
        if not name:
            if self.default_model() is None:
                raise ValueError("there is no model yet: train one in the Train tab (about a minute), "
                                 "then it appears in the model selector")
            raise ValueError("choose a model in the model selector")
        if name == LIVE:
            if self.job is None or self.job.trainer.model is None:
                raise ValueError("no run is training right now: choose a saved model")
            return ModelEntry(LIVE, "run in progress", None)
        head, _, tail = name.partition("/")
        if head in self.roots and tail and "/" not in tail:
            return self._local(head, tail)
        if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
            return self._local_path(name)
        for key in self.roots:  # a bare folder name that exists locally wins over the hub
            if _FOLDER.fullmatch(name) and (self.roots[key] / name / CONFIG_NAME).is_file():
                return self._local(key, name)
        if _HUB_ID.fullmatch(name) and ".." not in name:
            if not self.allow_hub:
                raise ValueError(f"{name!r} is not a local model, and loading from the Hugging Face Hub is turned "
                                 "off here")
            return ModelEntry(name, f"{name} (Hugging Face Hub)", None)
        raise ValueError(f"{name!r} is not a model name: choose one from the list, or give a folder inside "
                         f"{self._roots_text()}, or a Hugging Face hub id such as google/bert_uncased_L-2_H-128_A-2")

    def _local(self, key: str, folder_name: str) -> ModelEntry:
        root = self.roots[key]
        if not _FOLDER.fullmatch(folder_name):
            raise ValueError(f"{folder_name!r} is not a valid model folder name")
        folder = root / folder_name
        if not (folder / CONFIG_NAME).is_file() or folder.resolve().parent != root.resolve():
            raise ValueError(f"there is no model called {key}/{folder_name}")
        return ModelEntry(f"{key}/{folder_name}", folder_name, folder)

    def _local_path(self, text: str) -> ModelEntry:
        path = Path(text).expanduser().resolve()
        for key, root in self.roots.items():
            if root.exists() and path.parent == root.resolve():
                return self._local(key, path.name)
        raise ValueError(f"only model folders directly inside {self._roots_text()} can be loaded, not {text!r}")

    def _roots_text(self) -> str:
        return ", ".join(f"{key}/" for key in self.roots)

    def load(self, name: str | None) -> Loaded:
        """The model called `name` in eval mode on this registry's device, from the cache when possible."""
        entry = self.resolve(name)
        if entry.name == LIVE:
            return self.job.live_model()
        key = (entry.name, _mtime(entry.folder))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        from bert_demo.checkpoint import load_pretrained, resolve_folder

        started = time.perf_counter()  # load outside the lock: a slow download must not block cached models
        model, tokenizer = load_pretrained(entry.folder or entry.name, device=self.torch_device())
        folder = entry.folder or resolve_folder(entry.name)  # a hub id: the files now sit in the hub cache
        loaded = Loaded(model, tokenizer, entry, folder)
        log.info("loaded %s in %.1f s", entry.name, time.perf_counter() - started)
        with self._lock:
            self._cache[key] = loaded
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return loaded

    def torch_device(self) -> str:
        """The device to use, confirmed by torch: a CPU-only torch on a GPU machine falls back to the CPU."""
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                log.warning("an NVIDIA GPU is visible but torch cannot use it: running on the CPU")
                self.device = "cpu"
                self.caps = self._fixed_caps or CPU_CAPS
        return self.device

    def model_info(self, name: str | None) -> dict[str, Any]:
        """What the Model tab shows: config, size, device, training settings and metrics, the model card."""
        loaded = self.load(name)
        model, folder = loaded.model, loaded.folder
        info: dict[str, Any] = {
            "name": loaded.entry.name,
            "config": asdict(model.config),
            "parameters": model.num_parameters(),
            "device": str(next(model.parameters()).device),
            "vocab_size": len(loaded.tokenizer),
            "missing_weights": list(getattr(model, "missing_keys", []) or []),
            "folder": str(folder) if folder else None,
            "model_card": None,
        }
        if loaded.entry.name == LIVE:
            history = list(self.job.trainer.history)
            metadata = {"train_config": asdict(self.job.trainer.config), "step": self.job.trainer.step,
                        "history": history}
        else:
            from bert_demo.checkpoint import read_metadata

            metadata = read_metadata(folder) if folder else {}
            card = folder / MODEL_CARD if folder else None
            if card is not None and card.is_file():
                info["model_card"] = _card_text(card)
        history = metadata.get("history") or []
        info["train_config"] = metadata.get("train_config")
        info["step"] = metadata.get("step")
        info["elapsed"] = metadata.get("elapsed")
        info["trained_on"] = metadata.get("device")
        info["last_train"] = next((r for r in reversed(history) if r.get("kind") == "train"), None)
        info["last_val"] = next((r for r in reversed(history) if r.get("kind") == "val"), None)
        return info

    def model_summary(self, name: str | None) -> str:
        """One line for the header: which model, how big, where it runs. Cheap: reads config.json only."""
        from bert_demo.checkpoint import read_config

        entry = self.resolve(name)
        config = read_config(entry.folder) if entry.folder else self.load(name).model.config
        return (f"{entry.name}: {config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
                f"{config.num_attention_heads} heads, vocabulary {config.vocab_size:,}; runs on {self.device}")

    def layers_and_heads(self, name: str | None) -> tuple[int, int]:
        from bert_demo.checkpoint import read_config

        entry = self.resolve(name)
        config = read_config(entry.folder) if entry.folder else self.load(name).model.config
        return config.num_hidden_layers, config.num_attention_heads

    def zip_checkpoint(self, name: str | None) -> Path:
        """A zip of a saved model folder in Hugging Face format (unzip, then `from_pretrained` the folder)."""
        entry = self.resolve(name)
        if entry.folder is None:
            raise ValueError("only a saved model can be downloaded: wait for the run to end, or choose a folder")
        folder = entry.folder
        version = f"{entry.name.replace('/', '--')}-{_mtime(folder):.0f}"  # a new zip when the weights change
        out_dir = Path(tempfile.gettempdir()) / "bert-demo-downloads" / version
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / f"{folder.name}.zip"
        if not target.is_file():  # each caller writes its own temporary file: two downloads may race here
            handle, tmp = tempfile.mkstemp(prefix=f".{folder.name}.", suffix=".zip.tmp", dir=out_dir)
            with os.fdopen(handle, "wb") as raw, \
                    zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
                for file in sorted(folder.iterdir()):
                    if file.is_file() and not file.name.startswith(".") and file.name not in NOT_ZIPPED:
                        archive.write(file, f"{folder.name}/{file.name}")
            os.replace(tmp, target)
        return target

    # ------------------------------------------------------------------------------------------------------------
    # training

    def train_config(self, corpus: str | list[str] | tuple[str, ...] | None = DEFAULTS.corpus,
                     upload: str | Path | None = None, preset: str = DEFAULTS.preset, steps: int = DEFAULTS.steps,
                     batch_size: int = DEFAULTS.batch_size, lr: float = DEFAULTS.lr, seq_len: int = DEFAULTS.seq_len,
                     vocab_size: int = DEFAULTS.vocab_size, name: str | None = None):
        """A checked TrainConfig for a run in `runs/`; ValueError names the first setting that is not allowed."""
        from bert_demo.trainer import TrainConfig  # imported here: the trainer pulls in torch and the data pipeline

        self.torch_device()
        caps = self.caps
        sources = [corpus] if isinstance(corpus, str) else list(corpus or [])
        sources = [s.strip() for part in sources for s in str(part).split(",") if s.strip()]
        unknown = [s for s in sources if s not in CORPORA]
        if unknown:
            raise ValueError(f"unknown corpus {unknown[0]!r}: choose from {', '.join(CORPORA)} or upload a .txt file")
        if not sources and not upload:
            raise ValueError("choose a corpus or upload a .txt file to train on")
        steps, batch_size = _whole(steps, "steps"), _whole(batch_size, "batch size")
        seq_len, vocab_size = _whole(seq_len, "sequence length"), _whole(vocab_size, "vocabulary size")
        if preset not in caps.presets:
            raise ValueError(f"preset {preset!r} is not available on this machine: choose {', '.join(caps.presets)}")
        _within("steps", steps, 1, caps.max_steps)
        _within("batch size", batch_size, 2, caps.max_batch)
        _within("sequence length", seq_len, 16, caps.max_seq_len)
        _within("vocabulary size", vocab_size, caps.min_vocab, caps.max_vocab)
        try:
            lr = float(lr)
        except (TypeError, ValueError):
            raise ValueError(f"learning rate must be a number, got {lr!r}") from None
        if not 1e-6 <= lr <= 1e-2:
            raise ValueError(f"learning rate must be between 1e-6 and 1e-2, got {lr:g}")
        label = "-".join([*sources, *(["upload"] if upload else [])])
        name = name or f"{preset}-{label}-{time.strftime('%Y%m%d-%H%M%S')}"
        if not _FOLDER.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid run name")
        if upload:  # last: every refusal above leaves nothing behind
            sources.append(str(self._check_upload(Path(upload), alone=not sources)))
        config = TrainConfig(preset=preset, corpus=",".join(sources), steps=steps, batch_size=batch_size, lr=lr,
                             seq_len=seq_len, vocab_size=vocab_size, out=str(self.roots["runs"] / name),
                             log_every=max(1, steps // 50), eval_every=max(10, steps // 6), save_every=10**9,
                             device=self.torch_device())
        try:
            config.validate()
        except ValueError:
            _remove_uploads(config.corpus)
            raise
        return config

    def _check_upload(self, path: Path, alone: bool) -> Path:
        """Check an uploaded text file, read it, and return a private copy under a name of our choosing (a user's
        file name never reaches the corpus loader, where a comma would split it). A file that is the only source
        must hold enough documents for training and validation; beside a named corpus, any readable text will do.
        """
        if not path.is_file():
            raise ValueError("the uploaded file is gone: upload it again")
        if path.suffix.lower() != ".txt":
            raise ValueError(f"upload a plain .txt file, not {path.suffix or 'a file without extension'}")
        size = path.stat().st_size
        if size > self.caps.max_upload_bytes:
            raise ValueError(f"the uploaded file is {size / 2**20:.1f} MB; at most "
                             f"{self.caps.max_upload_bytes // 2**20} MB are allowed")
        if size == 0:
            raise ValueError("the uploaded file is empty")
        from bert_demo.corpus import load_corpus
        from bert_demo.pretraining_data import split_documents
        from bert_demo.trainer import TrainConfig

        folder = Path(tempfile.mkdtemp(prefix="bert-demo-upload-"))
        target = folder / "upload.txt"
        shutil.copyfile(path, target)
        try:  # read it now, so that a file we cannot train on is refused at once, not when the run starts
            documents = load_corpus(str(target))
            if alone:
                split_documents(documents, TrainConfig.val_fraction, TrainConfig.seed)
        except ValueError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            reason = str(exc)
            for shown in {str(target.resolve()), str(target)}:  # never show a visitor the server's temporary paths
                reason = reason.replace(shown, "it")
            raise ValueError(f"the uploaded file cannot be trained on: {reason}") from None
        return target

    def start_training(self, owner: str | None = None, **settings) -> "TrainingJob":
        """Check the settings (see `train_config`) and start the run in a background thread; ValueError if they
        are not allowed. If another run is still finishing (saving its checkpoint), wait for it a little first.
        `owner` (a browser session) is the only one allowed to stop the run, when given."""
        return self._start(self.train_config(**settings), owner)

    def _start(self, config, owner: str | None) -> "TrainingJob":
        from bert_demo.trainer import Trainer

        with self._lock:
            try:
                if self.job is not None and self.job.running:
                    self.job.thread.join(timeout=self.finish_wait_s)
                    if self.job.running:
                        raise ValueError(f"another run ({self.job.name}) is training: wait for it to end")
                trainer = Trainer(config, origin="app")
            except ValueError:
                _remove_uploads(config.corpus)
                raise
            self._prune_runs(keep=self.max_runs - 1)
            self.job = TrainingJob(trainer, Path(config.out).name, owner=owner)
            self.job.start()
            atexit.register(self.job.shutdown)  # on exit (Ctrl-C included), stop the run and let it save
            return self.job

    def _prune_runs(self, keep: int) -> None:
        """Delete the oldest runs this app trained beyond the newest `keep` (runs from the CLI are never deleted),
        and what writers killed mid-save left in runs/ (an app stopped by a crash or `kill`)."""
        from bert_demo.checkpoint import read_metadata, recover_leftovers

        recover_leftovers(self.roots["runs"])
        runs = [f for f in _model_folders(self.roots["runs"]) if read_metadata(f).get("origin") == "app"]
        runs.sort(key=lambda f: f.stat().st_mtime, reverse=True)
        for folder in runs[max(keep, 0):]:
            log.info("deleting old run %s", folder)
            shutil.rmtree(folder, ignore_errors=True)

    def train_in_line(self, owner: str | None = None, **settings) -> Iterator[str | TrainingJob]:
        """Check the settings at once, wait in line for the training slot, then start the run.

        Yields a status line every WAIT_POLL_S while others go first, and the started job last. A visitor has at
        most one run waiting or training, and at most `max_waiting` visitors wait: more are refused at once, so that
        queued runs never fill the app's queue and lock other visitors out of inference. Closing the generator
        (the visitor left) or `stop_training` by the same owner gives the place up.
        """
        config = self.train_config(**settings)
        try:
            ticket = self._join_line(owner)
        except ValueError:
            _remove_uploads(config.corpus)
            raise
        started = False
        try:
            while (ahead := self._ahead_of(ticket)) > 0:
                if ticket.cancelled:
                    return
                yield (f"Waiting for the training slot: {ahead} run{'s' if ahead > 1 else ''} before yours "
                       f"(you are number {ahead} in line). Runs last at most a few minutes here.")
                time.sleep(WAIT_POLL_S)
            if ticket.cancelled:
                return
            job = self._start(config, owner)
            started = True
            yield job
        finally:
            with self._lock:
                if ticket in self.line:
                    self.line.remove(ticket)
            if not started:
                _remove_uploads(config.corpus)

    def _join_line(self, owner: str | None) -> "Ticket":
        with self._lock:
            job = self.job
            mine = owner is not None and (any(t.owner == owner for t in self.line)
                                          or (job is not None and job.running and job.owner == owner))
            if mine:
                raise ValueError("you already have a run training or waiting: stop it, or wait for it to end, "
                                 "before you start another")
            if len(self.line) >= self.max_waiting:
                raise ValueError(f"{len(self.line)} visitors are already waiting to train, the most this app lets "
                                 "wait: try again in a few minutes. Fill-mask, Next sentence and Attention work "
                                 "meanwhile")
            ticket = Ticket(owner)
            self.line.append(ticket)
            return ticket

    def _ahead_of(self, ticket: "Ticket") -> int:
        """How many runs go before this ticket's: the one training, and the tickets ahead of it in line."""
        with self._lock:
            running = self.job is not None and self.job.running
            return self.line.index(ticket) + int(running)

    def stop_training(self, owner: str | None) -> bool:
        """Stop the run `owner` started, or give up its place in line; True if there was one.

        Only the visitor (browser session) who started a run may stop it; a request without a session stops
        nothing. The backend can always call `job.stop()` itself.
        """
        if owner is None:
            return False
        with self._lock:
            for ticket in self.line:
                if ticket.owner == owner:
                    ticket.cancelled = True
                    return True
        job = self.job
        if job is None or not job.running or job.owner != owner:
            return False
        job.stop()
        return True


@dataclass(eq=False)
class Ticket:
    """A visitor's place in the line for the training slot."""

    owner: str | None
    cancelled: bool = False


@dataclass
class TrainingJob:
    """A Trainer running in a daemon thread; its records are appended to `records` for readers to follow."""

    trainer: Any
    name: str
    owner: str | None = None
    id: str = field(default_factory=lambda: f"{time.time_ns():x}")
    records: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self._changed = threading.Condition()
        self.thread = threading.Thread(target=self._run, name=f"train-{self.name}", daemon=True)
        self._live: tuple[int, Loaded] | None = None

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            for record in self.trainer.run():
                self._append(record)
        except ValueError as exc:  # bad data or settings: a message for the user
            self._append({"kind": "done", "reason": "error", "step": self.trainer.step, "message": str(exc),
                          "checkpoint": None})
        except Exception as exc:  # noqa: BLE001 - a run must always end with a record, never hang its readers
            log.exception("training run %s failed", self.name)
            self._append({"kind": "done", "reason": "error", "step": self.trainer.step,
                          "message": f"the run failed ({type(exc).__name__}: {exc})", "checkpoint": None})
        finally:
            if not self.records or self.records[-1].get("kind") != "done":
                self._append({"kind": "done", "reason": "error", "step": self.trainer.step,
                              "message": "the run ended without saving", "checkpoint": None})
            _remove_uploads(self.trainer.config.corpus)

    def _append(self, record: dict) -> None:
        with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    @property
    def done(self) -> dict | None:
        """The final record once the run has ended."""
        return self.records[-1] if self.records and self.records[-1].get("kind") == "done" else None

    def stop(self) -> None:
        self.trainer.stop()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop the run and wait for it to save, so the process never exits under a running thread."""
        if self.running:
            self.stop()
            self.thread.join(timeout=timeout)

    def wait(self, seen: int, timeout: float) -> list[dict]:
        """Records after the first `seen`, waiting up to `timeout` seconds for at least one."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.records) > seen or not self.running, timeout=timeout)
            return self.records[seen:]

    def live_model(self, max_age_steps: int = 0) -> Loaded:
        """An eval copy of the weights as they are now (taken between optimizer steps), reused until the next step."""
        step = self.trainer.step
        if self._live is not None and step - self._live[0] <= max_age_steps:
            return self._live[1]
        model = self.trainer.snapshot()
        if model is None:
            raise ValueError("the run has not built its model yet: try again in a few seconds")
        loaded = Loaded(model, self.trainer.tokenizer, ModelEntry(LIVE, "run in progress", None), None)
        self._live = (step, loaded)
        return loaded

    def status(self) -> str:
        """One line: step, speed, time spent and left; or how the run ended."""
        total = self.trainer.config.steps
        done = self.done
        elapsed = time.perf_counter() - self.started
        if done is not None:
            where = f" Saved as runs/{self.name}." if done.get("checkpoint") else ""
            message = f" {done['message']}" if done.get("message") else ""
            words = {"finished": f"Finished {done['step']} steps", "stopped": f"Stopped at step {done['step']}",
                     "diverged": f"Diverged at step {done['step']}", "error": "Training failed"}
            return f"{words.get(done['reason'], done['reason'])} in {_clock(elapsed)}.{where}{message}"
        train = [r for r in self.records if r.get("kind") == "train"]
        if not train:
            statuses = [r["message"] for r in self.records if r.get("kind") == "status"]
            return f"Preparing ({_clock(elapsed)}): {statuses[-1] if statuses else 'starting'}…"
        last = train[-1]
        line = (f"Step {last['step']}/{total} · {last['tokens_per_s']:,.0f} tokens/s · "
                f"{_clock(elapsed)} elapsed")
        if len(train) >= 2 and last["step"] > train[0]["step"]:
            per_step = (last["elapsed"] - train[0]["elapsed"]) / (last["step"] - train[0]["step"])
            line += f" · about {_clock(per_step * (total - last['step']))} left"
        return line


def _remove_uploads(corpus: str) -> None:
    """Delete the private copies of uploaded files (see `Registry._check_upload`) named in a run's corpus list."""
    for source in corpus.split(","):
        path = Path(source)
        if path.name == "upload.txt" and path.parent.name.startswith("bert-demo-upload-"):
            shutil.rmtree(path.parent, ignore_errors=True)


def _visible_device() -> str:
    """CUDA when the NVIDIA driver is loaded and a GPU is not hidden, else the CPU; decided without importing
    torch (slow), and confirmed by `Registry.torch_device` when torch is first needed."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    return "cuda" if Path("/proc/driver/nvidia/version").exists() else "cpu"


def _model_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    inside = root.resolve()
    return sorted(f for f in root.iterdir() if f.is_dir() and _FOLDER.fullmatch(f.name)
                  and (f / CONFIG_NAME).is_file() and f.resolve().parent == inside)


def _mtime(folder: Path | None) -> float:
    if folder is None:
        return 0.0
    weights = folder / WEIGHTS_NAME
    return (weights if weights.exists() else folder).stat().st_mtime


def _whole(value: Any, what: str) -> int:
    """Sliders send floats: accept 150.0, refuse 150.5 and text."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    return int(number)


def _within(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {low:,} and {high:,} on this machine, got {value:,}")


def _card_text(path: Path) -> str:
    """A model card as people read it: without the YAML metadata block a Hugging Face card opens with (Markdown
    would show it as a heading), and at most MAX_CARD_CHARS long."""
    with path.open(encoding="utf-8", errors="replace") as file:
        text = _FRONT_MATTER.sub("", file.read(2 * MAX_CARD_CHARS), count=1)
    if len(text) > MAX_CARD_CHARS:
        text = text[:MAX_CARD_CHARS] + f"\n\n*(The card is cut here: it is longer than {MAX_CARD_CHARS:,} characters.)*"
    return text


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"
