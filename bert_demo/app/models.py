"""The catalogue of models the app can show: shipped checkpoints, runs trained here, an extra folder, hub ids.

A name from a visitor is never used as a path unchecked: it must be `<root>/<folder>` (or a path) naming a direct
sub-folder of one of the roots, or a Hugging Face hub id. `resolve` checks a name once and returns an entry that
carries the model's config; `load` keeps the last few loaded models in a small LRU cache.
"""
from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bert_demo.app.backend import backend
from bert_demo.config import CONFIG_NAME, METADATA_NAME, WEIGHTS_NAME, BertConfig, read_config, read_metadata

if TYPE_CHECKING:
    from transformers import BertTokenizerFast

    from bert_demo.model import BertForPreTraining

log = logging.getLogger(__name__)

LIVE = "live"  # the name of the run in progress in the model selector
NOT_ZIPPED = ("optimizer.safetensors",)  # needed to resume, not to use the model
MODEL_CARD = "README.md"
EXAMPLES_NAME = "examples.json"  # the examples the app shows for a model, with the claims their labels make
MAX_EXAMPLES_BYTES = 100_000
MAX_CARD_CHARS = 50_000  # longer cards are cut in the Model tab, and say so
MAX_ZIPS = 10  # checkpoint zips kept in the temp folder for download; older ones are deleted
GPU_DRIVER_SIGNS = ("/proc/driver/nvidia/version", "/dev/dxg")  # NVIDIA's Linux driver; WSL2's GPU
FOLDER = re.compile(r"[A-Za-z0-9][\w.-]{0,99}", re.ASCII)  # no "/", no leading "."
_CARD_PICTURE = re.compile(r"!\[([^\]\n]*)\]\(([A-Za-z0-9_-][\w.-]*\.svg)\)")  # a bare file name, no path
MAX_PICTURE_BYTES = 200_000  # an SVG inlined into the Model tab
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)  # a Hugging Face card's YAML metadata
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?", re.ASCII)


@dataclass(frozen=True)
class ModelEntry:
    """One model the selector can offer: `name` is what the UI and the API pass around."""

    name: str
    label: str
    folder: Path | None = None  # None for a hub id (downloaded on load) and for the live run
    config: BertConfig | None = None  # read once when the name is resolved; None until a hub model is loaded


@dataclass
class Loaded:
    model: BertForPreTraining
    tokenizer: BertTokenizerFast
    entry: ModelEntry
    folder: Path | None
    missing_keys: list[str] = field(default_factory=list)  # weights the checkpoint lacked (random in the model)


class Catalog:
    """Models by name. Part of `Registry`, which gives it `roots`, `device`, `allow_hub` and the training `job`."""

    roots: dict[str, Path]
    device: str
    allow_hub: bool
    cache_size: int
    hub_cache: Path  # where hub models are downloaded; it keeps the newest few
    job: Any

    def _init_catalog(self) -> None:
        self._cache: OrderedDict[tuple, Loaded] = OrderedDict()
        self._cache_lock = threading.Lock()

    def list_models(self, viewer: str | None = None) -> list[ModelEntry]:
        """The live run (if any), shipped checkpoints by name, runs newest first, then the extra folder; without the
        runs private to another visitor (`viewer` is the asking browser session)."""
        entries = []
        job = self.job
        if _live(job) and _sees(viewer, job.trainer.visible_to):
            entries.append(ModelEntry(LIVE, f"⏺ run in progress ({job.name}, step {job.trainer.step})"))
        labels = {"checkpoints": "shipped", "runs": "trained here", "models": "extra folder"}
        for key, root in self.roots.items():
            folders = model_folders(root)
            if key == "runs":
                folders.sort(key=lambda f: f.stat().st_mtime, reverse=True)
            entries += [ModelEntry(f"{key}/{f.name}", f"{f.name} ({labels[key]})", f) for f in folders
                        if key != "runs" or _sees(viewer, visible_to(f))]
        return entries

    def choices(self, viewer: str | None = None) -> list[tuple[str, str]]:
        """(label, name) pairs for a dropdown."""
        return [(e.label, e.name) for e in self.list_models(viewer)]

    def default_model(self, viewer: str | None = None) -> str | None:
        """The first shipped checkpoint, else the newest run, else None (nothing to show until one is trained)."""
        entries = [e for e in self.list_models(viewer) if e.name != LIVE]
        return entries[0].name if entries else None

    def resolve(self, name: str | None, viewer: str | None = None) -> ModelEntry:
        """Check a visitor's model name and say what it refers to; ValueError when it is not allowed, or when it
        names a run private to another visitor (as if it did not exist)."""
        if name is not None and not isinstance(name, str):
            raise ValueError(f"a model name must be text, not {type(name).__name__}")
        name = (name or "").strip()
        if not name:
            if self.default_model(viewer) is None:
                raise ValueError("there is no model yet: train one in the Train tab, then it appears in the model "
                                 "selector")
            raise ValueError("choose a model in the model selector")
        if name == LIVE:
            job = self.job
            if not _live(job) or not _sees(viewer, job.trainer.visible_to):
                raise ValueError("no run is pre-training right now: choose a saved model")
            return ModelEntry(LIVE, "run in progress", None, job.trainer.model.config)
        head, _, tail = name.partition("/")
        if head in self.roots and tail and "/" not in tail:
            return self._local(head, tail, viewer)
        if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
            return self._local_path(name, viewer)
        for key in self.roots:  # a bare folder name inside one of the roots wins over the hub
            if FOLDER.fullmatch(name) and (self.roots[key] / name / CONFIG_NAME).is_file():
                return self._local(key, name, viewer)
        if _HUB_ID.fullmatch(name) and ".." not in name:
            if not self.allow_hub:
                raise ValueError(f"{name!r} is not a local model, and loading from the Hugging Face Hub is turned "
                                 "off here")
            return ModelEntry(name, f"{name} (Hugging Face Hub)")
        raise ValueError(f"{name!r} is not a model name: choose one from the list, or give a folder inside "
                         f"{self._roots_text()}, or a Hugging Face hub id such as google/bert_uncased_L-2_H-128_A-2")

    def _local(self, key: str, folder_name: str, viewer: str | None) -> ModelEntry:
        root = self.roots[key]
        if not FOLDER.fullmatch(folder_name):
            raise ValueError(f"{folder_name!r} is not a valid model folder name")
        folder = root / folder_name
        if (not (folder / CONFIG_NAME).is_file() or folder.resolve().parent != root.resolve()
                or (key == "runs" and not _sees(viewer, visible_to(folder)))):
            raise ValueError(f"there is no model called {key}/{folder_name}")
        return ModelEntry(f"{key}/{folder_name}", folder_name, folder, read_config(folder))

    def _local_path(self, text: str, viewer: str | None) -> ModelEntry:
        path = Path(text).expanduser().resolve()
        for key, root in self.roots.items():
            if root.exists() and path.parent == root.resolve():
                return self._local(key, path.name, viewer)
        raise ValueError(f"only model folders directly inside {self._roots_text()} can be loaded, not {text!r}")

    def _roots_text(self) -> str:
        return ", ".join(f"{key}/" for key in self.roots)

    def load(self, name: str | ModelEntry | None, viewer: str | None = None, encoder: bool = False) -> Loaded:
        """The model in eval mode on this registry's device, from the cache when possible. A tab that reads only
        the encoder (attention, embeddings) sets `encoder`: a fine-tuned classifier then serves too, since its
        encoder is a BERT encoder like any other; elsewhere it is refused, having no masked-LM or NSP head."""
        entry = name if isinstance(name, ModelEntry) else self.resolve(name, viewer)
        if entry.name == LIVE:
            return self.job.live_model()
        if encoder and entry.config is not None and entry.config.labels:
            return self.load_classifier(entry.name, viewer)
        return self._cached((entry.name, _mtime(entry.folder)), lambda: self._read(entry))

    def _read(self, entry: ModelEntry) -> Loaded:
        if entry.config is not None and entry.config.labels:
            raise ValueError(f"{entry.label} is a fine-tuned classifier ({', '.join(entry.config.labels)}): it has "
                             "no masked-LM or next-sentence head for this tab to use. Ask it in the Fine-tune tab, "
                             "look at its attention or embeddings, or choose a pre-trained model")
        checkpoint = backend().checkpoint
        started = time.perf_counter()
        # a hub id is downloaded, never looked up as a path: "tests" must not load ./tests
        folder = entry.folder or checkpoint.download(entry.name, cache_dir=self.hub_cache)
        model, tokenizer, missing = checkpoint.load_checkpoint(folder, device=self.torch_device())
        log.info("loaded %s in %.1f s", entry.name, time.perf_counter() - started)
        return Loaded(model, tokenizer, entry, folder, missing)

    def _cached(self, key: tuple, make: Callable[[], Loaded]) -> Loaded:
        """The cached model under `key`, or `make()`'s, kept among the newest `cache_size`. `make` runs outside the
        lock: a slow download must not block the cached models."""
        with self._cache_lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        loaded = make()
        with self._cache_lock:
            self._cache[key] = loaded
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return loaded

    def load_classifier(self, name: str | None, viewer: str | None = None) -> Loaded:
        """A fine-tuned classifier in eval mode on this registry's device (a pre-training checkpoint is refused:
        it has no classifier to answer with)."""
        entry = self.resolve(name, viewer)
        if entry.name == LIVE:
            raise ValueError("a run in progress cannot classify yet: choose a finished fine-tuning run")
        if entry.config is not None and not entry.config.labels:
            raise ValueError(f"{entry.label} has no classifier: fine-tune it first, then choose the fine-tuned run")

        def read() -> Loaded:
            folder = entry.folder or backend().checkpoint.download(entry.name, cache_dir=self.hub_cache)
            if not read_config(folder).labels:  # a hub model's config is known only once downloaded
                raise ValueError(f"{entry.label} has no classifier: fine-tune it first, then choose the fine-tuned run")
            model, tokenizer, _, new = backend().checkpoint.load_classifier(folder, device=self.torch_device())
            return Loaded(model, tokenizer, entry, folder, new)

        return self._cached((entry.name, _mtime(entry.folder), "classifier"), read)

    def classifier_choices(self, viewer: str | None = None) -> list[tuple[str, str]]:
        """(label, name) pairs of the saved fine-tuned classifiers this visitor may use, newest runs first."""
        return [(e.label, e.name) for e in self.list_models(viewer)
                if e.folder is not None and _has_classifier(e.folder)]

    def load_at(self, name: str | None, step: int | None, viewer: str | None = None, encoder: bool = False
                ) -> Loaded:
        """The model as it was at `step` of its training (a timeline snapshot), or as it is now (step None);
        `encoder` as in `load`."""
        entry = self.resolve(name, viewer)
        if step is None:
            return self.load(entry, viewer, encoder)
        if entry.folder is None:
            raise ValueError(f"{entry.label} has no timeline: choose “final weights”")
        def read_snapshot() -> Loaded:
            """A copy on the CPU, whatever the final weights' device: the cache holds several steps, and a GPU's
            memory is for the final weights and the runs (a small model answers on the CPU in milliseconds)."""
            final = self.load(entry, viewer, encoder)
            model = type(final.model)(final.model.config)
            model.load_state_dict(final.model.state_dict())  # copied to the CPU; the tie survives
            model.load_state_dict(backend().timeline.load(entry.folder, step), strict=False)
            return Loaded(model.eval(), final.tokenizer, entry, final.folder)

        return self._cached((entry.name, _mtime(entry.folder), step), read_snapshot)

    def timeline_steps(self, name: str | None, viewer: str | None = None) -> list[int]:
        """The steps a model has snapshots of (none for a shipped or hub model without a timeline)."""
        entry = self.resolve(name, viewer)
        return backend().timeline.steps(entry.folder) if entry.folder is not None else []

    def config_of(self, name: str | None, viewer: str | None = None) -> tuple[ModelEntry, BertConfig]:
        """The entry and its config: read from config.json when the name was resolved, else from the loaded model."""
        entry = self.resolve(name, viewer)
        return entry, entry.config or self.load(entry).model.config

    def model_summary(self, name: str | None, viewer: str | None = None) -> str:
        """One line for the header: which model, how big, where it runs."""
        entry, config = self.config_of(name, viewer)
        return (f"{entry.name}: {config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
                f"{config.num_attention_heads} heads, vocabulary {config.vocab_size:,}; runs on {self.device}")

    def model_info(self, name: str | None, viewer: str | None = None) -> dict[str, Any]:
        """What the Model tab shows: config, size, device, training settings and metrics, the model card (of a
        fine-tuned classifier too)."""
        loaded = self.load(name, viewer, encoder=True)
        model, folder = loaded.model, loaded.folder
        info: dict[str, Any] = {
            "name": loaded.entry.name, "config": asdict(model.config), "parameters": model.num_parameters(),
            "device": str(next(model.parameters()).device), "vocab_size": len(loaded.tokenizer),
            "missing_weights": loaded.missing_keys,
            "folder": str(folder) if folder else None, "model_card": None,
        }
        if loaded.entry.name == LIVE:
            trainer = self.job.trainer
            metadata = {"train_config": trainer.config.to_dict(), "step": trainer.step,
                        "history": list(trainer.history)}
        else:
            metadata = read_metadata(folder) if folder else {}
            card = folder / MODEL_CARD if folder else None
            if card is not None and card.is_file():
                info["model_card"] = card_text(card)
        history = metadata.get("history") or []
        info.update(train_config=metadata.get("train_config"), step=metadata.get("step"),
                    elapsed=metadata.get("elapsed"), trained_on=metadata.get("device"),
                    last_train=next((r for r in reversed(history) if r.get("kind") == "train"), None),
                    last_val=next((r for r in reversed(history) if r.get("kind") == "val"), None))
        return info

    def history(self, name: str | None, viewer: str | None = None) -> tuple[str, list[dict[str, Any]]]:
        """A model's label and training records (metrics over steps): the live run's, or its folder's metadata."""
        entry = self.resolve(name, viewer)
        if entry.name == LIVE:
            return entry.label, list(self.job.trainer.history)
        return entry.label, list(read_metadata(entry.folder).get("history") or []) if entry.folder else []

    def zip_checkpoint(self, name: str | None, viewer: str | None = None) -> Path:
        """A zip of a saved model folder in Hugging Face format (unzip, then `from_pretrained` the folder)."""
        entry = self.resolve(name, viewer)
        if entry.folder is None:
            raise ValueError("only a saved model can be downloaded: wait for the run to end, or choose a folder")
        folder = entry.folder
        version = f"{entry.name.replace('/', '--')}-{_mtime(folder):.0f}"  # a new zip when the weights change
        out_dir = downloads_dir() / version
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
            prune_downloads(keep=MAX_ZIPS)
        return target

    def torch_device(self) -> str:
        """The device to use, confirmed by torch: a CPU-only torch on a GPU machine falls back to the CPU."""
        if self.device.startswith("cuda"):
            if not backend().torch.cuda.is_available():
                log.warning("an NVIDIA GPU is visible but torch cannot use it: running on the CPU")
                self.device = "cpu"
        return self.device


def _live(job: Any) -> bool:
    """Whether a pre-training run is in progress with its model built: the tabs can ask it (a fine-tuning run's
    classifier has no masked-LM head for them; it is asked once saved)."""
    return (job is not None and job.running and job.trainer.model is not None
            and not getattr(job.trainer.model.config, "labels", ()))


def hub_id_of(folder: str | Path) -> str | None:
    """The hub id of a folder in the hub's cache (models--owner--name/snapshots/<commit>), else None."""
    cached = next((part for part in Path(folder).parts if part.startswith("models--")), None)
    return cached.removeprefix("models--").replace("--", "/") if cached else None


def _has_classifier(folder: Path) -> bool:
    try:
        return bool(read_config(folder).labels)
    except ValueError:  # a broken folder is no classifier (the selector says why when it is chosen)
        return False


def visible_to(folder: Path) -> str | None:
    """The browser session a run trained here is private to (None: everyone). Asked on every request that names a
    run, so the answer is kept while the run's training record is unchanged: it holds the whole metrics history."""
    record = folder / METADATA_NAME
    return _visible_to(str(record), record.stat().st_mtime_ns if record.is_file() else 0)


@functools.lru_cache(maxsize=256)
def _visible_to(record: str, mtime_ns: int) -> str | None:
    return read_metadata(Path(record).parent).get("visible_to") if mtime_ns else None


def _sees(viewer: str | None, private_to: str | None) -> bool:
    """Whether a visitor may see a run: runs are public unless private to one browser session."""
    return private_to is None or private_to == viewer


def downloads_dir() -> Path:
    """Where checkpoint zips are written for visitors to download."""
    return Path(tempfile.gettempdir()) / "bert-demo-downloads"


def prune_downloads(keep: int = MAX_ZIPS, name: str | None = None) -> None:
    """Delete old checkpoint zips: all those of model `name` (a run that was deleted), else all but the newest
    `keep` (a zip is made again when asked for)."""
    folders = sorted((p for p in downloads_dir().glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime,
                     reverse=True)
    if name is not None:
        prefix = f"{name.replace('/', '--')}-"
        doomed = [p for p in folders if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    else:
        doomed = folders[keep:]
    for folder in doomed:
        shutil.rmtree(folder, ignore_errors=True)


def model_folders(root: Path) -> list[Path]:
    """The checkpoint folders directly inside `root` (names we accept, no links out of it)."""
    if not root.is_dir():
        return []
    inside = root.resolve()
    return sorted(f for f in root.iterdir() if f.is_dir() and FOLDER.fullmatch(f.name)
                  and (f / CONFIG_NAME).is_file() and f.resolve().parent == inside)


def visible_device() -> str:
    """CUDA when torch can use a GPU, else the CPU; decided once, before the page is built, so that the Train form
    offers the caps of the device runs will use. A host with no sign of a GPU driver (neither NVIDIA's on Linux nor
    WSL2's /dev/dxg) is a CPU host without importing torch (about ten seconds of the first page's start); anywhere
    else torch decides: a driver file can sit beside a CPU-only torch, and under WSL2 it is absent while CUDA works."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    if not any(Path(sign).exists() for sign in GPU_DRIVER_SIGNS):
        return "cpu"
    return "cuda" if backend().torch.cuda.is_available() else "cpu"


def card_text(path: Path) -> str:
    """A model card as people read it: without the YAML metadata block a Hugging Face card opens with (Markdown
    would show it as a heading), at most MAX_CARD_CHARS long, and with its SVG pictures inlined."""
    with path.open(encoding="utf-8", errors="replace") as file:
        text = _FRONT_MATTER.sub("", file.read(2 * MAX_CARD_CHARS), count=1)
    if len(text) > MAX_CARD_CHARS:
        text = text[:MAX_CARD_CHARS] + f"\n\n*(The card is cut here: it is longer than {MAX_CARD_CHARS:,} characters.)*"
    return _CARD_PICTURE.sub(lambda match: _inline_picture(match, path.parent), text)


def _inline_picture(match: re.Match, folder: Path) -> str:
    """`![alt](name.svg)` beside the card as a data URI (the page cannot fetch files from the model folder); an
    image that is missing or over MAX_PICTURE_BYTES is left as written. Only a bare file name in the folder is
    read, and an SVG in an <img> runs no script."""
    picture = folder / match[2]
    if not picture.is_file() or picture.stat().st_size > MAX_PICTURE_BYTES:
        return match[0]
    return f"![{match[1]}](data:image/svg+xml;base64,{base64.b64encode(picture.read_bytes()).decode()})"


def _mtime(folder: Path | None) -> float:
    if folder is None:
        return 0.0
    weights = folder / WEIGHTS_NAME
    return (weights if weights.exists() else folder).stat().st_mtime


@dataclass(frozen=True)
class Examples:
    """The examples the app shows for one model, from `examples.json` beside its weights, each with its label."""

    fill_mask: list[str]
    next_sentence: list[tuple[str, str, str]]  # (A, B, label)
    attention: list[tuple[str, str, int, int, str, bool, str]]  # (A, B, layer, head, view, hide [CLS]/[SEP], label)
    model: str = ""  # the checkpoint folder's name: the examples were chosen for it and are shown only with it


def read_examples(folder: Path | None) -> Examples | None:
    """A model's examples, or None when it has none (a run trained here) or its file is not what we write."""
    file = folder / EXAMPLES_NAME if folder else None
    if file is None or not file.is_file() or file.stat().st_size > MAX_EXAMPLES_BYTES:
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return Examples(
            fill_mask=[str(e["text"]) for e in data["fill_mask"]],
            next_sentence=[(str(e["a"]), str(e["b"]), str(e["label"])) for e in data["next_sentence"]],
            attention=[(str(e["a"]), str(e["b"]), int(e["layer"]), int(e["head"]), str(e["view"]),
                        bool(e["hide_special"]), str(e["label"])) for e in data["attention"]],
            model=folder.name)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring %s: %s", file, exc)
        return None
