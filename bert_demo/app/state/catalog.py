"""The catalogue of models the app can show: shipped checkpoints, runs trained here, an extra folder, hub ids, and
the run in progress.

A name from a visitor is never used as a path unchecked: it must be `<root>/<folder>` (or a bare folder name) naming
a direct sub-folder of one of the roots, or a Hugging Face hub id. A path is refused, even one to a model that is
there: an answer to `/home/.../checkpoints/x` would tell a visitor where the app is installed. `resolve` checks a
name once and returns an entry that carries the model's config; `load` keeps the last few loaded models in a small
LRU cache.

Loading a hub model that is not in that cache asks the hub, and may download hundreds of megabytes: seconds that
must not hold a place of a question's line. Where `downloads_here` is off (a question answered in its own line,
`ui.wire`), such a load raises `HubDownload` instead, and the question is answered again in the downloads' line.
"""
from __future__ import annotations

import contextvars
import functools
import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bert_demo.app.machine import import_heavy
from bert_demo.app.folders import (
    FOLDER,
    MODEL_CARD,
    card_text,
    describe,
    has_classifier,
    model_folders,
    sees,
    visible_to,
    weights_time,
    zip_folder,
)
from bert_demo.app.state.kept import Kept
from bert_demo.config import CONFIG_NAME, BertConfig, read_config, read_metadata

if TYPE_CHECKING:
    from transformers import BertTokenizerFast

    from bert_demo.model import BertForPreTraining

log = logging.getLogger(__name__)

LIVE = "live"  # the name of the run in progress in the model selector
OPENS_ON = "small-english"  # the shipped checkpoint the app opens on, listed first (the others follow by name)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?", re.ASCII)
downloads_here = contextvars.ContextVar("downloads_here", default=True)  # off: a hub load raises HubDownload


class HubDownload(Exception):
    """A hub model had to be fetched where `downloads_here` is off: the question goes to the downloads' line."""


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
    weights: str = ""  # which weights of this name: the file time of a folder's, the run and step of the live run's

    def key(self) -> tuple[str, str, str]:
        """What names these very weights in a visitor's cache: the live run's name stays while its weights change
        with every step, and a folder's change when a run saves into it again."""
        return self.entry.name, str(self.folder), self.weights


class Catalog:
    """Models by name: the folders under `roots` ("checkpoints", "runs", maybe "models"), hub ids where `allow_hub`
    (downloaded into `hub_cache`), and the run in progress, which `live()` returns (its job, or None)."""

    def __init__(self, roots: dict[str, Path], device: str, allow_hub: bool, hub_cache: Path,
                 live: Callable[[], Any] = lambda: None, cache_size: int = 3):
        self.roots, self.device, self.allow_hub, self.hub_cache = roots, device, allow_hub, hub_cache
        self.live = live
        self._cache = Kept(cache_size)  # the models loaded latest

    def list_models(self, viewer: str | None = None) -> list[ModelEntry]:
        """The live run (if any), shipped checkpoints by name, runs newest first, then the extra folder; without the
        runs private to another visitor (`viewer` is the asking browser session)."""
        entries = []
        job = self.live()
        if _live(job) and sees(viewer, job.trainer.visible_to):
            entries.append(ModelEntry(LIVE, f"⏺ run in progress ({job.name}, step {job.trainer.step})"))
        labels = {"checkpoints": "shipped", "runs": "trained here", "models": "extra folder"}
        for key, root in self.roots.items():
            folders = model_folders(root)
            if key == "runs":
                folders.sort(key=lambda f: f.stat().st_mtime, reverse=True)
            if key == "checkpoints":
                folders.sort(key=lambda f: (f.name != OPENS_ON, f.name))
            entries += [ModelEntry(f"{key}/{f.name}", describe(f) or f"{f.name} ({labels[key]})", f)
                        for f in folders if key != "runs" or sees(viewer, visible_to(f))]
        return entries

    def choices(self, viewer: str | None = None) -> list[tuple[str, str]]:
        """(label, name) pairs for a dropdown."""
        return [(e.label, e.name) for e in self.list_models(viewer)]

    def default_model(self, viewer: str | None = None) -> str | None:
        """The first shipped checkpoint (`OPENS_ON` where it is there), else the newest run, else None (nothing to
        show until one is trained)."""
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
            job = self.live()
            if not _live(job) or not sees(viewer, job.trainer.visible_to):
                raise ValueError("no run is pre-training right now: choose a saved model")
            return ModelEntry(LIVE, "run in progress", None, job.trainer.model.config)
        head, _, tail = name.partition("/")
        if head in self.roots and tail and "/" not in tail:
            return self._local(head, tail, viewer)
        if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1:
            raise ValueError(f"only model folders directly inside {self._roots_text()} can be loaded, by their name "
                             "in the list (such as checkpoints/<folder>), not by a path")
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
                or (key == "runs" and not sees(viewer, visible_to(folder)))):
            raise ValueError(f"there is no model called {key}/{folder_name}")
        return ModelEntry(f"{key}/{folder_name}", folder_name, folder, read_config(folder))

    def _roots_text(self) -> str:
        return ", ".join(f"{key}/" for key in self.roots)

    def load(self, name: str | ModelEntry | None, viewer: str | None = None, encoder: bool = False) -> Loaded:
        """The model in eval mode on this registry's device, from the cache when possible. A tab that reads only
        the encoder (attention, embeddings) sets `encoder`: a fine-tuned classifier then serves too, since its
        encoder is a BERT encoder like any other; elsewhere it is refused, having no masked-LM or NSP head. The
        first model loaded imports torch and transformers for every thread (`machine.import_heavy`)."""
        entry = name if isinstance(name, ModelEntry) else self.resolve(name, viewer)
        import_heavy()
        if entry.name == LIVE:
            job = self.live()
            model, tokenizer, step = job.live_weights()
            return Loaded(model, tokenizer, ModelEntry(LIVE, "run in progress", None, model.config), None,
                          weights=f"{job.name} at step {step}")
        if encoder and entry.config is not None and entry.config.labels:
            return self.load_classifier(entry.name, viewer)
        return self._cached((entry.name, weights_time(entry.folder)), lambda: self._read(entry))

    def _read(self, entry: ModelEntry) -> Loaded:
        from bert_demo import checkpoint

        if entry.config is not None and entry.config.labels:
            raise ValueError(f"{entry.label} is a fine-tuned classifier ({', '.join(entry.config.labels)}): it has "
                             "no masked-LM or next-sentence head for this tab to use. Ask it in the Fine-tune tab, "
                             "look at its attention or embeddings, or choose a pre-trained model")
        started = time.perf_counter()
        folder = entry.folder or self._download(entry.name)
        model, tokenizer, missing = checkpoint.load_checkpoint(folder, device=self.torch_device())
        log.info("loaded %s in %.1f s", entry.name, time.perf_counter() - started)
        return Loaded(model, tokenizer, entry, folder, missing, weights=str(weights_time(folder)))

    def _download(self, name: str) -> Path:
        """A hub model's folder, fetched (or found in the hub cache) now; `HubDownload` where `downloads_here` is off.
        A hub id is downloaded, never looked up as a path: "tests" must not load ./tests."""
        from bert_demo import checkpoint

        if not downloads_here.get():
            raise HubDownload(name)
        return checkpoint.download(name, cache_dir=self.hub_cache)

    def _cached(self, key: tuple, make: Callable[[], Loaded]) -> Loaded:
        """The model cached under `key`, or `make()`'s, kept among the newest few (`Kept`)."""
        return self._cache.kept(key, make)

    def load_classifier(self, name: str | None, viewer: str | None = None) -> Loaded:
        """A fine-tuned classifier in eval mode on this registry's device (a pre-training checkpoint is refused:
        it has no classifier to answer with)."""
        if name is None or (isinstance(name, str) and not name.strip()):  # the Fine-tune tab's own list is empty
            if not self.classifier_choices(viewer):
                raise ValueError("there is no fine-tuned model yet: press “Fine-tune and compare” above, then ask "
                                 "the model it leaves")
            raise ValueError("choose a model in “Fine-tuned model”, above the sentence")
        entry = self.resolve(name, viewer)
        if entry.name == LIVE:
            raise ValueError("a run in progress cannot classify yet: choose a finished fine-tuning run")
        if entry.config is not None and not entry.config.labels:
            raise ValueError(f"{entry.label} has no classifier: fine-tune it first, then choose the fine-tuned run")

        def read() -> Loaded:
            from bert_demo import checkpoint

            folder = entry.folder or self._download(entry.name)
            if not read_config(folder).labels:  # a hub model's config is known only once downloaded
                raise ValueError(f"{entry.label} has no classifier: fine-tune it first, then choose the fine-tuned run")
            model, tokenizer, _, new = checkpoint.load_classifier(folder, device=self.torch_device())
            return Loaded(model, tokenizer, entry, folder, new, weights=str(weights_time(folder)))

        return self._cached((entry.name, weights_time(entry.folder), "classifier"), read)

    def classifier_choices(self, viewer: str | None = None) -> list[tuple[str, str]]:
        """(label, name) pairs of the saved fine-tuned classifiers this visitor may use, newest runs first."""
        return [(e.label, e.name) for e in self.list_models(viewer)
                if e.folder is not None and has_classifier(e.folder)]

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
            from bert_demo.training import timeline

            final = self.load(entry, viewer, encoder)
            model = type(final.model)(final.model.config)
            model.load_state_dict(final.model.state_dict())  # copied to the CPU; the tie survives
            timeline.load_into(model, entry.folder, step)
            return Loaded(model.eval(), final.tokenizer, entry, final.folder, weights=f"{final.weights} at step {step}")

        return self._cached((entry.name, weights_time(entry.folder), step), read_snapshot)

    def timeline_steps(self, name: str | None, viewer: str | None = None) -> list[int]:
        """The steps a model has snapshots of (none for a shipped or hub model without a timeline)."""
        from bert_demo.training import timeline

        entry = self.resolve(name, viewer)
        return timeline.steps(entry.folder) if entry.folder is not None else []

    def config_of(self, name: str | None, viewer: str | None = None) -> tuple[ModelEntry, BertConfig]:
        """The entry and its config: read from config.json when the name was resolved, else from the loaded model."""
        entry = self.resolve(name, viewer)
        return entry, entry.config or self.load(entry).model.config

    def model_info(self, name: str | None, viewer: str | None = None) -> dict[str, Any]:
        """What the Model tab shows: config, size, device, training settings and metrics, the model card (of a
        fine-tuned classifier too)."""
        loaded = self.load(name, viewer, encoder=True)
        model, folder = loaded.model, loaded.folder
        info: dict[str, Any] = {
            "name": loaded.entry.name, "config": asdict(model.config), "parameters": model.num_parameters(),
            "device": str(next(model.parameters()).device), "vocab_size": len(loaded.tokenizer),
            "missing_weights": loaded.missing_keys, "model_card": None,  # no server path: a visitor reads it all
        }
        if loaded.entry.name == LIVE:
            trainer = self.live().trainer
            metadata = {"train_config": trainer.config.to_dict(), "step": trainer.step,
                        "planned_steps": getattr(trainer, "total_steps", None), "history": list(trainer.history)}
        else:
            metadata = read_metadata(folder) if folder else {}
            card = folder / MODEL_CARD if folder else None
            if card is not None and card.is_file():
                info["model_card"] = card_text(card)
        history = metadata.get("history") or []
        info.update(train_config=metadata.get("train_config"), step=metadata.get("step"),
                    planned_steps=metadata.get("planned_steps"),
                    elapsed=metadata.get("elapsed"), trained_on=metadata.get("device"),
                    last_train=next((r for r in reversed(history) if r.get("kind") == "train"), None),
                    last_val=next((r for r in reversed(history) if r.get("kind") == "val"), None))
        return info

    def history(self, name: str | None, viewer: str | None = None) -> tuple[str, list[dict[str, Any]]]:
        """A model's label and training records (metrics over steps): the live run's, or its folder's metadata."""
        entry = self.resolve(name, viewer)
        if entry.name == LIVE:
            return entry.label, list(self.live().trainer.history)
        return entry.label, list(read_metadata(entry.folder).get("history") or []) if entry.folder else []

    def zip_checkpoint(self, name: str | None, viewer: str | None = None) -> Path:
        """A zip of a saved model folder in Hugging Face format (unzip, then `from_pretrained` the folder)."""
        entry = self.resolve(name, viewer)
        if entry.folder is None:
            raise ValueError("only a saved model can be downloaded: wait for the run to end, or choose a folder")
        return zip_folder(entry.name, entry.folder)

    def torch_device(self) -> str:
        """The device to use, confirmed by torch (`usable_device`)."""
        return usable_device(self.device)


@functools.cache
def usable_device(device: str) -> str:
    """`device`, or the CPU where it names a GPU that torch cannot use (a CPU-only torch on a GPU machine): said
    once in the log, not at every load."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            log.warning("an NVIDIA GPU is visible but torch cannot use it: running on the CPU")
            return "cpu"
    return device


def _live(job: Any) -> bool:
    """Whether a pre-training run is in progress with its model built: the tabs can ask it (a fine-tuning run's
    classifier has no masked-LM head for them; it is asked once saved)."""
    return (job is not None and job.running and job.trainer.model is not None
            and not getattr(job.trainer.model.config, "labels", ()))
