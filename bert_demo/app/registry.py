"""The app's backend state: one `Registry` serves every visitor, with the catalogue of models and the training slot.

Where models and runs live comes from the arguments, else from the environment:
BERT_DEMO_CHECKPOINTS (shipped models, ./checkpoints), BERT_DEMO_RUNS (runs trained in the app, ./runs),
BERT_DEMO_MODELS_DIR (one more folder, listed as models/<name>), BERT_DEMO_DEVICE (cpu or cuda), BERT_DEMO_HUB ("0"
refuses hub ids: a Space owner turns hub loading off with it), BERT_DEMO_HUB_CACHE (where hub models are downloaded)
BERT_DEMO_MAX_RUNS (runs kept in runs/, oldest deleted when a new one starts; default 20) and BERT_DEMO_RUNS_BUDGET_MB
(what all those runs may fill on disk; default 2048, a quarter of it for one visitor).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bert_demo.app.models import Catalog, visible_device
from bert_demo.app.runs import Caps, Runs, sweep_claims, sweep_private_copies

DEVICE_ENV, CHECKPOINTS_ENV, RUNS_ENV = "BERT_DEMO_DEVICE", "BERT_DEMO_CHECKPOINTS", "BERT_DEMO_RUNS"
EXTRA_ENV, HUB_ENV, MAX_RUNS_ENV = "BERT_DEMO_MODELS_DIR", "BERT_DEMO_HUB", "BERT_DEMO_MAX_RUNS"
HUB_CACHE_ENV = "BERT_DEMO_HUB_CACHE"
RUNS_BUDGET_ENV = "BERT_DEMO_RUNS_BUDGET_MB"  # bytes all the app's runs may fill on disk, in MB (default 2048)  # hub downloads (default: a folder in the temp dir, newest 5 models kept)


class Registry(Catalog, Runs):
    """Models by name (`Catalog`) and the one training run with its line (`Runs`)."""

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
        self.device = device or os.environ.get(DEVICE_ENV) or visible_device()
        self._fixed_caps = caps
        self.allow_hub = os.environ.get(HUB_ENV, "1") != "0" if allow_hub is None else allow_hub
        self.cache_size = cache_size
        self.hub_cache = Path(os.environ.get(HUB_CACHE_ENV) or Path(tempfile.gettempdir()) / "bert-demo-hub")
        self._init_catalog()
        sweep_private_copies()  # what a killed app left of its visitors' private text
        sweep_claims(self.roots["runs"])  # and the folders of runs it was starting
        budget_mb = os.environ.get(RUNS_BUDGET_ENV)
        self._init_runs(max_runs=int(os.environ.get(MAX_RUNS_ENV) or 20),
                        **({"budget_bytes": int(budget_mb) * 2**20} if budget_mb else {}))
