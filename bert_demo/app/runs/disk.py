"""The runs the app trains, on disk: the folder each claims, the budget they share, and the pruning of old ones.

All the app's runs may fill `budget` bytes, one visitor's runs a quarter of it and one address's half; a run that
would pass any of these is refused with a message, and nobody's fresh run is deleted to make room. Runs older than
an hour beyond the newest `max_runs` are deleted as new ones start; runs from the command line never are.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bert_demo.app.visitors import same_address
from bert_demo.app.folders import model_folders, prune_downloads
from bert_demo.app.uploads import start_folder
from bert_demo.config import PRESETS, read_config, read_metadata
from bert_demo.processes import alive
from bert_demo.training.settings import RunConfig

log = logging.getLogger(__name__)

MAX_RUNS = 20  # the runs this app trained that are kept (BERT_DEMO_MAX_RUNS); older ones go as new ones start
MIN_RUN_AGE_S = 3600.0  # a run trained here is kept at least this long, however many runs follow it
RUNS_BUDGET_BYTES = 2 * 2**30  # all the runs this app trained, on disk (BERT_DEMO_RUNS_BUDGET_MB); one mini run
VISITOR_SHARE = 0.25  # writes up to about 160 MB (weights, timeline); one visitor's runs may fill this much of it
ADDRESS_SHARE = 0.5  # and the runs from one address this much (a classroom behind one router shares an address)
CLAIM_PREFIX = ".claimed-by-"  # then the process id: a run folder's marker until its first save replaces it


class Disk:
    """The runs/ folder of one app: what its runs hold and may still write, and who started each."""

    def __init__(self, root: Path, budget: int = RUNS_BUDGET_BYTES, max_runs: int = MAX_RUNS):
        self.root, self.budget, self.max_runs = root, budget, max_runs
        self.min_run_age_s = MIN_RUN_AGE_S
        self.claimed: dict[Path, str | None] = {}  # the run folders this app claimed, with the visitor of each

    def claim(self, out: str, owner: str | None) -> str:
        """A new folder for a run (see `claim_folder`), remembered as `owner`'s."""
        folder = claim_folder(out)
        self.claimed[Path(folder).resolve()] = owner
        return folder

    def check(self, config: RunConfig, owner: str | None, job: Any) -> None:
        """Refuse a run that would take runs/ past its budget, its visitor past their share of it, or their
        address past its share, with a clear message. `job` is the run in progress (or None): what it will still
        write counts as written."""
        need = run_bytes(config)
        held = [(self.claimed.get(f), folder_bytes(f)) for f in self.app_runs()]  # (owner, bytes) of each run
        if job is not None and job.running:
            written = folder_bytes(Path(job.trainer.config.out))
            held.append((job.owner, max(0, run_bytes(job.trainer.config) - written)))
        used = sum(size for _, size in held)
        if used + need > self.budget:
            raise ValueError(f"the runs trained here fill {_mb(used)} of the {_mb(self.budget)} this app keeps "
                             f"for them, and this run would write up to {_mb(need)}: try again later (runs older than "
                             "an hour make room as new ones start), or choose fewer steps or a smaller model")
        mine = sum(size for holder, size in held if owner is not None and holder == owner)
        share = int(self.budget * VISITOR_SHARE)
        if owner is not None and mine + need > share:
            raise ValueError(f"your runs here fill {_mb(mine)} of the {_mb(share)} one visitor may use, and this run "
                             f"would write up to {_mb(need)}: download what you want to keep, and try again once "
                             "your older runs have been cleared (after an hour), or choose fewer steps or a smaller "
                             "model")
        network = sum(size for holder, size in held if same_address(owner, holder))
        share = int(self.budget * ADDRESS_SHARE)
        if network and network + need > share:
            raise ValueError(f"the runs from your network fill {_mb(network)} of the {_mb(share)} one network may "
                             f"use, and this run would write up to {_mb(need)}: try again once older runs have been "
                             "cleared (after an hour), or choose fewer steps or a smaller model")

    def app_runs(self) -> list[Path]:
        """The folders of the runs this app trained: saved ones, and those claimed by runs still writing."""
        saved = {f.resolve() for f in model_folders(self.root) if read_metadata(f).get("origin") == "app"}
        claimed = {f for f in self.claimed if f.is_dir()}
        return sorted(saved | claimed)

    def prune(self, keep: int, protect: Path | None = None) -> None:
        """Delete the oldest runs this app trained beyond the newest `keep`, with their zips, and what writers
        killed mid-save left in runs/ (an app stopped by a crash or `kill`).

        Runs from the CLI are never deleted, and neither is a run younger than `min_run_age_s`: one visitor starting
        run after run cannot erase what another trained a moment ago (runs/ may then hold more than `keep` runs for
        a while; one run trains at a time, so they are few). Nor is `protect`, the model a new run starts from.
        """
        from bert_demo import checkpoint

        checkpoint.recover_leftovers(self.root)
        runs = [f for f in model_folders(self.root) if read_metadata(f).get("origin") == "app"]
        runs.sort(key=lambda f: f.stat().st_mtime, reverse=True)
        now = time.time()
        for folder in runs[max(keep, 0):]:
            if now - folder.stat().st_mtime >= self.min_run_age_s and (
                    protect is None or folder.resolve() != protect.resolve()):
                log.info("deleting old run %s", folder)
                shutil.rmtree(folder, ignore_errors=True)
                prune_downloads(name=f"runs/{folder.name}")
        self.claimed = {f: owner for f, owner in self.claimed.items() if f.is_dir()}


def run_bytes(config: RunConfig) -> int:
    """The most a run writes: its fp32 weights, and its timeline's fp16 snapshots within their budget."""
    from bert_demo.training import timeline

    start = start_folder(config)
    model = read_config(start) if start else PRESETS[config.preset].with_vocab(config.vocab_size)
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
                not pid.isdigit() or not alive(int(pid))):
            shutil.rmtree(marker.parent, ignore_errors=True)
