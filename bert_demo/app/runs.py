"""The app's one training slot: the form's settings checked against the machine's caps, uploads, a short line of
waiting visitors, the job thread that follows a run's `run()` (in a process of its own on a CPU), and the pruning of
old runs.

One run trains at a time for everyone. A visitor has at most one run waiting or training, only that visitor can stop
it, and at most `max_waiting` visitors wait: more are refused at once, so that queued runs never fill the queue that
inference shares. Inference on the run in progress uses the run's `snapshot()`, a copy taken between optimizer steps.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_demo.app.backend import backend
from bert_demo.app.run_process import ProcessTrainer, run_for
from bert_demo.app.visitors import same_address
from bert_demo.app.models import (
    FOLDER,
    LIVE,
    Loaded,
    ModelEntry,
    model_folders,
    prune_downloads,
    visible_to,
)
from bert_demo.config import PRESETS, read_config, read_metadata
from bert_demo.corpus import load_corpus
from bert_demo.records import DoneRecord, Record
from bert_demo.sources import APP_SOURCES, MIXES, SOURCES
from bert_demo.train_config import (
    APP_FINETUNE,
    APP_RUN,
    FinetuneConfig,
    RunConfig,
    TrainConfig,
    bounds,
    choices,
    kind,
    label,
    shared_limits,
)

log = logging.getLogger(__name__)

MIN_RUN_AGE_S = 3600.0  # a run trained here is kept at least this long, however many runs follow it
RUNS_BUDGET_BYTES = 2 * 2**30  # all the runs this app trained, on disk (BERT_DEMO_RUNS_BUDGET_MB); one mini run
VISITOR_SHARE = 0.25  # writes up to about 160 MB (weights, timeline); one visitor's runs may fill this much of it
ADDRESS_SHARE = 0.5  # and the runs from one address this much (a classroom behind one router shares an address)
ADDRESS_PLACES = 2  # the places in the training line (the slot included) that the runs from one address may hold
MAX_WAITING = 4  # visitors who may wait in line for the training slot; more are refused at once
WAIT_POLL_S = 1.0  # how often a waiting visitor's place in line is re-checked and shown
CLAIM_PREFIX = ".claimed-by-"  # then the process id: a run folder's marker until its first save replaces it
UPLOAD_PREFIX = "bert-demo-upload-"  # then the app's process id: a copy whose process is gone is swept at start
MAX_WORD_CHARS = 100  # WordPiece reads a longer word as [UNK]; thousands of letters a word stall its training
FORM = ("preset", "steps", "batch_size", "lr", "seq_len", "vocab_size")  # the settings a visitor chooses


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


@dataclass(eq=False)
class Ticket:
    """A visitor's place in the line for the training slot."""

    owner: str | None
    cancelled: bool = False


class TooBig(ValueError):
    """A model bigger than the largest model size this machine trains (`Runs._check_trainable`)."""


class Runs:
    """The training slot. Part of `Registry`, which gives it `roots`, `device` and the catalogue of models."""

    roots: dict[str, Path]
    device: str
    _fixed_caps: Caps | None

    def _init_runs(self, max_runs: int, budget_bytes: int = RUNS_BUDGET_BYTES) -> None:
        self.job: TrainingJob | None = None
        self.line: list[Ticket] = []  # visitors waiting for the training slot, first in line first
        self.max_waiting = MAX_WAITING
        self.max_runs = max_runs
        self.runs_budget = budget_bytes
        self._claimed: dict[Path, str | None] = {}  # the run folders this app claimed, with the visitor who started each
        self.min_run_age_s = MIN_RUN_AGE_S
        self.finish_wait_s = 30.0  # how long a new run waits for the previous one to save its checkpoint
        self._runs_lock = threading.RLock()
        self.train_in_process = True  # on a CPU (see run_process); False: in a thread of this process

    @property
    def caps(self) -> Caps:
        return self._fixed_caps or Caps("gpu" if self.device.startswith("cuda") else "cpu")

    def train_config(self, corpus: str | list[str] | tuple[str, ...] | None = APP_RUN["corpus"],
                     upload: str | Path | None = None, name: str | None = None, init_from: str | None = None,
                     viewer: str | None = None, **form: Any) -> TrainConfig:
        """A checked TrainConfig for a run in `runs/` from the form's values (APP_RUN where one is left out);
        `init_from` names a saved model to continue training instead of starting from random weights.
        ValueError names the first setting that is not allowed."""
        unknown = set(form) - set(FORM)
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))}: the form has {', '.join(FORM)}")
        values = {key: _coerce(key, form.get(key, APP_RUN[key])) for key in FORM}
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
        steps = values["steps"]
        config = TrainConfig(**values, corpus=",".join(sources) or "upload", log_every=max(1, steps // 50),
                             eval_every=max(10, math.ceil(steps / 6)), save_every=10**9, device=self.torch_device())
        config.validate(self.caps.limits)
        start = config.preset
        if init_from:
            folder = self._continuable(init_from, viewer)
            config.init_from, start = str(folder), f"{folder.name}-continued"
        run_name = name or f"{start}-{'-'.join([*sources, *(['upload'] if upload else [])])}-" \
                           f"{time.strftime('%Y%m%d-%H%M%S')}"
        if not FOLDER.fullmatch(run_name):
            raise ValueError(f"{run_name!r} is not a valid run name")
        config.out = str(self.roots["runs"] / run_name)
        if upload:  # last: every refusal above leaves nothing behind
            config.corpus = ",".join([*sources, str(self._check_upload(Path(upload), alone=not sources))])
        return config

    def finetune_config(self, model: str, task: str, train_examples: int | None, init: str,
                        upload: str | Path | None = None, viewer: str | None = None, well_read: bool = False
                        ) -> FinetuneConfig:
        """A checked FinetuneConfig for one run of the app's fine-tuning experiment, in `runs/`: the encoder of
        `model` (or its architecture from random weights, `init`) trained on a named task, or on `upload` (the
        private copy of a visitor's labelled file), with the app's budget (APP_FINETUNE). The task is read now, so a
        file that cannot be trained on is refused at once. `well_read` instead fine-tunes the well-read start,
        APP_FINETUNE["well_read"], from the hub (`model` is then not read)."""
        if well_read:
            folder, stem = self._well_read(), APP_FINETUNE["well_read"].split("/")[-1]
        else:
            folder = self._continuable(model, viewer, verb="fine-tuned")
            stem = folder.name
        if train_examples not in APP_FINETUNE["label_counts"]:
            shown = ", ".join(str(n or "all") for n in APP_FINETUNE["label_counts"])
            raise ValueError(f"labelled sentences: choose {shown}, not {train_examples!r}")
        labelled = backend().labelled
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
        steps = min(math.ceil(APP_FINETUNE["epochs"] * examples / FinetuneConfig.batch_size),
                    APP_FINETUNE["max_steps"])
        config = FinetuneConfig(model=str(folder), task=task, init=init, train_examples=train_examples, steps=steps,
                                outside="none" if upload else APP_FINETUNE["outside"].get(task, "none"),
                                device=self.torch_device(),
                                eval_every=max(1, steps // APP_FINETUNE["validations"]), log_every=max(1, steps // 20))
        config.validate()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        config.out = str(self.roots["runs"] / f"{stem}-{'upload' if upload else task}-"
                                              f"{train_examples or 'all'}-{init}-{stamp}")
        return config

    def _continuable(self, name: str, viewer: str | None, verb: str = "continued") -> Path:
        """The folder of a saved model this machine may go on training: not the live run, not a hub id, and no
        bigger than the largest model size the machine trains from scratch."""
        entry = self.resolve(name, viewer)
        if entry.folder is None or entry.config is None:
            raise ValueError(f"only a saved model can be {verb}, not {entry.label}: choose a checkpoint or a "
                             "finished run")
        self._check_trainable(entry.label, entry.config)
        return entry.folder

    def _well_read(self) -> Path:
        """The folder of the experiment's well-read start (APP_FINETUNE["well_read"]) in the hub's cache, fetched if
        need be; refused with a message, and no server path, where the hub is off or unreachable, or the model is
        bigger than this machine trains (checked on its config, before the weights are fetched)."""
        name, leave_out = APP_FINETUNE["well_read"], "leave Google's BERT-Mini out of the comparison"
        if not self.allow_hub:
            raise ValueError(f"{name} comes from the Hugging Face Hub, which this app is set not to reach: "
                             f"{leave_out}")
        try:
            return backend().checkpoint.download(name, cache_dir=self.hub_cache,
                                                 check=lambda config: self._check_trainable(name, config))
        except TooBig:  # `check`'s own refusal: already a message for the visitor
            raise
        except ValueError as exc:
            reason = ("the hub may be unreachable from here" if str(exc).startswith("could not download")
                      else "its files there are not a BERT this app loads")
            raise ValueError(f"could not fetch {name} from the Hugging Face Hub: {reason}; {leave_out}") from None

    def _check_trainable(self, label: str, config) -> None:
        """Refuse a model bigger than the largest model size this machine trains from scratch."""
        allowed = {preset: PRESETS[preset] for preset in self.caps.choices("preset")}
        if all(config.hidden_size > c.hidden_size or config.num_hidden_layers > c.num_hidden_layers
               for c in allowed.values()):
            raise TooBig(f"{label} is bigger than the models this machine trains ({', '.join(allowed)})")

    def _check_upload(self, path: Path, alone: bool) -> Path:
        """Check an uploaded text file, read it, and return a private copy under a name of our choosing (a visitor's
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
        folder = Path(tempfile.mkdtemp(prefix=f"{UPLOAD_PREFIX}{os.getpid()}-"))
        target = folder / "upload.txt"
        shutil.copyfile(path, target)
        try:  # read it now, so that a file we cannot train on is refused at once, not when the run starts
            documents = load_corpus(str(target))
            _check_words(documents)
            if alone:
                backend().pretraining_data.split_documents(documents, TrainConfig.val_fraction, TrainConfig.seed)
        except ValueError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            reason = str(exc)
            for shown in {str(target.resolve()), str(target)}:  # never show a visitor the server's temporary paths
                reason = reason.replace(shown, "it")
            raise ValueError(f"the uploaded file cannot be trained on: {reason}") from None
        return target

    def train_in_line(self, owner: str | None = None, share: bool = False, **settings: Any
                      ) -> Iterator[str | TrainingJob]:
        """Check the settings at once, wait in line for the training slot, then start the run.

        Yields a status line every WAIT_POLL_S while others go first, and the started job last. Closing the
        generator (the visitor left) or `stop_training` by the same owner gives the place up. A run trained on an
        upload is private to its owner unless `share` is set: its vocabulary and guesses would show the text.
        """
        yield from self.run_in_line(self.train_config(**settings, viewer=owner), owner, share)

    def run_in_line(self, config: RunConfig, owner: str | None = None, share: bool = False
                    ) -> Iterator[str | TrainingJob]:
        """`train_in_line` for a checked config of any run: pre-training (`train_config`) or fine-tuning
        (`finetune_config`)."""
        try:
            self._check_disk(config, owner)
            ticket = self._join_line(owner)
        except ValueError:
            remove_uploads(config)
            raise
        started = False
        try:
            while (ahead := self._ahead_of(ticket)) > 0 and not ticket.cancelled:
                yield (f"Waiting for the training slot: {ahead} run{'s' if ahead > 1 else ''} before yours "
                       f"(you are number {ahead} in line).{self._time_left_now()}")
                time.sleep(WAIT_POLL_S)
            if not ticket.cancelled:
                job = self._start(config, owner, share)
                started = True
                yield job
        finally:
            with self._runs_lock:
                if ticket in self.line:
                    self.line.remove(ticket)
            if not started:
                remove_uploads(config)

    def _join_line(self, owner: str | None) -> Ticket:
        with self._runs_lock:
            job = self.job
            holders = [t.owner for t in self.line] + ([job.owner] if job is not None and job.running else [])
            if owner is not None and owner in holders:
                raise ValueError("you already have a run training or waiting: stop it, or wait for it to end, "
                                 "before you start another")
            if sum(same_address(owner, holder) for holder in holders) >= ADDRESS_PLACES:
                raise ValueError(f"{ADDRESS_PLACES} runs from your network are already training or waiting, the most "
                                 "one network may have: wait for one of them to end")
            if len(self.line) >= self.max_waiting:
                raise ValueError(f"{len(self.line)} visitors are already waiting to train, the most this app lets "
                                 "wait: try again in a few minutes. Fill-mask, Next sentence and Attention work "
                                 "meanwhile")
            ticket = Ticket(owner)
            self.line.append(ticket)
            return ticket

    def _time_left_now(self) -> str:
        """What the run training now says of its time left, measured from its own pace ("" until it knows)."""
        job = self.job
        left = job.seconds_left if job is not None and job.running else None
        return f" The run training now has about {max(1, round(left / 60))} min left." if left is not None else ""

    def _ahead_of(self, ticket: Ticket) -> int:
        """How many runs go before this ticket's: the one training, and the tickets ahead of it in line."""
        with self._runs_lock:
            return self.line.index(ticket) + int(self.job is not None and self.job.running)

    def start_training(self, owner: str | None = None, share: bool = False, **settings: Any) -> TrainingJob:
        """Check the settings (see `train_config`) and start the run now in a background thread; ValueError if
        they are not allowed or another run is training (the backend's way in; visitors use `train_in_line`)."""
        return self._start(self.train_config(**settings, viewer=owner), owner, share)

    def _start(self, config: RunConfig, owner: str | None, share: bool) -> TrainingJob:
        """Start the run, after waiting a little for a previous one that is still saving its checkpoint."""
        with self._runs_lock:
            try:
                if self.job is not None and self.job.running:
                    self.job.thread.join(timeout=self.finish_wait_s)
                    if self.job.running:
                        raise ValueError(f"another run ({self.job.name}) is training: wait for it to end")
                self._prune_runs(keep=self.max_runs - 1, protect=_start_folder(config))
                self._check_disk(config, owner)
                in_process = self.train_in_process and config.device == "cpu"  # a GPU does not share the cores
                make = ProcessTrainer if in_process else run_for
                config.out = claim_folder(config.out)
                self._claimed[Path(config.out).resolve()] = owner
                trainer = make(config, origin="app", visible_to=private_to(config, owner, share))
            except ValueError:
                remove_uploads(config)
                remove_if_empty(config.out)
                raise
            self.job = TrainingJob(trainer, Path(config.out).name, owner=owner)
            self.job.start()
            return self.job

    def _check_disk(self, config: RunConfig, owner: str | None) -> None:
        """Refuse a run that would take runs/ past its byte budget, its visitor past their share of it, or their
        address past its share, with a clear message: the app never deletes someone's fresh run to make room (see
        `_prune_runs`)."""
        need = run_bytes(config)
        held = [(self._claimed.get(f), folder_bytes(f)) for f in self._app_runs()]  # (owner, bytes) of each run
        job = self.job
        if job is not None and job.running:  # what the run in progress will still write
            written = folder_bytes(Path(job.trainer.config.out))
            held.append((job.owner, max(0, run_bytes(job.trainer.config) - written)))
        used = sum(size for _, size in held)
        if used + need > self.runs_budget:
            raise ValueError(f"the runs trained here fill {_mb(used)} of the {_mb(self.runs_budget)} this app keeps "
                             f"for them, and this run would write up to {_mb(need)}: try again later (runs older than "
                             "an hour make room as new ones start), or choose fewer steps or a smaller model")
        mine = sum(size for holder, size in held if owner is not None and holder == owner)
        share = int(self.runs_budget * VISITOR_SHARE)
        if owner is not None and mine + need > share:
            raise ValueError(f"your runs here fill {_mb(mine)} of the {_mb(share)} one visitor may use, and this run "
                             f"would write up to {_mb(need)}: download what you want to keep, and try again once "
                             "your older runs have been cleared (after an hour), or choose fewer steps or a smaller "
                             "model")
        network = sum(size for holder, size in held if same_address(owner, holder))
        share = int(self.runs_budget * ADDRESS_SHARE)
        if network and network + need > share:
            raise ValueError(f"the runs from your network fill {_mb(network)} of the {_mb(share)} one network may "
                             f"use, and this run would write up to {_mb(need)}: try again once older runs have been "
                             "cleared (after an hour), or choose fewer steps or a smaller model")

    def _app_runs(self) -> list[Path]:
        """The folders of the runs this app trained: saved ones, and those claimed by runs still writing."""
        saved = {f.resolve() for f in model_folders(self.roots["runs"]) if read_metadata(f).get("origin") == "app"}
        claimed = {f for f in self._claimed if f.is_dir()}
        return sorted(saved | claimed)

    def stop_training(self, owner: str | None) -> bool:
        """Stop the run `owner` started, or give up its place in line; True if there was one.

        Only the visitor (browser session) who started a run may stop it; a request without a session stops
        nothing. The backend can always call `job.stop()` itself.
        """
        if owner is None:
            return False
        with self._runs_lock:
            for ticket in self.line:
                if ticket.owner == owner:
                    ticket.cancelled = True
                    return True
        job = self.job
        if job is None or not job.running or job.owner != owner:
            return False
        job.stop()
        return True

    def _prune_runs(self, keep: int, protect: Path | None = None) -> None:
        """Delete the oldest runs this app trained beyond the newest `keep`, with their zips, and what writers
        killed mid-save left in runs/ (an app stopped by a crash or `kill`).

        Runs from the CLI are never deleted, and neither is a run younger than `min_run_age_s`: one visitor starting
        run after run cannot erase what another trained a moment ago (runs/ may then hold more than `keep` runs for
        a while; one run trains at a time, so they are few).
        """
        backend().checkpoint.recover_leftovers(self.roots["runs"])
        runs = [f for f in model_folders(self.roots["runs"]) if read_metadata(f).get("origin") == "app"]
        runs.sort(key=lambda f: f.stat().st_mtime, reverse=True)
        now = time.time()
        for folder in runs[max(keep, 0):]:  # never the model the new run starts from (`protect`)
            if now - folder.stat().st_mtime >= self.min_run_age_s and (
                    protect is None or folder.resolve() != protect.resolve()):
                log.info("deleting old run %s", folder)
                shutil.rmtree(folder, ignore_errors=True)
                prune_downloads(name=f"runs/{folder.name}")
        self._claimed = {f: owner for f, owner in self._claimed.items() if f.is_dir()}


@dataclass
class TrainingJob:
    """A run followed in a daemon thread; its records are appended to `records` for readers to follow."""

    trainer: Any
    name: str
    owner: str | None = None
    records: list[Record] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self._changed = threading.Condition()
        self.thread = threading.Thread(target=self._run, name=f"train-{self.name}", daemon=True)
        self._live: tuple[int, Loaded] | None = None

    def start(self) -> None:
        atexit.register(self.shutdown)  # on exit (Ctrl-C included), stop the run and let it save
        self.thread.start()

    def _run(self) -> None:
        try:
            for record in self.trainer.run():
                self._append(record)
        except ValueError as exc:  # bad data or settings: a message for the visitor
            self._append(self._failed(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a run must always end with a record, never hang its readers
            log.exception("training run %s failed", self.name)
            self._append(self._failed(f"the run failed ({type(exc).__name__}: {exc})"))
        finally:
            if not self.records or self.records[-1].get("kind") != "done":
                self._append(self._rescued() or self._failed("the run ended without saving"))
            remove_uploads(self.trainer.config)
            remove_if_empty(self.trainer.config.out)  # a run that saved nothing leaves no folder behind
            self._release()
            atexit.unregister(self.shutdown)  # and let the finished job, with its model, be freed

    def _release(self) -> None:
        """Let go of what the ended run holds: its live copy answers nothing more, and on a GPU its model leaves the
        card's memory to the next run (visitors load the saved checkpoint now)."""
        self._live = None
        if str(self.trainer.config.device).startswith("cuda"):
            self.trainer.model = None
            backend().torch.cuda.empty_cache()

    def _rescued(self) -> DoneRecord | None:
        """What a run whose process died left: its weights saved from the app's shared copy where they are whole."""
        rescue = getattr(self.trainer, "rescue", None)  # a run in a thread of this process cannot die alone
        if rescue is None:
            return None
        try:
            return rescue()
        except (OSError, ValueError) as exc:
            log.warning("could not save what run %s left: %s", self.name, exc)
            return None

    def _failed(self, message: str) -> DoneRecord:
        return {"kind": "done", "reason": "error", "step": self.trainer.step, "message": message, "checkpoint": None}

    def _append(self, record: Record) -> None:
        with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    @property
    def done(self) -> DoneRecord | None:
        """The final record once the run has ended."""
        return self.records[-1] if self.records and self.records[-1].get("kind") == "done" else None

    @property
    def seconds_left(self) -> float | None:
        """Time left, from the run's measured pace between its first and latest training records (None before two:
        a guess from the settings alone would be wrong by an order of magnitude between a CPU and a GPU)."""
        train = [r for r in self.records if r.get("kind") == "train"]
        if len(train) < 2 or train[-1]["step"] <= train[0]["step"]:
            return None
        per_step = (train[-1]["elapsed"] - train[0]["elapsed"]) / (train[-1]["step"] - train[0]["step"])
        return per_step * (self.trainer.config.steps - train[-1]["step"])

    def stop(self) -> None:
        self.trainer.stop()

    def shutdown(self, timeout: float = 90.0) -> None:
        """Stop the run and wait for it to save, so the process never exits under a running thread."""
        if self.running:
            self.stop()
            self.thread.join(timeout=timeout)

    def wait(self, seen: int, timeout: float) -> list[Record]:
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
        loaded = Loaded(model, self.trainer.tokenizer, ModelEntry(LIVE, "run in progress", None, model.config), None)
        self._live = (step, loaded)
        return loaded


def private_to(config: RunConfig, owner: str | None, share: bool) -> str | None:
    """The browser session a new run is private to (None: everyone). A model trained from anything private stays
    private to its owner, whatever trains it next: a continued or fine-tuned private run is as private as the run it
    starts from. A run on an upload is private to its visitor unless they share it (its vocabulary and guesses, or
    its classes and answers, show the text)."""
    start = _start_folder(config)
    parent = visible_to(start) if start else None
    if parent is not None:
        return parent
    return owner if owner is not None and not share and has_upload(config) else None


def _start_folder(config: RunConfig) -> Path | None:
    """The saved model a run starts from: the one a fine-tuning run tunes, or the one a pre-training run continues."""
    start = config.model if isinstance(config, FinetuneConfig) else config.init_from
    return Path(start) if start else None


def run_bytes(config: RunConfig) -> int:
    """The most a run writes: its fp32 weights, and its timeline's fp16 snapshots within their budget."""
    start = _start_folder(config)
    model = read_config(start) if start else PRESETS[config.preset].with_vocab(config.vocab_size)
    timeline = backend().timeline
    snapshots = min(len(timeline.snapshot_steps(config.steps)) * 2 * model.num_parameters, timeline.BUDGET_BYTES)
    return 4 * model.num_parameters + snapshots + 2**20  # and a megabyte of vocabulary, config and records


def folder_bytes(folder: Path) -> int:
    """The bytes of the files in a folder and its subfolders (0 if it is gone)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


def _mb(size: int) -> str:
    return f"{size / 2**20:,.0f} MB"


def claim_folder(out: str) -> str:
    """A run's own folder, made now with an exclusive mkdir: a folder name ends in a timestamp to the second, so two
    runs started in the same second would otherwise write one folder, and one of them would be lost. The second
    gets `-2`, the third `-3`, and so on; nobody's folder is ever written over. A marker names this process until
    the run's first save replaces the folder, so that what a killed app claimed is swept (`sweep_claims`)."""
    base = Path(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    folder, number = base, 1
    while True:
        try:
            folder.mkdir()
            (folder / f"{CLAIM_PREFIX}{os.getpid()}").touch()
            return str(folder)
        except FileExistsError:
            number += 1
            folder = base.with_name(f"{base.name}-{number}")


def remove_if_empty(folder: str) -> None:
    """Give back a claimed run folder that nothing was saved to (rmdir refuses a folder with anything in it)."""
    with contextlib.suppress(OSError):
        (Path(folder) / f"{CLAIM_PREFIX}{os.getpid()}").unlink(missing_ok=True)
        Path(folder).rmdir()


def sweep_claims(root: Path) -> None:
    """Delete the run folders that a killed app claimed and never saved to: they hold nothing but the marker of a
    process that is gone. A live app's claims, and every saved run, are kept."""
    for marker in root.glob(f"*/{CLAIM_PREFIX}*"):
        pid = marker.name[len(CLAIM_PREFIX):]
        if [p.name for p in marker.parent.iterdir()] == [marker.name] and (
                not pid.isdigit() or not _process_alive(int(pid))):
            shutil.rmtree(marker.parent, ignore_errors=True)


def _check_words(documents: list[list[str]]) -> None:
    """Refuse text whose words no tokenizer can learn: a few words of 16,000 letters pass every size check, then
    stall the tokenizer's training for tens of seconds in the training slot."""
    longest = max((len(word) for document in documents for sentence in document for word in sentence.split()),
                  default=0)
    if longest > MAX_WORD_CHARS:
        raise ValueError(f"it has a word of {longest:,} characters; at most {MAX_WORD_CHARS} are allowed (a longer "
                         "word is not English prose)")


def sweep_private_copies() -> None:
    """Delete the private copies of uploads and typed text left in the temporary folder by an app that was killed
    mid-run (its process is gone); a live app's copies are kept."""
    for folder in Path(tempfile.gettempdir()).glob(f"{UPLOAD_PREFIX}*"):
        pid = folder.name[len(UPLOAD_PREFIX):].split("-", 1)[0]
        if folder.is_dir() and (not pid.isdigit() or not _process_alive(int(pid))):
            shutil.rmtree(folder, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    """Whether process `pid` runs (as checkpoint.py asks of a writer; kept here so that the app's start needs no
    torch)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def has_upload(config: RunConfig) -> bool:
    """Whether a run trains on a visitor's upload (our private copy of it): in its corpus list, or as its task."""
    sources = config.task if isinstance(config, FinetuneConfig) else config.corpus
    return any(_is_upload(Path(source)) for source in sources.split(","))


def _is_upload(path: Path) -> bool:
    return path.parent.name.startswith(UPLOAD_PREFIX) and path.parent.parent == Path(tempfile.gettempdir())


def remove_uploads(config: RunConfig) -> None:
    """Delete the private copies of uploaded text (see `Runs._check_upload`) in a pre-training run's corpus list
    when the run is over. A fine-tuning experiment's labelled file serves several runs: its handler deletes it."""
    for source in getattr(config, "corpus", "").split(","):
        if _is_upload(Path(source)):
            shutil.rmtree(Path(source).parent, ignore_errors=True)


def _coerce(name: str, value: Any) -> Any:
    """A form value as its setting's type: sliders send 150.0 for 150; text is refused with the setting's name."""
    setting_kind = kind(name)
    if setting_kind is str:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        kind_text = "whole number" if setting_kind is int else "number"
        raise ValueError(f"{label(name)} must be a {kind_text}, got {value!r}") from None
    if setting_kind is int:
        if not number.is_integer():
            raise ValueError(f"{label(name)} must be a whole number, got {value!r}")
        return int(number)
    return number
