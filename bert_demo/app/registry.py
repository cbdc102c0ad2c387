"""The app's backend state, one `Registry` for every visitor, made of parts that each hold one idea: the catalogue
of models (`catalog`), the visitors' forms read into configs (`forms`), the runs on disk (`disk`) and the training
slot with its line (`slot`). Each part is handed what it needs: the catalogue asks the slot for the run in progress
through a function, the forms read models from the catalogue, the slot writes into the disk.

Where models and runs live comes from the arguments, else from the environment:
BERT_DEMO_CHECKPOINTS (shipped models, ./checkpoints), BERT_DEMO_RUNS (runs trained in the app, ./runs),
BERT_DEMO_MODELS_DIR (one more folder, listed as models/<name>), BERT_DEMO_DEVICE (cpu or cuda), BERT_DEMO_HUB ("0"
refuses hub ids: a Space owner turns hub loading off with it), BERT_DEMO_HUB_CACHE (where hub models are downloaded;
default: a folder in the temp dir, newest 5 models kept), BERT_DEMO_MAX_RUNS (runs kept in runs/, oldest deleted when
a new one starts; `disk.MAX_RUNS`) and BERT_DEMO_RUNS_BUDGET_MB (what all those runs may fill on disk; default 2048, a
quarter of it for one visitor).

On ZeroGPU (`zerogpu.on_zerogpu()`) questions are answered on the CPU and runs train in GPU calls
(`zerogpu.GPU_TRAINING`), with the GPU's caps.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from bert_demo.app.machine import import_heavy, start_beside_the_page, visible_device
from bert_demo.app.runs import estimates
from bert_demo.app.runs.gpu_call import call_seconds
from bert_demo.app.runs import run_process
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.slot import Slot, Ticket
from bert_demo.app.runs.zerogpu import GPU_TRAINING, GPUCall
from bert_demo.app.state.catalog import Catalog
from bert_demo.app.runs.disk import MAX_RUNS, RUNS_BUDGET_BYTES, Disk, sweep_claims
from bert_demo.app.state.forms import Caps, Forms
from bert_demo.app.uploads import sweep_private_copies
from bert_demo.config import hub_cache
from bert_demo.training.settings import RunConfig

DEVICE_ENV, CHECKPOINTS_ENV, RUNS_ENV = "BERT_DEMO_DEVICE", "BERT_DEMO_CHECKPOINTS", "BERT_DEMO_RUNS"
EXTRA_ENV, HUB_ENV, MAX_RUNS_ENV = "BERT_DEMO_MODELS_DIR", "BERT_DEMO_HUB", "BERT_DEMO_MAX_RUNS"
RUNS_BUDGET_ENV = "BERT_DEMO_RUNS_BUDGET_MB"
WARM_UP_TEXT = "the cat sat on the [MASK]."  # the fill-mask asked of the default model as the app starts

log = logging.getLogger(__name__)


class Registry:
    """The catalogue, the forms, the disk and the training slot of one app."""

    def __init__(self, checkpoints_dir: str | Path | None = None, runs_dir: str | Path | None = None,
                 extra_dir: str | Path | None = None, device: str | None = None, cache_size: int = 3,
                 allow_hub: bool | None = None, caps: Caps | None = None, gpu_call: GPUCall | None = None,
                 run_device: str | None = None):
        """`device` answers questions; runs train on `run_device` (default: the same), in calls of `gpu_call` where
        there is one (default: ZeroGPU's, on ZeroGPU), whose process alone has a GPU: there questions are answered
        on the CPU and runs train on CUDA."""
        roots = {"checkpoints": Path(checkpoints_dir or os.environ.get(CHECKPOINTS_ENV) or "checkpoints"),
                 "runs": Path(runs_dir or os.environ.get(RUNS_ENV) or "runs")}
        extra = extra_dir or os.environ.get(EXTRA_ENV)
        if extra:
            roots["models"] = Path(extra)
        self.roots = roots
        gpu_call = gpu_call or GPU_TRAINING
        run_device = run_device or ("cuda" if gpu_call else None)
        self.device = device or os.environ.get(DEVICE_ENV) or ("cpu" if gpu_call else visible_device())
        self.caps = caps or Caps("gpu" if gpu_call or (run_device or self.device).startswith("cuda") else "cpu")
        hub = os.environ.get(HUB_ENV, "1") != "0" if allow_hub is None else allow_hub
        budget_mb = os.environ.get(RUNS_BUDGET_ENV)
        self.disk = Disk(roots["runs"], int(budget_mb) * 2**20 if budget_mb else RUNS_BUDGET_BYTES,
                         max_runs=int(os.environ.get(MAX_RUNS_ENV) or MAX_RUNS))
        self.slot = Slot(self.disk)
        self.slot.gpu_call = gpu_call
        self.slot.estimate = self.runs_seconds
        self.catalog = Catalog(roots, self.device, hub, hub_cache(app=True), live=lambda: self.slot.job,
                               cache_size=cache_size)
        self.forms = Forms(self.catalog, self.caps, roots["runs"], run_device)
        sweep_private_copies()  # what a killed app left of its visitors' private text
        sweep_claims(roots["runs"])  # and the folders of runs it was starting

    @property
    def runs_on(self) -> str:
        """Where visitors' runs train, in words: ZeroGPU's calls, or a device."""
        return "ZeroGPU: each run in a GPU call" if self.slot.gpu_call else self.forms.run_device()

    def runs_seconds(self, configs: list[RunConfig]) -> float | None:
        """How long runs of checked configs would take here, one after the other, told without timing anything (a
        visitor's Start must not wait for a measurement): on ZeroGPU their calls' lengths, else the first one's plan
        at the pace known for its shape (`estimates.known_pace`: the run training now's, or the latest measurement,
        which the form's own estimate took), each run of an experiment taken to last as long (its starts share their
        steps and their model's shape); None where no pace is known, or the plan cannot be made (the model or the
        labelled examples are gone). The training line is bounded by it (`Slot.estimate`)."""
        if self.slot.gpu_call is not None:
            return float(sum(map(call_seconds, configs)))
        try:
            planned = estimates.plan(configs[0])
        except (OSError, ValueError, KeyError):
            return None
        at = estimates.known_pace(self.slot.job, planned.shape)
        return None if at is None else len(configs) * planned.seconds(at)

    def warm_up(self) -> threading.Thread:
        """As the app starts, in a background thread: import torch, start what runs beside the page (the runs' fork
        server, the heap's timer: `machine.start_beside_the_page`), load the default model and answer one fill-mask
        with it, so that the first question is answered at the pace of the next. A question that comes sooner waits
        for the same import and load, no longer."""
        def warm() -> None:
            started = time.perf_counter()
            try:
                import_heavy()
                start_beside_the_page(run_process.warm_up)
                from bert_demo import inference

                default = self.catalog.default_model()
                if default is not None:
                    loaded = self.catalog.load(default)
                    inference.layer_predictions(loaded.model, loaded.tokenizer, WARM_UP_TEXT, 3)
                log.info("warmed up in %.1f s (model %s)", time.perf_counter() - started, default)
            except Exception:  # noqa: BLE001  a model that cannot answer is refused with its message when asked
                log.exception("warming up failed: the first question will load what it needs")

        thread = threading.Thread(target=warm, name="warm-up", daemon=True)
        thread.start()
        return thread

    def join_line(self, owner: str | None = None, share: bool = False, **settings: Any) -> Ticket:
        """A place in line for a pre-training run from the form's settings (`Forms.train_config`), checked at once;
        the slot starts it when its turn comes (`Slot.join`)."""
        return self.slot.join({"run": self.forms.train_config(**settings, viewer=owner)}, owner, share)

    def start_training(self, owner: str | None = None, share: bool = False, **settings: Any) -> TrainingJob:
        """A pre-training run from the form's settings, started now: the backend's way in (visitors wait in line)."""
        return self.slot.start(self.forms.train_config(**settings, viewer=owner), owner, share)
