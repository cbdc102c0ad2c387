"""The app's one training slot and its short line: one run trains at a time for everyone.

A visitor has at most one place in line (for one run, or for an experiment's runs, kept from its first run to its
last), the runs from one address at most `ADDRESS_PLACES`, only that visitor can stop theirs, and at most `max_waiting` visitors wait: more are refused at once, so that queued runs
never fill the queue that the questions share. A run starts in a process of its own on a CPU
(`run_process.ProcessTrainer`), in a thread of this process on a GPU; `job.TrainingJob` follows it.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    """A visitor's place in the line for the training slot, for one run or for an experiment's `runs` runs (a turn:
    the place is kept from the first run to the last, so nobody's run comes between them)."""

    owner: str | None
    cancelled: bool = False
    runs: int = 1  # runs this place is for, the one training now included


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

    @contextmanager
    def turn(self, owner: str | None, runs: int) -> Iterator[Ticket]:
        """A place in line kept for `runs` runs of one visitor (an experiment): give it to `run_in_line` for each;
        the place is given up when the block ends."""
        ticket = self._join_line(owner, runs)
        try:
            yield ticket
        finally:
            with self._lock:
                if ticket in self.line:
                    self.line.remove(ticket)

    def run_in_line(self, config: RunConfig, owner: str | None = None, share: bool = False,
                    turn: Ticket | None = None) -> Iterator[str | TrainingJob]:
        """Check the disk at once, wait in line for the slot, then start the run of a checked config
        (`forms.Forms`: pre-training or fine-tuning).

        Yields a status line every WAIT_POLL_S while others go first, and the started job last. Closing the
        generator (the visitor left) or `stop` by the same owner gives the place up. A run trained on an upload is
        private to its owner unless `share` is set: its vocabulary and guesses would show the text."""
        try:
            self.disk.check(config, owner, self.job)
            ticket = turn or self._join_line(owner)
        except ValueError:
            remove_uploads(config)
            raise
        started = False
        try:
            while (ahead := self._ahead_of(ticket)) > 0 and not ticket.cancelled:
                yield (f"Waiting for the training slot: {ahead} run{'s' if ahead > 1 else ''} before yours "
                       f"(you are number {ahead} in line).{self.time_left_now(ticket)}")
                time.sleep(WAIT_POLL_S)
            if not ticket.cancelled:
                job = self.start(config, owner, share)
                started = True
                yield job
        finally:
            with self._lock:
                if turn is None and ticket in self.line:  # a turn keeps its place for its next run
                    self.line.remove(ticket)
                elif started:
                    ticket.runs -= 1
            if not started:
                remove_uploads(config)

    def _join_line(self, owner: str | None, runs: int = 1) -> Ticket:
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
            ticket = Ticket(owner, runs=runs)
            self.line.append(ticket)
            return ticket

    def time_left_now(self, before: Ticket | None = None) -> str:
        """How long until the slot is free for `before`'s run, from the pace the run training now measured (""
        until it knows): its own time left, its experiment's runs still to come, and each run of the places ahead
        in line, each taken to last as long as the run training now."""
        job = self.job
        left = job.seconds_left if job is not None and job.running else None
        if left is None:
            return ""
        with self._lock:
            ahead = self.line[:self.line.index(before)] if before in self.line else list(self.line)
        runs = sum(t.runs for t in ahead)  # a turn counts its runs still to come: the one training is not in it
        total = left + runs * job.seconds_total
        return f" The runs ahead of yours have about {max(1, round(total / 60))} min left."

    def _ahead_of(self, ticket: Ticket) -> int:
        """How many runs go before this ticket's: the one training, and the tickets ahead of it in line."""
        with self._lock:
            ahead = [t for t in self.line[:self.line.index(ticket)] if t.runs > 0]  # a turn whose last run started
            return len(ahead) + int(self.job is not None and self.job.running)      # is the run training now

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
        """Stop the run `owner` started, and give up their place in line (an experiment's too); True if there was
        either.

        Only the visitor (browser session) who started a run may stop it; a request without a session stops
        nothing. The backend can always call `job.stop()` itself.
        """
        if owner is None:
            return False
        stopped = False
        with self._lock:
            for ticket in self.line:
                if ticket.owner == owner:
                    ticket.cancelled = stopped = True
        job = self.job
        if job is not None and job.running and job.owner == owner:
            job.stop()
            stopped = True
        return stopped
