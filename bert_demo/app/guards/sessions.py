"""How many of gradio's sessions the app keeps, and for how long.

Gradio keeps a state for every session it has seen (`state_holder`): a copy of every component's config, 0.3-0.7 MB
for this app's page, up to 10,000 sessions. A page is one session, but every `/gradio_api/call/` is a new one, and so
the answers of 1,500 unread calls held 6 GB, still held 80 s later. A page keeps a heartbeat stream open while it
lives (gradio marks its state closed when the stream ends and deletes it an hour later); an API call's session has
none. `Sessions` forgets a session without a live page once nothing of it is in gradio's queue and it has been idle
`PAGELESS_IDLE_S`, and, past `MAX_PAGELESS` of them, the least recently used first at once: its state, and any answer
it never read. A page's session is never forgotten while its page lives.
"""
from __future__ import annotations

import asyncio
import datetime
import time
from collections import Counter, OrderedDict, deque
from typing import Any

from bert_demo.app.guards.admission import give_in_turn

PAGELESS_IDLE_S = 60.0  # a session with no live page, idle this long, is forgotten (a script reads its answer at once)
MAX_PAGELESS = 400  # sessions with no live page kept at once: past this, the least recently used go at once
SWEEP_EVERY_S = 1.0  # how often the door looks
NEW_SESSIONS_PER_S = 15.0  # sessions gradio may make a second, every address together: each costs 18 ms of the event
# loop's one core (a copy of every component's config). Twenty networks posting unread /call/s made 150 a second, and
# another visitor's Fill-mask waited 16-20 s behind them; at 30 a second it waited 3.1 s (worst 5.8), at 15 1.4 s
# (worst 2.0: benchmarks/README.md, issue 79)


class Sessions:
    """The sessions whose pages live (their heartbeat streams open, counted as the door lets them through), and the
    sweep of the others (see the module's docstring)."""

    def __init__(self, idle_s: float = PAGELESS_IDLE_S, most: int = MAX_PAGELESS, every_s: float = SWEEP_EVERY_S):
        self.idle_s, self.most, self.every_s = idle_s, most, every_s
        self.pages: Counter[str] = Counter()  # open heartbeat streams by session
        self.swept_at = 0.0
        self.forgotten = 0  # sessions forgotten so far

    def opened(self, session: str) -> None:
        self.pages[session] += 1

    def closed(self, session: str) -> None:
        self.pages[session] -= 1
        if self.pages[session] <= 0:
            del self.pages[session]

    def sweep(self, blocks: Any, now: float | None = None) -> int:
        """Forget the sessions of `blocks` that have no live page, nothing in its queue, and have been idle too long,
        or are the least recently used past `most`: how many were forgotten. At most once every `every_s`."""
        moment = time.monotonic() if now is None else now
        if moment - self.swept_at < self.every_s:
            return 0
        self.swept_at = moment
        holder, queue = getattr(blocks, "state_holder", None), getattr(blocks, "_queue", None)
        if holder is None or queue is None:
            return 0
        busy = {event.session_hash for event in list(queue.event_ids_to_events.values())}
        clock = datetime.datetime.now()
        with holder.lock:
            pageless = [(used, session) for session, used in list(holder.time_last_used.items())
                        if session not in self.pages and session not in busy]
            pageless.sort()  # the least recently used first
            past = max(0, len(pageless) - self.most)
            gone = [session for i, (used, session) in enumerate(pageless)
                    if i < past or (clock - used).total_seconds() >= self.idle_s]
            for session in gone:
                holder.session_data.pop(session, None)
                holder.time_last_used.pop(session, None)
        for session in gone:  # the answers it never read
            queue.pending_messages_per_session.pop(session, None)
            queue.pending_event_ids_session.pop(session, None)
        self.forgotten += len(gone)
        return len(gone)


class SessionGate:
    """New sessions (`/call/`, `/run/`, `/api/`: a session a request) let into gradio at most `per_s` a second
    (`burst` at once after a quiet while), the next going to each address in turn: an address posting as fast as it
    can waits its turn behind every other address with one waiting, and a newcomer waits behind at most one of each.
    A request waits at most `wait_s`: `enter` then answers False (refused)."""

    def __init__(self, per_s: float = NEW_SESSIONS_PER_S, burst: float = NEW_SESSIONS_PER_S, wait_s: float = 4.0):
        self.per_s, self.burst, self.wait_s = per_s, burst, wait_s
        self.tokens, self.filled_at = burst, time.monotonic()
        self.turns: OrderedDict[Any, deque[asyncio.Future]] = OrderedDict()  # waiting, by address, in turn
        self._releasing: asyncio.TimerHandle | None = None

    def _fill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.filled_at) * self.per_s)
        self.filled_at = now

    async def enter(self, address: Any) -> bool:
        """Whether a new session from `address` may go in now, or after its turn came within `wait_s`."""
        self._fill()
        if self.tokens >= 1 and not self.turns:
            self.tokens -= 1
            return True
        given = asyncio.get_running_loop().create_future()
        self.turns.setdefault(address, deque()).append(given)
        self._schedule()
        try:
            await asyncio.wait_for(asyncio.shield(given), self.wait_s)
            return True
        except asyncio.TimeoutError:
            if given.done():  # its turn came as it gave up: pass it on
                self._pass_on()
            else:
                self._forget(address, given)
            return False

    def _schedule(self) -> None:
        """Release the next waiting request once a token has filled."""
        if self._releasing is None and self.turns:
            self._fill()
            delay = max(0.0, (1 - self.tokens) / self.per_s)
            self._releasing = asyncio.get_running_loop().call_later(delay, self._release)

    def _release(self) -> None:
        self._releasing = None
        self._fill()
        while self.tokens >= 1 and self.turns:
            self.tokens -= 1
            self._pass_on()
        self._schedule()

    def _pass_on(self) -> None:
        """A token to the first waiting request of the address whose turn is next (`give_in_turn`)."""
        if not give_in_turn(self.turns):
            self.tokens += 1  # nobody took it

    def _forget(self, address: Any, given: asyncio.Future) -> None:
        waiting = self.turns.get(address)
        if waiting is not None and given in waiting:
            waiting.remove(given)
            if not waiting:
                del self.turns[address]
