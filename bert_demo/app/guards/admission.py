"""Who may ask what, now: each question's own line, the cap on heavy work in flight, and how much of them one visitor
may hold, a visitor being their session and their address.

Gradio's queue is one line of `QUEUE_SIZE` places for every endpoint: slow questions of one kind would hold its
workers while cheap ones of every kind waited behind them, and a full queue refuses every visitor ("Queue is full").
So the app's questions skip gradio's queue (`concurrency_limit=None`) and wait here instead, each kind in a line of
its own (`Share`): `running` are answered at once, and the others wait their turn (an awaited coroutine, no thread).

A line serves its visitors in turn, not first come first served: its waiting questions are kept by visitor (their
address, or their session where they have none), and each place that frees goes to the next visitor in turn, whose
next question then waits for the others' turns. So a visitor's question waits behind at most one question of each
other visitor: five busy addresses slow another visitor's question by five answers, and never shut it out. A public
address with no question in a line always gets a place in it; any other question is refused at once, with when to
try again, once `waiting` wait (visitors without an address, on this host's own network, are all such others).

Lines of their own alone would let a mix of kinds run a dozen heavy questions at once on two cores, so the heavy
kinds (`Share.heavy`: many passes of the model, many figures, a download from the Hugging Face Hub) also share one
`heavy_at_once` places, as many as the machine has cores; Fill-mask, Next sentence and the page's own small
questions never wait for them. A question that waits for those places counts among its line's waiting until it is
answered. A download (`DOWNLOAD`) is a line of its own, one at a time, which a question that needs a model from the
hub is answered in instead of its own (`ui.wire`), and a visitor starts at most `Share.per_hour` of them an hour.

A visitor holds at most `MAX_OPEN` questions open, and at most `Share.per_visitor` places in any one line, counted
both by their session and by their address (`visitors.Visitor`), so the stricter binds: gradio's `/call/` API makes a
new session for every call, and a script a new `Client` at will, but neither a new address. A session past its share
is refused at once (one page never asks that much); an address past its share waits for its own questions to be
answered (a classroom behind one router), up to `ADDRESS_WAITING` of them, and is refused beyond. A network's
requests without a session (`visitors.network_of`) are counted by their address alone. These waits are awaited
coroutines inside gradio's workers: `queue_door` keeps an address from holding more than its share of them.
"""
from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from bert_demo.app.visitors import is_network
from bert_demo.config import MASK_PATTERN

HOUR_S = 3600.0


@dataclass(frozen=True)
class Share:
    """One kind of question's part of the machine: how many are answered at once, how many more may wait (an address
    with none in the line gets a place beyond them), whether it is heavy work that counts against the cap all heavy
    kinds share, and how many one visitor may start an hour (None: no such limit)."""

    running: int = 2
    waiting: int = 16
    heavy: bool = False
    per_hour: int | None = None
    noun: str = "question of this kind"  # what the hourly refusal calls one

    @property
    def per_visitor(self) -> int:
        """The places in this line one visitor (a session, or an address) may hold: a quarter of it."""
        return max(1, (self.running + self.waiting) // 4)


MAX_OPEN = 6  # questions one visitor may have open at once (a page load asks four, one after another)
ADDRESS_WAITING = 64  # questions from one address that may wait for its own (a classroom's page loads); more: refused
HEAVY = Share(heavy=True)  # the model run for every token or layer, or many figures: attention maps, neighbours
SLOW = Share(running=2, waiting=4, heavy=True)  # seconds a question: a longer line would only be a longer wait
TRAINING_STEP = Share(running=1, waiting=4, heavy=True)  # a model's copy, its gradients and AdamW's moments: one
# at a time, so that the app's memory stays under its ceiling (docs/limits.md)
DOWNLOAD = "hub download"  # the line of the questions that first fetch a model from the Hugging Face Hub (not
# "download", the Model tab's handler that zips a checkpoint here: issue 69, its zips had taken the hub's quota)
HUB = Share(running=1, waiting=3, heavy=True, per_hour=4, noun="download from the Hugging Face Hub")
SHARES = {"attention": HEAVY, "neuron": HEAVY, "neighbours": HEAVY,
          "pretraining_example": HEAVY, "forward_steps": HEAVY, "steps_opened": HEAVY, "steps_refreshed": HEAVY,
          "attribution": SLOW, "mask_attribution": SLOW, "importance": SLOW, "pair_importance": SLOW,
          "attention_change": SLOW, "training_step": TRAINING_STEP, "across_training": SLOW, "download": SLOW,
          "by_hand": SLOW,
          DOWNLOAD: HUB}
TYPICAL_S = 1.0  # what a question is taken to last before its kind has been timed here
LONG_COST = 1000  # a question's cost (`cost`), past which it waits in its kind's line for long questions
MASK_COST = 50  # what a [MASK] adds to it, in characters: the masked-LM head scores every word piece there, a layer
LONG = Share(running=1, waiting=4, heavy=True)  # that line: one at a time, among the heavy work, a short wait
LONG_SUFFIX = ", long"  # the long questions' line of a kind is named by the kind's and this


ONE_AT_A_TIME = "training_step"  # the kind whose line is one at a time, whatever a question of it costs
TRAINING_KINDS = ("training_step", "batch_step", "adam_over_time", "depth_across_training")  # each holds a model's
# copy with its gradients (and an optimizer's moments): they wait in that one line


def kind_of(name: str, inputs: Mapping[str, Any] | Iterable[Any]) -> str:
    """The line a question of handler `name` waits in (its `inputs` by parameter name, or in order): its kind's, or,
    where it costs more than LONG_COST, its kind's line for long questions (`LONG`). A question over the model's
    whole length, or with many [MASK]s, costs many short ones, and a line serves its visitors in turn: a short
    question would wait behind one long one of each other visitor. A training step of any length waits in the one
    line of training steps, and so does the forward pass's gradient view, which may take one: one at a time, so
    that the app's memory stays under its ceiling (a wiki step and a long typed one had run side by side)."""
    named = inputs if isinstance(inputs, Mapping) else {}
    if name in TRAINING_KINDS or (name == "forward_steps" and named.get("shows") == "gradient"):
        return ONE_AT_A_TIME
    return f"{name}{LONG_SUFFIX}" if cost(named.values() if named else inputs) > LONG_COST else name


def cost(inputs: Iterable[Any]) -> int:
    """What a question costs to answer, in characters of text: its texts' characters, and MASK_COST for each [MASK]
    in them (issue 69: a 963-character Fill-mask with 20 [MASK]s took as long as a long text, under the line's
    1,000 characters)."""
    texts = [value for value in inputs if isinstance(value, str)]
    return sum(len(text) + MASK_COST * len(MASK_PATTERN.findall(text)) for text in texts)


def cores() -> int:
    """The CPU cores this process may run on: how much heavy work can be in flight at once."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Refused(Exception):
    """A question turned away before any work, with a message that says why and when to ask again."""


class Line:
    """One kind of question's line: `running` places, the questions waiting for one by visitor in the order their
    turns come (`turns`), and the places each visitor holds in it."""

    def __init__(self, name: str, share: Share):
        self.name, self.share = name, share
        self.running = self.waiting = 0  # questions being answered; questions in the line not answered yet
        self.held: Counter[Hashable] = Counter()  # places (running or waiting) by session and by address
        self.turns: OrderedDict[Hashable, deque[asyncio.Future]] = OrderedDict()  # waiting, by visitor, in turn
        self.started: dict[Hashable, deque[float]] = {}  # when each visitor's questions joined, within the hour
        self._taken = 0  # places held: by questions being answered, or waiting for the heavy places
        self._seconds: deque[float] = deque(maxlen=20)  # how long the latest answers took

    def wait_s(self) -> int:
        """About how long a question joining now would wait and be answered in, from this line's recent answers."""
        typical = statistics.median(self._seconds) if self._seconds else TYPICAL_S
        rounds = 1 + (self.running + self.waiting) // self.share.running
        return max(1, round(typical * rounds))

    def check_hourly(self, keys: list[Hashable]) -> None:
        """`Refused` where a visitor (any of `keys`, their session and address) has started `per_hour` questions of
        this kind within the hour."""
        limit = self.share.per_hour
        for key in keys if limit is not None else []:
            times = self.started.setdefault(key, deque())
            while times and time.monotonic() - times[0] > HOUR_S:
                times.popleft()
            if not times:
                del self.started[key]
            elif len(times) >= limit:
                who = "your network has" if key[0] == "address" else "you have"
                minutes = max(1, round((times[0] + HOUR_S - time.monotonic()) / 60))
                raise Refused(f"{who} started {plural(len(times), self.share.noun)} in the last hour, the most "
                              f"one {'network' if key[0] == 'address' else 'visitor'} may: try again in about "
                              f"{minutes} min")

    @asynccontextmanager
    async def place(self, gate: asyncio.Semaphore | None, turn: Hashable, keys: list[Hashable]
                    ) -> AsyncIterator[None]:
        """A place among `running`, given in turn to the visitor `turn` (their address, or their session), and one
        of `gate`'s places where the kind is heavy; `Refused` at once where the question would wait and `waiting`
        wait already, unless `turn` is an address with no question in the line (it always gets a place). A question
        counts as waiting until it is answered: for one of the line's places, then for one of the gate's (which
        other heavy kinds may hold). `keys` (its session and address) hold a place in `held` meanwhile."""
        would_wait = self._taken >= self.share.running or self.turns or (gate is not None and gate.locked())
        newcomer = isinstance(turn, tuple) and turn[0] == "address" and not self.held[turn]
        if would_wait and self.waiting >= self.share.waiting and not newcomer:
            raise Refused(f"{self._ahead()}, so the app can take no more of them now: try again in about "
                          f"{self.wait_s()} s")
        if self.share.per_hour is not None:
            for key in keys:
                self.started.setdefault(key, deque()).append(time.monotonic())
        for key in keys:
            self.held[key] += 1
        self.waiting += 1
        try:
            await self._turn(turn)
            try:
                if gate is not None:
                    await gate.acquire()
            except BaseException:
                self._give_up()
                raise
        except BaseException:
            self._forget(keys)
            raise
        finally:
            self.waiting -= 1
        self.running += 1
        started = time.monotonic()
        try:
            yield
        finally:
            self._seconds.append(time.monotonic() - started)
            self.running -= 1
            if gate is not None:
                gate.release()
            self._give_up()
            self._forget(keys)

    async def _turn(self, turn: Hashable) -> None:
        """Return holding one of the line's places: at once where one is free and nobody waits, else once the
        places that free have gone round to `turn`."""
        if self._taken < self.share.running and not self.turns:
            self._taken += 1
            return
        given = asyncio.get_running_loop().create_future()
        self.turns.setdefault(turn, deque()).append(given)
        try:
            await given
        except asyncio.CancelledError:
            if given.done() and not given.cancelled():  # the place came as it was cancelled: pass it on
                self._give_up()
            else:
                self._unqueue(turn, given)
            raise

    def _give_up(self) -> None:
        """A place is free: it goes to the next in turn (`give_in_turn`); kept free where nobody waits."""
        if not give_in_turn(self.turns):
            self._taken -= 1

    def _unqueue(self, turn: Hashable, given: asyncio.Future) -> None:
        waiting = self.turns.get(turn)
        if waiting is not None and given in waiting:
            waiting.remove(given)
            if not waiting:
                del self.turns[turn]

    def _forget(self, keys: list[Hashable]) -> None:
        for key in keys:
            count_down(self.held, key)

    def _ahead(self) -> str:
        """Who is ahead of a question joining now, as a visitor reads it."""
        wait = "is waiting" if self.waiting == 1 else "are waiting"
        if not self.running:  # the questions with the line's places wait for the heavy work of other kinds
            return f"{plural(self.waiting, 'question')} of this kind {wait} for the heavy questions of other kinds"
        return (f"{plural(self.running, 'question')} of this kind {'is' if self.running == 1 else 'are'} being "
                f"answered and {self.waiting} more {wait}")


class Admission:
    """The lines of one served app, by kind of question, the heavy work in flight, and each visitor's open
    questions by session and by address."""

    def __init__(self, shares: dict[str, Share] | None = None, max_open: int = MAX_OPEN,
                 heavy_at_once: int | None = None, address_waiting: int = ADDRESS_WAITING):
        self.shares = SHARES if shares is None else shares
        self.max_open, self.address_waiting = max_open, address_waiting
        self.heavy_at_once = heavy_at_once or cores()
        self.lines: dict[str, Line] = {}
        self.open: Counter[Hashable] = Counter()  # open questions by ("session", s) and ("address", a)
        self.held_back: Counter[str] = Counter()  # questions waiting for their address's own to be answered
        self._heavy: asyncio.Semaphore | None = None
        self._freed: asyncio.Condition | None = None  # notified whenever a question ends

    def line(self, name: str) -> Line:
        if name not in self.lines:
            self.lines[name] = Line(name, self.shares.get(name, LONG if name.endswith(LONG_SUFFIX) else Share()))
        return self.lines[name]

    @asynccontextmanager
    async def admit(self, name: str, visitor: Any) -> AsyncIterator[None]:
        """Hold a place in `name`'s line for `visitor` (a `visitors.Visitor`, or a plain session; None: a request
        without a session from this host's network, counted with no one) while the question is answered, in its
        turn; `Refused` at once where the visitor or the line has no room left."""
        line = self.line(name)
        address = getattr(visitor, "address", None)
        session = ("session", str(visitor)) if visitor is not None and not is_network(visitor) else None
        keys = [key for key in (session, ("address", address) if address is not None else None) if key is not None]
        if session is not None:
            self._check_session(session, line)
        line.check_hourly(keys)
        if address is not None and not self._address_has_room(address, line):
            await self._address_turn(address, line)
            if session is not None:  # its own session may have asked more meanwhile
                self._check_session(session, line)
            line.check_hourly(keys)
        for key in keys:
            self.open[key] += 1
        try:
            if line.share.heavy and self._heavy is None:
                self._heavy = asyncio.Semaphore(self.heavy_at_once)
            async with line.place(self._heavy if line.share.heavy else None, keys[-1] if keys else None, keys):
                yield
        finally:
            for key in keys:
                count_down(self.open, key)
            if self._freed is not None:
                async with self._freed:
                    self._freed.notify_all()

    def _check_session(self, session: Hashable, line: Line) -> None:
        if self.open[session] >= self.max_open:
            raise Refused(f"you have {self.open[session]} questions still being answered: wait for their answers, "
                          "then ask again")
        if line.held[session] >= line.share.per_visitor:
            held = line.held[session]
            raise Refused(f"you have {held} question{'s' if held > 1 else ''} of this kind still being answered: "
                          f"try again in about {line.wait_s()} s, once {'they are' if held > 1 else 'it is'}")

    def _address_has_room(self, address: str, line: Line) -> bool:
        key = ("address", address)
        return self.open[key] < self.max_open and line.held[key] < line.share.per_visitor

    async def _address_turn(self, address: str, line: Line) -> None:
        """Return once `address` has room, in all and in `line`, after some of its own questions are answered;
        `Refused` at once where too many of its questions wait already."""
        if self.held_back[address] >= self.address_waiting:
            raise Refused(f"your network has {self.open[('address', address)]} questions being answered and "
                          f"{self.held_back[address]} more waiting, the most one network may have: wait for their "
                          "answers, then ask again")
        if self._freed is None:
            self._freed = asyncio.Condition()
        self.held_back[address] += 1
        try:
            async with self._freed:
                await self._freed.wait_for(lambda: self._address_has_room(address, line))
        finally:
            count_down(self.held_back, address)


def plural(count: int, noun: str) -> str:
    """"1 question", "2 questions": a count as a refusal says it (the noun's first word takes the plural)."""
    first, _, rest = noun.partition(" ")
    return f"{count} {first}{'' if count == 1 else 's'}{' ' + rest if rest else ''}"


def count_down(counter: Counter, key: Hashable) -> None:
    """One fewer for `key`, with no zero count left behind (a counter by visitor must not grow with every one)."""
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


def give_in_turn(turns: OrderedDict[Any, deque[asyncio.Future]]) -> bool:
    """Wake the first waiter of the visitor (or address) whose turn is next, who then goes to the back of the turns
    if more of theirs wait; waiters that gave up are passed over. False when nobody was waiting."""
    while turns:
        turn, waiting = next(iter(turns.items()))
        given = waiting.popleft()
        if waiting:
            turns.move_to_end(turn)
        else:
            del turns[turn]
        if not given.done():
            given.set_result(None)
            return True
    return False
