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

import datetime
import time
from collections import Counter
from typing import Any

PAGELESS_IDLE_S = 60.0  # a session with no live page, idle this long, is forgotten (a script reads its answer at once)
MAX_PAGELESS = 400  # sessions with no live page kept at once: past this, the least recently used go at once
SWEEP_EVERY_S = 1.0  # how often the door looks


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
