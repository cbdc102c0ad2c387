"""The app's one training slot and its short line: one run trains at a time for everyone.

A visitor has at most one run waiting or training, the runs from one address at most `ADDRESS_PLACES`, only that
visitor can stop theirs, and at most `max_waiting` visitors wait: more are refused at once, so that queued runs
never fill the queue that the questions share. A run starts in a process of its own on a CPU
(`run_process.ProcessTrainer`), in a thread of this process on a GPU; `job.TrainingJob` follows it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_demo.app.disk import Disk, remove_if_empty
from bert_demo.app.job import TrainingJob
from bert_demo.app.run_process import ProcessTrainer, run_for
from bert_demo.app.uploads import private_to, remove_uploads, start_folder
from bert_demo.app.visitors import same_address
from bert_demo.train_config import RunConfig

MAX_WAITING = 4  # visitors who may wait in line for the training slot; more are refused at once
ADDRESS_PLACES = 2  # the places in the training line (the slot included) that the runs from one address may hold
WAIT_POLL_S = 1.0  # how often a waiting visitor's place in line is re-checked and shown


@dataclass(eq=False)
class Ticket:
    """A visitor's place in the line for the training slot."""

    owner: str | None
    cancelled: bool = False


class Slot:
    """The training slot: the run training now (`job`) and the visitors waiting for it (`line`), whose runs write
    into `disk`."""

    def __init__(self, disk: Disk):
        self.disk = disk
        self.job: TrainingJob | None = None
        self.line: list[Ticket] = []  # visitors waiting for the training slot, first in line first
        self.max_waiting = MAX_WAITING
        self.finish_wait_s = 30.0  # how long a new run waits for the previous one to save its checkpoint
        self.in_process = True  # on a CPU (see run_process); False: in a thread of this process
        self._lock = threading.RLock()

    def run_in_line(self, config: RunConfig, owner: str | None = None, share: bool = False
                    ) -> Iterator[str | TrainingJob]:
        """Check the disk at once, wait in line for the slot, then start the run of a checked config
        (`forms.Forms`: pre-training or fine-tuning).

        Yields a status line every WAIT_POLL_S while others go first, and the started job last. Closing the
        generator (the visitor left) or `stop` by the same owner gives the place up. A run trained on an upload is
        private to its owner unless `share` is set: its vocabulary and guesses would show the text."""
        try:
            self.disk.check(config, owner, self.job)
            ticket = self._join_line(owner)
        except ValueError:
            remove_uploads(config)
            raise
        started = False
        try:
            while (ahead := self._ahead_of(ticket)) > 0 and not ticket.cancelled:
                yield (f"Waiting for the training slot: {ahead} run{'s' if ahead > 1 else ''} before yours "
                       f"(you are number {ahead} in line).{self.time_left_now()}")
                time.sleep(WAIT_POLL_S)
            if not ticket.cancelled:
                job = self.start(config, owner, share)
                started = True
                yield job
        finally:
            with self._lock:
                if ticket in self.line:
                    self.line.remove(ticket)
            if not started:
                remove_uploads(config)

    def _join_line(self, owner: str | None) -> Ticket:
        with self._lock:
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

    def time_left_now(self) -> str:
        """What the run training now says of its time left, measured from its own pace ("" until it knows)."""
        job = self.job
        left = job.seconds_left if job is not None and job.running else None
        return f" The run training now has about {max(1, round(left / 60))} min left." if left is not None else ""

    def _ahead_of(self, ticket: Ticket) -> int:
        """How many runs go before this ticket's: the one training, and the tickets ahead of it in line."""
        with self._lock:
            return self.line.index(ticket) + int(self.job is not None and self.job.running)

    def start(self, config: RunConfig, owner: str | None = None, share: bool = False) -> TrainingJob:
        """Start the run now, after waiting a little for a previous one that is still saving its checkpoint;
        ValueError if another run is training or the disk has no room (visitors use `run_in_line`)."""
        with self._lock:
            try:
                if self.job is not None and self.job.running:
                    self.job.thread.join(timeout=self.finish_wait_s)
                    if self.job.running:
                        raise ValueError(f"another run ({self.job.name}) is training: wait for it to end")
                self.disk.prune(keep=self.disk.max_runs - 1, protect=start_folder(config))
                self.disk.check(config, owner, self.job)
                in_process = self.in_process and config.device == "cpu"  # a GPU does not share the cores
                make = ProcessTrainer if in_process else run_for
                config.out = self.disk.claim(config.out, owner)
                trainer = make(config, origin="app", visible_to=private_to(config, owner, share))
            except ValueError:
                remove_uploads(config)
                remove_if_empty(config.out)
                raise
            self.job = TrainingJob(trainer, Path(config.out).name, owner=owner)
            self.job.start()
            return self.job

    def stop(self, owner: str | None) -> bool:
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
