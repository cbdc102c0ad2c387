"""What a visitor asks to train, read from the form: the machine's caps, and a checked config for a pre-training
run or for one run of the fine-tuning experiment, validated once, here.

Every setting and its bounds come from `training.settings` (TrainConfig, FinetuneConfig) and `policy` (the app's caps);
a value the form or an API caller sends is coerced to its setting's type, and the first setting that is not allowed is
named in the refusal. A model to continue or fine-tune is resolved in the catalogue and must be one this machine can
train."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_demo.app import policy
from bert_demo.app.policy import (
    APP_FINETUNE,
    APP_RUN,
    GOOGLE_BERTS,
    app_finetune_steps,
    check_batch_tokens,
    check_limits,
    form_default,
    shared_limits,
    well_read_model,
)
from bert_demo.app.state.catalog import Catalog
from bert_demo.app.folders import FOLDER
from bert_demo.app.uploads import corpus_upload
from bert_demo.config import PRESETS, BertConfig, read_config
from bert_demo.data.sources import APP_SOURCES, MIXES, SOURCES
from bert_demo.config import whole_number
from bert_demo.training.settings import (
    RECIPES,
    FinetuneConfig,
    TrainConfig,
    bounds,
    choices,
    kind,
    label,
)


@dataclass(frozen=True)
class Caps:
    """What one visitor's run may ask for on this machine: TrainConfig's caps for its kind (`limits` narrows them
    further, as tests do), and the largest upload."""

    machine: str = "cpu"
    limits: dict[str, Any] = field(default_factory=dict)
    max_upload_bytes: int = 10 * 1024 * 1024

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", {**shared_limits(self.machine), **self.limits})

    def bounds(self, name: str) -> tuple[Any, Any]:
        low, high = bounds(name)
        return low, self.limits.get(name, high)

    def choices(self, name: str) -> tuple:
        return tuple(self.limits.get(name, choices(name)))


class TooBig(ValueError):
    """A model bigger than the largest model size this machine trains (`Forms._check_trainable`)."""



class Forms:
    """The app's forms, read into checked configs for runs in `runs` on `device` (default: the catalogue's, where
    questions are answered): models come from `catalog`, bounds from `caps`."""

    def __init__(self, catalog: Catalog, caps: Caps, runs: Path, device: str | None = None):
        self.catalog, self.caps, self.runs, self.device = catalog, caps, runs, device

    def run_device(self) -> str:
        """Where runs train: a GPU call's CUDA on ZeroGPU, else where questions are answered."""
        return self.device or self.catalog.torch_device()

    def train_config(self, corpus: str | list[str] | tuple[str, ...] | None = APP_RUN["corpus"],
                     upload: str | Path | None = None, name: str | None = None, init_from: str | None = None,
                     viewer: str | None = None, recipe: str = "fast", **form: Any) -> TrainConfig:
        """A checked TrainConfig for a run in `runs/` from the form's values (FORM; where one is left out or None,
        `policy.form_default`) under a recipe (RECIPES: the app's fast one, or the paper's; a value of the form wins
        over the recipe's); `init_from` names a saved model to continue training instead of starting from random
        weights. ValueError names the first setting that is not allowed."""
        if recipe not in RECIPES:
            raise ValueError(f"the recipe is {' or '.join(RECIPES)}, not {str(recipe)[:40]!r}")
        unknown = set(form) - set(policy.FORM)
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))}: the form has {', '.join(policy.FORM)}")
        values = {key: _coerce(key, form[key]) if form.get(key) is not None
                  else form_default(key, self.caps.machine, recipe) for key in policy.FORM}
        sources = [corpus] if isinstance(corpus, str) else list(corpus or [])
        sources = [s.strip() for part in sources for s in str(part).split(",") if s.strip()]
        bad = next((s for s in sources if s not in APP_SOURCES), None)
        if bad in MIXES or (bad in SOURCES and SOURCES[bad].training):
            raise ValueError(f"{bad} is too large to train on in the app: use the command line "
                             f"(python -m bert_demo train --corpus {bad}), or choose from {', '.join(APP_SOURCES)}")
        if bad is not None:
            raise ValueError(f"unknown corpus {bad!r}: choose from {', '.join(APP_SOURCES)} or upload a .txt file")
        if not sources and not upload:
            raise ValueError("choose a corpus or upload a .txt file to train on")
        check_limits(values, self.caps.limits)
        check_batch_tokens(values["batch_size"], values["seq_len"], self.caps.machine)
        folder = self._continuable(init_from, viewer) if init_from else None
        start = f"{folder.name}-continued" if folder else values["preset"]
        run_name = name or f"{start}-{'-'.join([*sources, *(['upload'] if upload else [])])}-" \
                           f"{time.strftime('%Y%m%d-%H%M%S')}"
        if not FOLDER.fullmatch(run_name):
            raise ValueError(f"{run_name!r} is not a valid run name")
        steps = values["steps"]
        settings = dict(**{**RECIPES[recipe], **values}, init_from=str(folder) if folder else None,
                        log_every=max(1, steps // 50), eval_every=max(10, math.ceil(steps / 6)), save_every=10**9,
                        save_optimizer=False,  # the app never resumes a run: AdamW's moments would be 2/3 of its bytes
                        device=self.run_device(), out=str(self.runs / run_name))
        TrainConfig(**settings, corpus=",".join(sources) or "upload")  # checked before the upload is copied
        if upload:  # last: every refusal above leaves nothing behind
            copy = corpus_upload(Path(upload), alone=not sources, max_bytes=self.caps.max_upload_bytes)
            sources = [*sources, str(copy)]
        return TrainConfig(**settings, corpus=",".join(sources))

    def finetune_config(self, model: str, task: str, train_examples: int | None, init: str,
                        upload: str | Path | None = None, viewer: str | None = None, well_read: bool = False,
                        stamp: str | None = None) -> FinetuneConfig:
        """A checked FinetuneConfig for one run of the app's fine-tuning experiment, in `runs/`: the encoder of
        `model` (or its architecture from random weights, `init`) trained on a named task, or on `upload` (the
        private copy of a visitor's labelled file), with the app's budget (APP_FINETUNE). The task is read now, so a
        file that cannot be trained on is refused at once. `well_read` instead fine-tunes the well-read start of
        `model`'s shape (`settings.well_read_model`), from the hub. The runs of one experiment share their
        folder names' `stamp` (default: now), by which the page finds them again."""
        from bert_demo.data import labelled

        folder = self._continuable(model, viewer, verb="fine-tuned")
        stem = folder.name
        if well_read:
            folder, stem = self._well_read(read_config(folder))
        if train_examples not in APP_FINETUNE["label_counts"]:
            shown = ", ".join(str(n or "all") for n in APP_FINETUNE["label_counts"])
            raise ValueError(f"labelled sentences: choose {shown}, not {train_examples!r}")
        if upload:
            data, task = labelled.load_file(upload), str(upload)
            rows = sum(map(len, data.values()))
            if rows > APP_FINETUNE["max_upload_examples"]:  # each run scores its validation split five times
                raise ValueError(f"the labelled file has {rows:,} examples; the app fine-tunes on at most "
                                 f"{APP_FINETUNE['max_upload_examples']:,} (the command line takes up to "
                                 f"{labelled.MAX_EXAMPLES:,})")
        elif task in labelled.TASKS:
            data = labelled.load_task(task)
        else:
            raise ValueError(f"unknown task {task!r}: choose from {', '.join(labelled.TASKS)}, or upload a labelled "
                             f"{', '.join(labelled.FILE_TYPES)} file")
        examples = min(train_examples or len(data["train"]), len(data["train"]))
        train_examples = examples if train_examples else None  # what the run trains on, said as it is
        steps = app_finetune_steps(examples)
        stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
        return FinetuneConfig(model=str(folder), task=task, init=init, train_examples=train_examples, steps=steps,
                              outside="none" if upload else APP_FINETUNE["outside"].get(task, "none"),
                              device=self.run_device(), save_optimizer=False,
                              eval_every=max(1, steps // APP_FINETUNE["validations"]), log_every=max(1, steps // 20),
                              out=str(self.runs / f"{stem}-{'upload' if upload else task}-"
                                                  f"{train_examples or 'all'}-{init}-{stamp}"))

    def fine_tunable(self, name: str, viewer: str | None = None) -> bool:
        """Whether this machine can fine-tune the model `name`: a saved model no bigger than the machine trains."""
        try:
            self._continuable(name, viewer, verb="fine-tuned")
        except ValueError:
            return False
        return True

    def _continuable(self, name: str, viewer: str | None, verb: str = "continued") -> Path:
        """The folder of a saved model this machine may go on training: not the live run, not a hub id, and no
        bigger than the largest model size the machine trains from scratch."""
        entry = self.catalog.resolve(name, viewer)
        if entry.folder is None or entry.config is None:
            raise ValueError(f"only a saved model can be {verb}, not {entry.label}: choose a checkpoint or a "
                             "finished run")
        self._check_trainable(entry.label, entry.config)
        return entry.folder

    def _well_read(self, shape: BertConfig) -> tuple[Path, str]:
        """The folder (in the hub's cache, fetched if need be) and name of Google's BERT of `shape`, the selected
        model's; refused with a message, and no server path, where Google published none of that shape, the hub is
        off or unreachable, or the model is bigger than this machine trains (checked on its config, before the
        weights are fetched)."""
        from bert_demo import checkpoint

        layers, hidden = shape.num_hidden_layers, shape.hidden_size
        google = well_read_model(layers, hidden)
        if google is None:
            shapes = ", ".join(f"{n} ({depth} layers of {h})" for (depth, h), (_, n) in GOOGLE_BERTS.items())
            raise ValueError(f"Google published no BERT of the selected model's shape ({layers} layers of {hidden}); "
                             f"{shapes} have one: leave the well-read model out of the comparison")
        name, label = google
        leave_out = f"leave {label} out of the comparison"
        if not self.catalog.allow_hub:
            raise ValueError(f"{name} comes from the Hugging Face Hub, which this app is set not to reach: "
                             f"{leave_out}")
        try:
            folder = checkpoint.download(name, cache_dir=self.catalog.hub_cache,
                                                   check=lambda config: self._check_trainable(name, config))
        except TooBig:  # `check`'s own refusal: already a message for the visitor
            raise
        except ValueError as exc:
            reason = ("the hub may be unreachable from here" if str(exc).startswith("could not download")
                      else "its files there are not a BERT this app loads")
            raise ValueError(f"could not fetch {name} from the Hugging Face Hub: {reason}; {leave_out}") from None
        return folder, name.split("/")[-1]

    def _check_trainable(self, label: str, config) -> None:
        """Refuse a model bigger than the largest model size this machine trains from scratch."""
        allowed = {preset: PRESETS[preset] for preset in self.caps.choices("preset")}
        if all(config.hidden_size > c.hidden_size or config.num_hidden_layers > c.num_hidden_layers
               for c in allowed.values()):
            raise TooBig(f"{label} is bigger than the models this machine trains ({', '.join(allowed)})")


def _coerce(name: str, value: Any) -> Any:
    """A form value as its setting's type: sliders send 150.0 for 150; text is refused with the setting's name."""
    setting_kind = kind(name)
    if setting_kind in (str, bool):  # TrainConfig's own check names a value of the wrong kind
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        kind_text = "whole number" if setting_kind is int else "number"
        raise ValueError(f"{label(name)} must be a {kind_text}, got {value!r}") from None
    return whole_number(number, label(name)) if setting_kind is int else number
