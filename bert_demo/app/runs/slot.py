"""The app's one training slot and its short line: one run trains at a time for everyone.

A visitor's place in line (a `Ticket`) is for one run, or for an experiment's runs, kept from its first run to its
last so that nobody's run comes between them. The slot, not the visitor's page, starts the runs: each ticket has a
thread of its own that waits for its turn, trains its runs one after the other and gives the place up after the
last. A page only follows a ticket, so a page that reloads, or a second page of the same visitor, finds it again
(`ticket_of`) and follows it on; a ticket that no page has followed for `abandon_s` is given up, its run stopped
(and saved), so that a visitor who left for good does not keep the others waiting.

A visitor has at most one ticket, the tickets from one address at most `ADDRESS_PLACES`, and only that visitor can
stop theirs. The line is bounded by time, not by count: a ticket joins only where the runs ahead of it would start
it within `max_wait_s` (about 15 minutes), by the estimates of their own times that come with them (`estimate`, the
registry's, from a pace already measured here: nothing is timed when a visitor presses Start), else each of their runs
as long as the run training now, and that run's own pace; beyond that it is refused at once, with when to try again.
Where no time is known, at most `MAX_WAITING` wait. The line is fair by address: a ticket
goes before the waiting tickets of addresses that have more in line than its own, so that a network's second run
waits behind the first run of every other network, and while others wait no network has two runs ahead of them.
A run starts in a process of its own on a
CPU (`run_process.ProcessTrainer`), in a thread of this process on a GPU, and in a GPU call on ZeroGPU (`gpu_call`
set: `zerogpu.GPUCallTrainer`); `job.TrainingJob` follows it.
"""
from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bert_demo.app.policy import ADDRESS_PLACES
from bert_demo.app.runs.disk import Disk, remove_if_empty
from bert_demo.app.runs.estimates import minutes
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.run_process import ProcessTrainer, run_for
from bert_demo.app.runs.zerogpu import GPUCall, GPUCallTrainer
from bert_demo.app.uploads import private_to, remove_uploads, start_folder
from bert_demo.app.visitors import same_address
from bert_demo.training.settings import FinetuneConfig, RunConfig

MAX_WAITING = 4  # visitors who may wait in line for the training slot where the runs' times are not known
LINE_S = 15 * 60.0  # the longest a visitor joining the line is told to wait for their run to start
WAIT_POLL_S = 1.0  # how often a waiting ticket looks again whether its turn has come
ABANDON_S = 120.0  # a ticket no page has followed this long is given up: a reload takes seconds, leaving for good not


@dataclass(frozen=True)
class Place:
    """Where a waiting ticket stands in line."""

    number: int  # 1: next
    after_run: bool  # a run trains now, before the first in line
    seconds_ahead: float | None  # until its turn (None: not known yet)


@dataclass(frozen=True)
class Busy:
    """Someone else's run in the slot, as another visitor may know it: never whose."""

    fine_tuning: bool
    step: int
    steps: int
    of_experiment: tuple[int, int] | None  # (its number, the experiment's runs) for a run of an experiment
    waiting: int  # the visitors waiting in line
    seconds_ahead: float | None  # until a run joining the line now would start (None: not known yet)
    max_wait_s: float  # the longest wait the line takes a run for


@dataclass(eq=False)
class Ticket:
    """A visitor's place in line and the runs it is for, by name, in the order they train: one pre-training run, or
    an experiment's starts."""

    owner: str | None
    configs: dict[str, RunConfig]
    share: bool = False
    cleanup: Callable[[], None] | None = None  # what to delete after the last run (an experiment's labelled file)
    seconds: float | None = None  # how long its runs would take here, as estimated when it joined (None: unknown)
    jobs: list[TrainingJob] = field(default_factory=list)  # the runs started so far, in order
    cancelled: bool = False  # its visitor stopped it
    error: str | None = None  # why a run could not start (the disk filled up meanwhile)
    seen: float = field(default_factory=time.monotonic)  # when a page last followed it
    ended: threading.Event = field(default_factory=threading.Event)  # set once it has given its place up
    # the context its visitor's click was handled in: a GPU call reads the visitor's request from it (their quota)
    context: contextvars.Context = field(default_factory=contextvars.copy_context)

    @property
    def job(self) -> TrainingJob | None:
        """The run started last (None while it waits for its turn)."""
        return self.jobs[-1] if self.jobs else None

    @property
    def fine_tuning(self) -> bool:
        """Whether it is a Fine-tune tab's experiment (else a Train tab's run)."""
        return isinstance(next(iter(self.configs.values())), FinetuneConfig)

    def wait_for_run(self, number: int, timeout: float) -> TrainingJob | None:
        """Its `number`th run (1: the first), waiting up to `timeout` seconds for it to start; None if it has not
        (yet, or ever: see `ended`)."""
        deadline = time.monotonic() + timeout
        while len(self.jobs) < number and not self.ended.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.jobs[number - 1] if len(self.jobs) >= number else None

    def followed(self) -> None:
        """A page shows this ticket now: it has not been abandoned."""
        self.seen = time.monotonic()


class Slot:
    """The training slot and its line (`line`: the first ticket holds the slot once its first run has started, the
    others wait), whose runs write into `disk`; `job` is the run started last, by a ticket or by the backend."""

    def __init__(self, disk: Disk):
        self.disk = disk
        self.job: TrainingJob | None = None
        self.line: list[Ticket] = []
        self.max_waiting = MAX_WAITING
        self.max_wait_s = LINE_S
        self.estimate: Callable[[list[RunConfig]], float | None] = lambda configs: None  # runs' seconds here
        self.abandon_s = ABANDON_S
        self.finish_wait_s = 30.0  # how long a new run waits for the previous one to save its checkpoint
        self.in_process = True  # on a CPU (see run_process); False: in a thread of this process
        self.gpu_call: GPUCall | None = None  # on ZeroGPU: every run trains in a call of this (zerogpu.GPU_TRAINING)
        self._lock = threading.RLock()
        self._turn = threading.Condition(self._lock)  # told whenever a ticket leaves the line

    def join(self, configs: dict[str, RunConfig], owner: str | None = None, share: bool = False,
             cleanup: Callable[[], None] | None = None) -> Ticket:
        """A place in line for the runs of checked configs (`forms.Forms`): the disk is checked at once, and the
        ticket's own thread starts the runs when their turn comes. A run trained on an upload is private to its
        owner unless `share` is set: its vocabulary and guesses would show the text. A refusal (ValueError) leaves
        nothing behind."""
        try:
            for config in configs.values():
                self.disk.check(config, owner, self.job)
            with self._lock:
                self._check_owner(owner)  # before the estimate, which may time a few steps
            seconds = self.estimate(list(configs.values()))
            ticket = self._join_line(Ticket(owner, dict(configs), share, cleanup, seconds=seconds))
        except ValueError:
            _discard(configs.values(), cleanup)
            raise
        threading.Thread(target=self._serve, args=(ticket,), name=f"line-{owner}", daemon=True).start()
        return ticket

    def ticket_of(self, owner: str | None) -> Ticket | None:
        """The visitor's ticket in line, waiting or training (None for a request without a visitor)."""
        with self._lock:
            return next((t for t in self.line if owner is not None and t.owner == owner), None)

    def _check_owner(self, owner: str | None) -> None:
        """ValueError where the visitor has a run training or waiting, or their address has `ADDRESS_PLACES`."""
        job = self.job
        holders = [t.owner for t in self.line]
        if job is not None and job.running and not any(job in t.jobs for t in self.line):
            holders.append(job.owner)  # a run the backend started
        if owner is not None and owner in holders:
            raise ValueError("you already have a run training or waiting: stop it, or wait for it to end, "
                             "before you start another")
        if sum(same_address(owner, holder) for holder in holders) >= ADDRESS_PLACES:
            raise ValueError(f"{ADDRESS_PLACES} runs from your network are already training or waiting, the most "
                             "one network may have: wait for one of them to end")

    def _join_line(self, ticket: Ticket) -> Ticket:
        """The ticket in line at its place (`_place`), where its wait would be at most `max_wait_s`."""
        with self._lock:
            self._check_owner(ticket.owner)
            place = self._place(ticket.owner)
            ahead = self._seconds_before(place)
            if ahead is not None and ahead > self.max_wait_s:
                raise ValueError(f"the runs in line would take about {minutes(ahead)} before yours could start, "
                                 f"and the app asks nobody to wait more than {minutes(self.max_wait_s)}: try again "
                                 f"in about {minutes(ahead - self.max_wait_s)}. Fill-mask, Next sentence and "
                                 "Attention work meanwhile")
            waiting = [t for t in self.line if not t.jobs]
            if ahead is None and len(waiting) >= self.max_waiting:
                raise ValueError(f"{len(waiting)} visitors are already waiting to train, the most this app lets "
                                 "wait: try again in a few minutes. Fill-mask, Next sentence and Attention work "
                                 "meanwhile")
            self.line.insert(place, ticket)
            return ticket

    def _place(self, owner: str | None) -> int:
        """Where a ticket of `owner` joins the line: before the first waiting ticket of an address that has more
        tickets ahead of it in line than `owner`'s address has in all; else at the end."""
        mine = sum(same_address(owner, t.owner) for t in self.line)
        ahead: list[Ticket] = []
        for index, ticket in enumerate(self.line):
            if not ticket.jobs and sum(same_address(ticket.owner, t.owner) for t in ahead) > mine:
                return index
            ahead.append(ticket)
        return len(self.line)

    def _serve(self, ticket: Ticket) -> None:
        """The ticket's thread: wait for its turn, train its runs one after the other (the experiment ends with a
        run that did not finish), then give the place up and delete what its runs no longer need."""
        try:
            if not self._wait_for_turn(ticket):
                return
            for config in ticket.configs.values():
                if ticket.cancelled or self._abandoned(ticket):
                    break
                try:
                    job = self.start(config, ticket.owner, ticket.share, ticket.context)
                except ValueError as exc:
                    ticket.error = str(exc)
                    break
                ticket.jobs.append(job)
                self._watch(ticket, job)
                if (job.done or {}).get("reason") != "finished":
                    break
        finally:
            with self._turn:
                self.line.remove(ticket)
                self._turn.notify_all()
            _discard(list(ticket.configs.values())[len(ticket.jobs):], ticket.cleanup)
            ticket.ended.set()

    def _wait_for_turn(self, ticket: Ticket) -> bool:
        """Wait until the ticket is first in line and no run trains; False if it was stopped or abandoned first."""
        with self._turn:
            while self.line[0] is not ticket or (self.job is not None and self.job.running):
                if ticket.cancelled or self._abandoned(ticket):
                    return False
                self._turn.wait(timeout=WAIT_POLL_S)
            return not ticket.cancelled

    def _watch(self, ticket: Ticket, job: TrainingJob) -> None:
        """Wait for a run to end; stop it (it saves what it learned) once its visitor has stopped the ticket, or no
        page has followed it for `abandon_s`. (A Stop pressed as the run starts finds no running job to stop: the
        ticket remembers it, and this passes it on.)"""
        stopped = False
        while job.running:
            job.thread.join(timeout=WAIT_POLL_S)
            if job.running and not stopped and (ticket.cancelled or self._abandoned(ticket)):
                job.stop()
                stopped = True

    def _abandoned(self, ticket: Ticket) -> bool:
        return time.monotonic() - ticket.seen > self.abandon_s

    def place(self, ticket: Ticket) -> Place | None:
        """Where a waiting ticket stands (None once its runs have started, or it left): its number in line (one
        number a ticket, never two tickets with the same one), and how long until its turn."""
        with self._lock:
            if ticket not in self.line or ticket.jobs:
                return None
            ahead = self.line[:self.line.index(ticket)]
        return Place(number=sum(not t.jobs for t in ahead) + 1, after_run=self.job is not None and self.job.running,
                     seconds_ahead=self.seconds_ahead(ticket))

    def busy(self, owner: str | None) -> Busy | None:
        """What a visitor with no run of their own may know of the slot (None when it is free, or the run is theirs):
        someone else's run has it (never whose), how far that run is, how many wait, and how long a run of theirs
        would wait."""
        job = self.job
        if job is None or not job.running or (owner is not None and job.owner == owner):
            return None
        with self._lock:
            waiting = sum(not t.jobs for t in self.line)
            front = next((t for t in self.line if job in t.jobs), None)
        config = job.trainer.config
        return Busy(fine_tuning=isinstance(config, FinetuneConfig), step=job.trainer.step, steps=config.steps,
                    of_experiment=(len(front.jobs), len(front.configs)) if front and len(front.configs) > 1 else None,
                    waiting=waiting, seconds_ahead=self.seconds_ahead(owner=owner), max_wait_s=self.max_wait_s)

    def seconds_ahead(self, before: Ticket | None = None, owner: str | None = None) -> float | None:
        """Seconds until the slot is free for `before`'s runs (for a run of `owner` joining the line now, without
        `before`), or None where that is not known (`_seconds_before`)."""
        with self._lock:
            return self._seconds_before(self.line.index(before) if before in self.line else self._place(owner))

    def _seconds_before(self, place: int) -> float | None:
        """Seconds until the runs of the tickets before `place` in line have trained: the run training now's time
        left (at its own pace, else its ticket's estimate less the time it has trained), its experiment's runs still
        to come, and each waiting ticket's estimate (else each of its runs as long as the run training now); None
        where one of them is not known."""
        job = self.job
        if job is None or not job.running:
            return self._waiting_seconds(self.line[:place], None)
        front = next((t for t in self.line if job in t.jobs), None)
        left = job.seconds_left
        rest = len(front.configs) - len(front.jobs) if front is not None else 0
        if left is not None:
            left += rest * job.seconds_total
        elif front is not None and front.seconds is not None:  # not timed yet: its estimate, which counts them all
            left = max(0.0, front.seconds - (time.perf_counter() - front.jobs[0].started))
        waiting = self._waiting_seconds([t for t in self.line[:place] if not t.jobs], job)
        return None if left is None or waiting is None else left + waiting

    @staticmethod
    def _waiting_seconds(tickets: list[Ticket], job: TrainingJob | None) -> float | None:
        """How long waiting tickets' runs take: their estimates, else each run as long as `job`'s."""
        total = job.seconds_total if job is not None and job.seconds_left is not None else None
        seconds = 0.0
        for ticket in tickets:
            if ticket.seconds is None and total is None:
                return None
            seconds += ticket.seconds if ticket.seconds is not None else len(ticket.configs) * total
        return seconds

    def start(self, config: RunConfig, owner: str | None = None, share: bool = False,
              context: contextvars.Context | None = None) -> TrainingJob:
        """Start the run now, after waiting a little for a previous one that is still saving its checkpoint;
        ValueError if another run is training or the disk has no room (visitors `join` the line). `context` is the
        visitor's (`Ticket.context`), which a GPU call needs."""
        with self._lock:
            try:
                if self.job is not None and self.job.running:
                    self.job.thread.join(timeout=self.finish_wait_s)
                    if self.job.running:
                        raise ValueError(f"another run ({self.job.name}) is training: wait for it to end")
                self.disk.prune(keep=self.disk.max_runs - 1, protect=start_folder(config))
                self.disk.check(config, owner, self.job)
                config = replace(config, out=self.disk.claim(config.out, owner))
                trainer = self._trainer(config, private_to(config, owner, share), context)
            except ValueError:
                remove_uploads(config)
                remove_if_empty(config.out)
                raise
            self.job = TrainingJob(trainer, Path(config.out).name, owner=owner)
            self.job.start()
            return self.job

    def _trainer(self, config: RunConfig, visible_to: str | None, context: contextvars.Context | None) -> Any:
        """What trains the run: a GPU call on ZeroGPU, a process of its own on a CPU (a GPU does not share the
        cores), else a thread of this process."""
        if self.gpu_call is not None:
            return GPUCallTrainer(config, self.gpu_call, visible_to=visible_to, context=context)
        make = ProcessTrainer if self.in_process and config.device == "cpu" else run_for
        return make(config, origin="app", visible_to=visible_to)

    def stop(self, owner: str | None) -> bool:
        """Stop the run `owner` started, and give up their place in line (an experiment's too); True if there was
        either.

        Only the visitor who started a run may stop it; a request without a visitor stops nothing. The backend can
        always call `job.stop()` itself.
        """
        if owner is None:
            return False
        stopped = False
        with self._turn:
            for ticket in self.line:
                if ticket.owner == owner:
                    ticket.cancelled = stopped = True
            self._turn.notify_all()
        job = self.job
        if job is not None and job.running and job.owner == owner:
            job.stop()
            stopped = True
        return stopped


def _discard(configs: Iterable[RunConfig], cleanup: Callable[[], None] | None) -> None:
    """Delete the private copies that runs which will not start would have trained on, and the ticket's own."""
    for config in configs:
        remove_uploads(config)
    if cleanup is not None:
        cleanup()
