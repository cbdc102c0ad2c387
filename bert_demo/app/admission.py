"""Who may ask what, now: each question's own line, and how many questions one visitor may have open at once.

Gradio's queue is one line of `QUEUE_SIZE` places for every endpoint. Two slow attributions once held both of its
workers for that endpoint while 32 cheap ones waited behind them, and every other visitor's Fill-mask was then
refused with "Queue is full" for half a minute. So the app's questions skip gradio's queue (`concurrency_limit=None`)
and wait here instead, each kind in a line of its own (`Share`): `running` are answered at once, `waiting` more wait
their turn (an awaited coroutine, no thread), and the next is refused at once with when to try again. A visitor (a
browser session) has at most `MAX_OPEN` questions open: a script cannot fill a line alone from one page.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """One kind of question's part of the machine: how many are answered at once, and how many more may wait."""

    running: int = 2
    waiting: int = 16


MAX_OPEN = 6  # questions one browser session may have open at once (a page load asks four, one after another)
SLOW = Share(running=2, waiting=4)  # seconds a question: a longer line would only be a longer wait
SHARES = {"attribution": SLOW, "mask_attribution": SLOW, "importance": SLOW, "pair_importance": SLOW,
          "attention_change": SLOW}
TYPICAL_S = 1.0  # what a question is taken to last before its kind has been timed here


class Refused(Exception):
    """A question turned away before any work, with a message that says why and when to ask again."""


class Line:
    """One kind of question's line: a semaphore of `running` places and a count of those waiting for one."""

    def __init__(self, name: str, share: Share):
        self.name, self.share = name, share
        self.running = self.waiting = 0
        self._places: asyncio.Semaphore | None = None  # made on first use, in the event loop that serves the app
        self._seconds: deque[float] = deque(maxlen=20)  # how long the latest answers took

    def wait_s(self) -> int:
        """About how long a question joining now would wait and be answered in, from this line's recent answers."""
        typical = statistics.median(self._seconds) if self._seconds else TYPICAL_S
        rounds = 1 + (self.running + self.waiting) // self.share.running
        return max(1, round(typical * rounds))

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        if self.running >= self.share.running and self.waiting >= self.share.waiting:
            raise Refused(f"{self.share.running} questions of this kind are being answered and {self.waiting} more "
                          f"are waiting, so the app can take no more of them now: try again in about "
                          f"{self.wait_s()} s")
        if self._places is None:
            self._places = asyncio.Semaphore(self.share.running)
        self.waiting += 1
        try:
            await self._places.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        started = time.monotonic()
        try:
            yield
        finally:
            self._seconds.append(time.monotonic() - started)
            self.running -= 1
            self._places.release()


class Admission:
    """The lines of one served app, by kind of question, and each visitor's open questions."""

    def __init__(self, shares: dict[str, Share] | None = None, max_open: int = MAX_OPEN):
        self.shares = SHARES if shares is None else shares
        self.max_open = max_open
        self.lines: dict[str, Line] = {}
        self.open: defaultdict[str, int] = defaultdict(int)

    def line(self, name: str) -> Line:
        if name not in self.lines:
            self.lines[name] = Line(name, self.shares.get(name, Share()))
        return self.lines[name]

    @asynccontextmanager
    async def admit(self, name: str, visitor: str | None) -> AsyncIterator[None]:
        """Hold a place in `name`'s line for `visitor` (None: a request without a session, counted with no one)
        while the question is answered; `Refused` at once where the visitor or the line has no room left."""
        if visitor is not None and self.open[visitor] >= self.max_open:
            raise Refused(f"you have {self.open[visitor]} questions still being answered: wait for their answers, "
                          "then ask again")
        if visitor is not None:
            self.open[visitor] += 1
        try:
            async with self.line(name).place():
                yield
        finally:
            if visitor is not None:
                self.open[visitor] -= 1
                if not self.open[visitor]:
                    del self.open[visitor]
