"""What one address may hold of gradio's queue and its workers, and which event streams gradio is asked to open.

Gradio has one queue for every visitor: `queue_door.QUEUE_SIZE` places, where an event waits for one of its `WORKERS`
workers, and a worker holds its event until it is answered (its wait in the app's lines included, which costs a
worker no thread: so there are many workers). The app's questions wait their turn in lines of their
own (`admission`), but inside a worker: one address posting `/gradio_api/call/neuron` and never reading the answers
held every worker with questions waiting for its own, then filled the places, and every other visitor was told
"Queue is full". `Door`, ASGI middleware in front of gradio, counts the events gradio holds for each address (queued
or being answered: its `MAX_OPEN` questions and its runs, `ADDRESS_EVENTS`). An address's next question waits at the
door, holding no place and no worker, until one of its own is answered, for at most `DOOR_WAIT_S` (a script's
client gives up after 5 s) and with at most `ADDRESS_WAITING` others; past that it is refused (429, with the app's
sentence), before gradio reads it. Every route by which gradio runs an event goes through the door (`EVENT`): into
its queue (`queue/join`, `call/`), or answered there and then, in the request (`run/`, `api/`), which holds its place
at the door until it is answered.

Many addresses together could still fill gradio: nine holding 8 events each take its 72 places (32 waiting, 40
answered), and a tenth visitor was told "Queue is full". So the last `KEPT_FOR_NEWCOMERS` places are kept for
addresses that hold none: once the others hold the rest, an address that holds any waits at the door as above, and
only a newcomer goes in. The addresses holding the most give way, never the newcomer: twenty addresses cannot refuse
another visitor.

A route or function that does not exist (`run/nothing`, `call/nothing`, an `fn_index` of none) had made gradio fail
with a 70-line traceback, HTTP 500: it is answered 404, with one log line a minute.

`/gradio_api/component_server` runs a component's own server function (a file explorer's listing, say): this app's
components have none, and every call there failed with a 30-line KeyError traceback (1 MB of log in 15 s from one
client) after gradio kept a state for its session. It is answered 404 before gradio reads it (`SERVERLESS`).

`/gradio_api/cancel` stops the event it names by its id, whichever session asks: a visitor who learned another's
event id (it is only in the answer to that visitor's own request) stopped their run. A cancel passes only where the
event is the asking session's own, or gradio no longer knows it; else 403. Reading another session's stream still
needs only that session's secret, which only its own page has.

An event stream for a session gradio does not know (`/gradio_api/queue/data?session_hash=` one that never joined, or
`/gradio_api/call/<name>/<event_id>` of no event) started its stream, then failed inside it: a 3 KB traceback a
request, and 1,500 of them starved the app. Such a stream is answered 404 before anything starts. An address holds at
most `ADDRESS_STREAMS` streams open (its pages' heartbeats and answers, and its uploads' progress: gradio polls each
every 50 ms, and 4,000 idle ones from one address took a whole core), and every address together `ALL_STREAMS`.

Gradio makes a session for every `/call/`, `/run/` and `/api/` request, 18 ms of the event loop's one core each:
`sessions.SessionGate` lets at most `NEW_SESSIONS_PER_S` a second in, every address together, the next to each
address in turn (twenty networks posting unread calls as fast as they could held another visitor's Fill-mask 16-20 s).

Every request that reaches gradio's queue lets `sessions.Sessions` forget, at most once a second, the sessions that
have no live page (the heartbeats the door lets through say which live) and nothing in the queue, once idle or past
their number: gradio kept every API call's session, with its unread answer, 0.3-0.7 MB each.

Requests from this host's own network have no address (`visitors.address_of`): the door counts them with no one, as
the other limits do. Its refusals are logged as `http_limits.QuietLog` logs them: a line a minute, not a request.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

from gradio.route_utils import FnIndexInferError
from starlette.requests import Request

from bert_demo.app.guards.admission import ADDRESS_WAITING, MAX_OPEN, count_down, plural
from bert_demo.app.guards.http_limits import Message, QuietLog, Receive, Scope, Send, refuse
from bert_demo.app.guards.sessions import SessionGate, Sessions
from bert_demo.app.policy import ADDRESS_PLACES
from bert_demo.app.visitors import address_of

WORKERS = 256  # gradio's workers (`launch(max_threads=...)`): the events it answers at once. Most of them wait in the
# app's own lines (`admission`), an awaited coroutine each, no thread: the answers are computed in anyio's 40 threads.
# At gradio's 40, five addresses' questions waiting in those lines held every worker, and another visitor's Fill-mask
# waited up to 28 s in gradio's queue before any line saw it (issue 79)
QUEUE_SIZE = 32  # events waiting in gradio's queue for a worker (`demo.queue(max_size=...)`)
ADDRESS_EVENTS = MAX_OPEN + ADDRESS_PLACES  # events one address may have in gradio: its open questions and runs
KEPT_FOR_NEWCOMERS = 16  # of gradio's QUEUE_SIZE + WORKERS places, those only an address holding none may take
DOOR_WAIT_S = 4.0  # the longest an address's question waits at the door for one of its own to be answered
ADDRESS_STREAMS = 64  # open streams one address may hold: a page holds two while it waits for an answer
ALL_STREAMS = 1024  # open streams of every address together: each costs the event loop a poll every 50 ms or so
CANCEL_BYTES = 4096  # a cancel's body is an event id, a session and a number: more is no cancel
POLL_S = 0.05  # how often a question waiting at the door looks again (gradio says nothing when an event ends)
EVENT = re.compile(r"/gradio_api/(?:queue/join|call/(?:v2/)?[^/]+|run/[^/]+|api/[^/]+)/?$")  # POST: an event
UNKNOWN = "There is no such endpoint or function here: /gradio_api/info lists this app's endpoints"
COMPONENT_SERVER = re.compile(r"/gradio_api/component_server/?$")  # POST: a component's server function
CANCEL = re.compile(r"/gradio_api/cancel/?$")  # POST: stop an event, named by its id, for the session that asks
NOT_YOURS = "That event is not one of this session's: only the session that asked it may stop it"
SERVERLESS = "No component of this app has a server function: /gradio_api/info lists this app's endpoints"
STREAM = re.compile(r"/gradio_api/(?:queue/data|call/(?:v2/)?[^/]+/(?P<event>[^/]+)|heartbeat/[^/]+|"
                    r"(?P<upload>upload_progress))/?$")  # GET: a stream gradio keeps open (an upload's progress too)


HEARTBEAT = re.compile(r"/gradio_api/heartbeat/(?P<session>[^/]+)/?$")
NEW_SESSION = re.compile(r"/gradio_api/(?:call/(?:v2/)?[^/]+|run/[^/]+|api/[^/]+)/?$")  # POST: a session a request


class Door:
    """ASGI middleware: an address's questions enter gradio's queue only while it holds fewer than `events` there,
    and its streams only for sessions gradio knows, `streams` at most (see the module's docstring)."""

    def __init__(self, app: Any, events: int = ADDRESS_EVENTS, waiting: int = ADDRESS_WAITING,
                 wait_s: float = DOOR_WAIT_S, streams: int = ADDRESS_STREAMS, places: int = QUEUE_SIZE + WORKERS,
                 kept: int = KEPT_FOR_NEWCOMERS, all_streams: int = ALL_STREAMS, sessions: Sessions | None = None,
                 gate: SessionGate | None = None):
        self.app, self.events, self.waiting, self.wait_s, self.streams = app, events, waiting, wait_s, streams
        self.all_streams, self.sessions = all_streams, sessions or Sessions()
        self.gate = gate or SessionGate(wait_s=wait_s)
        self.places, self.kept = places, kept  # gradio's places in all, and those kept for addresses holding none
        self.passing: Counter[str] = Counter()  # questions let in that gradio has not listed yet, by address
        self.at_door: Counter[str] = Counter()  # questions waiting at the door, by address
        self.open_streams: Counter[str] = Counter()
        self.quiet = QuietLog()
        self._addresses: dict[str, str | None] = {}  # gradio's event ids: whose each is
        self._counted: tuple[float, Counter[str]] = (0.0, Counter())  # when, and gradio's events by address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        queue = _queue(scope) if scope["type"] == "http" else None
        if queue is not None:
            self.sessions.sweep(scope["app"].get_blocks())  # sessions with no page, idle or past their number
        if queue is not None and scope["method"] == "POST" and EVENT.search(scope["path"]):
            await self._join(scope, receive, send, queue)
        elif queue is not None and scope["method"] == "GET" and (stream := STREAM.search(scope["path"])):
            await self._stream(scope, receive, send, queue, stream)
        elif queue is not None and scope["method"] == "POST" and CANCEL.search(scope["path"]):
            await self._cancel(scope, receive, send, queue)
        elif scope["type"] == "http" and COMPONENT_SERVER.search(scope["path"]):
            self.quiet.warn(address_of(Request(scope)), "component server function asked", "answered 404")
            await refuse(receive, send, SERVERLESS, plain=False, status=404)
        else:
            await self.app(scope, receive, send)

    async def _join(self, scope: Scope, receive: Receive, send: Send, queue: Any) -> None:
        """An event, let into gradio once its address has room there, else refused."""
        address = address_of(Request(scope))
        if address is None:
            await self._event(scope, receive, send, address)
            return
        refusal = await self._turn(address, queue)
        if refusal is None and NEW_SESSION.search(scope["path"]) and not await self.gate.enter(address):
            refusal = ("The app makes as many new sessions a second as it can, and yours waited its turn "
                       f"{self.gate.wait_s:g} s: try again in a few seconds")
        if refusal is not None:
            self.quiet.warn(address, "question refused at the door", refusal)
            await refuse(receive, send, refusal, plain=False, status=429)
            return
        self.passing[address] += 1
        try:
            await self._event(scope, receive, send, address)
        finally:
            count_down(self.passing, address)
            self._counted = (0.0, Counter())  # its event is in gradio's list now, or answered: count again

    async def _event(self, scope: Scope, receive: Receive, send: Send, address: str | None) -> None:
        """The event passed to gradio; 404 where gradio finds no such endpoint or function (its lookups fail with
        these errors before it answers anything)."""
        seen = {"started": False, "read": False}

        async def reading() -> Message:
            message = await receive()
            seen["read"] = seen["read"] or not message.get("more_body", False)
            return message

        async def watched(message: Message) -> None:
            seen["started"] = True
            await send(message)

        try:
            await self.app(scope, reading, watched)
        except (FnIndexInferError, LookupError) as exc:
            if seen["started"]:
                raise
            self.quiet.warn(address, "unknown endpoint or function",
                            f"{scope['path']}: {type(exc).__name__} {str(exc)[:100]}")
            await refuse(reading if not seen["read"] else _nothing_more, send, UNKNOWN, plain=False, status=404)

    async def _cancel(self, scope: Scope, receive: Receive, send: Send, queue: Any) -> None:
        """A cancel, passed on where its event is the asking session's own (or gradio knows no such event); else 403.
        Gradio stops the event named, whoever asks: a visitor who learned another's event id stopped their run."""
        body, more = b"", True
        while more and len(body) <= CANCEL_BYTES:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            asked = json.loads(body)
            event, session = str(asked.get("event_id")), str(asked.get("session_hash"))
        except (ValueError, AttributeError):
            event = session = ""
        owner = _session_of(queue, event)
        if more or (owner is not None and owner != session):
            self.quiet.warn(address_of(Request(scope)), "cancel of another session's event", "answered 403")
            await refuse(receive if more else _nothing_more, send, NOT_YOURS, plain=False, status=403)
            return
        replay = [{"type": "http.request", "body": body, "more_body": False}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _turn(self, address: str, queue: Any) -> str | None:
        """Wait until `address` may put another event in gradio (None), or say why its question is refused."""
        if self._may_enter(address, queue):
            return None
        if self.at_door[address] >= self.waiting:
            return (f"Your network has {plural(self._held(address, queue), 'question')} being answered and "
                    f"{self.at_door[address]} more waiting, the most one network may have: wait for their answers, "
                    "then ask again")
        self.at_door[address] += 1
        try:
            deadline = time.monotonic() + self.wait_s
            while not self._may_enter(address, queue):
                if time.monotonic() >= deadline:
                    return (f"Your network has {plural(self._held(address, queue), 'question')} being answered, "
                            f"the most one network may have at once, and this one waited {self.wait_s:g} s for "
                            "them: try again once they are answered")
                await asyncio.sleep(POLL_S)
            return None
        finally:
            count_down(self.at_door, address)

    def _may_enter(self, address: str, queue: Any) -> bool:
        """Whether `address` may put another event in gradio: it holds fewer than `events` there, and either gradio
        has places left besides those kept, or it holds none and takes a kept one."""
        held = self._held(address, queue)
        if held >= self.events:
            return False
        taken = sum(self._counted[1].values()) + sum(self.passing.values())
        return taken < self.places - self.kept or (held == 0 and taken < self.places)

    def _held(self, address: str, queue: Any) -> int:
        """The events `address` has in gradio's queue (waiting or being answered), and those on their way there."""
        counted_at, by_address = self._counted
        if time.monotonic() - counted_at >= POLL_S:
            events = queue.event_ids_to_events
            for event_id, event in list(events.items()):
                if event_id not in self._addresses:
                    self._addresses[event_id] = address_of(event.request)
            if len(self._addresses) > 2 * len(events) + 100:  # forget the events gradio is done with
                self._addresses = {i: a for i, a in self._addresses.items() if i in events}
            by_address = Counter(self._addresses.get(i) for i in list(events))
            self._counted = (time.monotonic(), by_address)
        return by_address[address] + self.passing[address]

    async def _stream(self, scope: Scope, receive: Receive, send: Send, queue: Any, stream: re.Match) -> None:
        """An event stream: 404 for a session gradio does not know, 429 past its address's share."""
        address = address_of(Request(scope))
        known = "/heartbeat/" in scope["path"] or stream["upload"] or _known(scope, queue, stream["event"])
        if not known:
            self.quiet.warn(address, "stream of an unknown session", "answered 404 before it started")
            await refuse(receive, send, "This session has asked nothing here: ask a question, then read its "
                                        "answers", plain=False, status=404)
            return
        if address is not None and self.open_streams[address] >= self.streams:
            message = (f"Your network has {self.open_streams[address]} streams open, the most one network may "
                       "have: close some pages, then try again")
        elif sum(self.open_streams.values()) >= self.all_streams:
            message = "The app has as many streams open as it serves at once: try again in a minute"
        else:
            message = None
        if message is not None:
            self.quiet.warn(address, "stream refused", message)
            await refuse(receive, send, message, plain=False, status=429)
            return
        page = HEARTBEAT.search(scope["path"])  # a page's heartbeat: its session lives while it is open
        self.open_streams[address] += 1
        if page:
            self.sessions.opened(page["session"])
        try:
            await self.app(scope, receive, send)
        finally:
            count_down(self.open_streams, address)
            if page:
                self.sessions.closed(page["session"])


async def _nothing_more() -> Message:
    """What `refuse` reads of a body gradio has read whole already: nothing (uvicorn would wait for a disconnect)."""
    return {"type": "http.request", "body": b"", "more_body": False}


def _session_of(queue: Any, event_id: str) -> str | None:
    """The session an event of gradio's belongs to, or None where gradio knows no such event now."""
    event = queue.event_ids_to_events.get(event_id)
    if event is not None:
        return event.session_hash
    return next((s for s, ids in list(queue.pending_event_ids_session.items()) if event_id in ids), None)


def _queue(scope: Scope) -> Any:
    """Gradio's queue, from the app the request came to (None before gradio has one)."""
    blocks = getattr(scope.get("app"), "get_blocks", lambda: None)()
    return getattr(blocks, "_queue", None)


def _known(scope: Scope, queue: Any, event_id: str | None) -> bool:
    """Whether gradio would find the session whose stream is asked for: `/queue/data`'s `session_hash`, or the
    session of `/call/`'s event (found as gradio finds it: its event, its pending ids, or the id itself)."""
    if event_id is None:
        asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash")
        if not asked:
            return True  # gradio refuses a stream without a session itself, before it starts
        session = asked[0]
    elif (event := queue.event_ids_to_events.get(event_id)) is not None:
        session = event.session_hash
    else:
        session = next((s for s, ids in list(queue.pending_event_ids_session.items()) if event_id in ids), event_id)
    return session in queue.pending_messages_per_session
