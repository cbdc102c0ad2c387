"""bert_demo/app/guards/queue_door.py: one address holds at most its share of gradio's queue, its next questions wait at
the door (holding no place in gradio's queue and no worker) and are refused past that, whichever route they take; a
stream of a session gradio does not know is answered 404 before it starts, and so is an endpoint or function that
does not exist; an address holds at most its share of open streams; a flood of refusals logs a line a minute."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from types import SimpleNamespace

import pytest
from gradio.route_utils import FnIndexInferError

from bert_demo.app.guards import http_limits
from bert_demo.app.guards.http_limits import QuietLog
from bert_demo.app.guards.queue_door import ADDRESS_EVENTS, QUEUE_SIZE, SERVERLESS, UNKNOWN, WORKERS, Door
from bert_demo.app.guards.sessions import SessionGate
from bert_demo.app.visitors import TRUSTED_PROXIES_ENV

ONE, OTHER = "93.184.216.34", "151.101.1.69"


class Gradio:
    """What the door reads of gradio's app: its queue's events (by id, each with the request that joined) and its
    sessions. A join lists an event; a stream is answered at once, or held open until `close` is set."""

    def __init__(self):
        self.queue = SimpleNamespace(event_ids_to_events={}, pending_event_ids_session={},
                                     pending_messages_per_session={})
        self.close, self.streams_started, self.answered = asyncio.Event(), 0, asyncio.Event()

    def get_blocks(self):
        return SimpleNamespace(_queue=self.queue)

    async def __call__(self, scope, receive, send) -> None:
        await receive()
        if "nothing" in scope["path"]:  # as gradio's lookup of an endpoint or function that is not there fails
            raise FnIndexInferError("Could not infer function index for API name: nothing")
        if scope["method"] == "POST" and any(f"/gradio_api/{route}/" in scope["path"] for route in ("run", "api")):
            await self.answered.wait()  # answered in the request itself, holding no place in the queue
            body = b"{}"
        elif scope["method"] == "POST":
            event_id = f"event-{len(self.queue.event_ids_to_events)}-{time.monotonic_ns()}"
            self.queue.event_ids_to_events[event_id] = SimpleNamespace(
                request=SimpleNamespace(client=SimpleNamespace(host=scope["client"][0]),
                                        headers=dict((k.decode(), v.decode()) for k, v in scope["headers"])),
                session_hash=event_id)
            body = json.dumps({"event_id": event_id}).encode()
        else:
            self.streams_started += 1
            if "hold" in scope["query_string"].decode():
                await self.close.wait()
            body = b"data: {}\n\n"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


async def request(door: Door, gradio: Gradio, method: str, path: str, address: str | None = None,
                  query: str = "") -> tuple[int, str]:
    """One request through `door` from `address` (forwarded by loopback, a proxy the app trusts; None: from
    loopback itself): its status and body."""
    headers = [(b"x-forwarded-for", address.encode())] if address else []
    scope = {"type": "http", "method": method, "path": path, "query_string": query.encode(), "headers": headers,
             "client": ("127.0.0.1", 5000), "app": gradio}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await door(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()


@pytest.fixture(autouse=True)
def loopback_is_the_proxy(monkeypatch):
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")


def test_an_address_holds_less_than_a_share_of_gradios_queue_and_of_its_workers():
    assert ADDRESS_EVENTS <= QUEUE_SIZE // 4 and ADDRESS_EVENTS <= WORKERS // 4


def test_an_addresss_questions_past_its_share_wait_at_the_door_then_enter_as_its_own_are_answered():
    gradio = Gradio()
    door = Door(gradio, events=2, waiting=1, wait_s=30)

    async def scenario() -> None:
        joins = [asyncio.create_task(request(door, gradio, "POST", "/gradio_api/call/neuron", ONE))
                 for _ in range(4)]
        await asyncio.sleep(0.2)
        assert len(gradio.queue.event_ids_to_events) == 2 and door.at_door == {ONE: 1}  # two in, one waits
        refused = [join.result() for join in joins if join.done() and join.result()[0] == 429]
        assert len(refused) == 1 and json.loads(refused[0][1])["detail"] == (
            "Your network has 2 questions being answered and 1 more waiting, the most one network may have: wait "
            "for their answers, then ask again")
        assert (await request(door, gradio, "POST", "/gradio_api/queue/join", OTHER))[0] == 200  # not behind them
        assert (await request(door, gradio, "POST", "/gradio_api/queue/join"))[0] == 200  # this host: no address
        gradio.queue.event_ids_to_events.pop(next(iter(gradio.queue.event_ids_to_events)))  # one is answered
        await asyncio.wait_for(asyncio.gather(*joins), timeout=5)
        assert sorted(join.result()[0] for join in joins) == [200, 200, 200, 429] and not door.at_door

    asyncio.run(scenario())


def test_a_question_that_waited_at_the_door_as_long_as_it_may_is_refused_with_the_apps_message():
    gradio = Gradio()
    door = Door(gradio, events=1, waiting=4, wait_s=0.3)

    async def scenario() -> list[tuple[int, str]]:
        await request(door, gradio, "POST", "/gradio_api/call/attention", ONE)
        started = time.monotonic()
        answer = await request(door, gradio, "POST", "/gradio_api/call/v2/attention", ONE)
        assert 0.3 <= time.monotonic() - started < 2
        return answer

    status, body = asyncio.run(scenario())
    assert status == 429 and json.loads(body)["detail"] == (
        "Your network has 1 question being answered, the most one network may have at once, and this one waited "
        "0.3 s for them: try again once they are answered")


def test_a_stream_of_a_session_gradio_does_not_know_is_answered_404_before_it_starts():
    gradio = Gradio()
    door = Door(gradio)

    async def scenario() -> None:
        _, body = await request(door, gradio, "POST", "/gradio_api/call/fill_mask")
        event_id = json.loads(body)["event_id"]
        gradio.queue.pending_messages_per_session[event_id] = []  # gradio's session of a /call/ is its event
        gradio.queue.pending_messages_per_session["joined"] = []
        unknown = [("/gradio_api/queue/data", "session_hash=never-joined"),
                   ("/gradio_api/call/fill_mask/no-such-event", ""), ("/gradio_api/call/v2/fill_mask/nope", "")]
        for path, query in unknown:
            status, body = await request(door, gradio, "GET", path, ONE, query)
            assert status == 404 and json.loads(body)["detail"].startswith("This session has asked nothing here")
        assert gradio.streams_started == 0
        known = [("/gradio_api/queue/data", "session_hash=joined"), (f"/gradio_api/call/fill_mask/{event_id}", ""),
                 ("/gradio_api/heartbeat/a-page-just-opened", "")]  # a page's heartbeat comes before its questions
        for path, query in known:
            assert (await request(door, gradio, "GET", path, ONE, query))[0] == 200
        assert gradio.streams_started == 3

    asyncio.run(scenario())


def test_an_address_holds_at_most_its_share_of_open_streams():
    gradio = Gradio()
    door = Door(gradio, streams=2)
    gradio.queue.pending_messages_per_session["joined"] = []

    async def scenario() -> None:
        held = [asyncio.create_task(request(door, gradio, "GET", "/gradio_api/queue/data", ONE,
                                            "session_hash=joined&hold")) for _ in range(2)]
        await asyncio.sleep(0.1)
        status, body = await request(door, gradio, "GET", "/gradio_api/heartbeat/joined", ONE, "hold")
        assert status == 429 and json.loads(body)["detail"].startswith("Your network has 2 streams open")
        other = asyncio.create_task(request(door, gradio, "GET", "/gradio_api/heartbeat/joined", OTHER, "hold"))
        await asyncio.sleep(0.1)
        assert gradio.streams_started == 3  # another address's
        gradio.close.set()
        await asyncio.gather(*held, other)
        assert door.open_streams == {}

    asyncio.run(scenario())


def test_a_flood_of_refusals_logs_one_line_a_minute_saying_how_many_more_there_were(monkeypatch, caplog):
    now = [1000.0]
    monkeypatch.setattr(http_limits.time, "monotonic", lambda: now[0])
    quiet = QuietLog(every_s=60)
    with caplog.at_level(logging.WARNING, logger=http_limits.__name__):
        for i in range(500):  # 500 in 50 s
            now[0] = 1000 + i / 10
            quiet.warn(ONE, "stream of an unknown session", "/gradio_api/queue/data")
        quiet.warn(OTHER, "stream of an unknown session", "/gradio_api/queue/data")  # another address: its own line
        now[0] = 1060
        quiet.warn(ONE, "stream of an unknown session", "/gradio_api/queue/data")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [f"stream of an unknown session from {ONE}: /gradio_api/queue/data",
                     f"stream of an unknown session from {OTHER}: /gradio_api/queue/data",
                     f"stream of an unknown session from {ONE}: /gradio_api/queue/data (499 more like it in the "
                     "last 60 s)"]


def test_a_question_answered_in_its_request_holds_a_place_at_the_door_until_it_is_answered():
    """`run/` and `api/` answer in the request itself, without gradio's queue: the door holds such a question's
    place until it is answered, as it does for `queue/join` and `call/`."""
    gradio = Gradio()
    door = Door(gradio, events=2, waiting=1, wait_s=30)

    async def scenario() -> None:
        asked = [asyncio.create_task(request(door, gradio, "POST", f"/gradio_api/{route}/fill_mask", ONE))
                 for route in ("run", "api", "run", "api")]
        await asyncio.sleep(0.2)
        assert door.passing == {ONE: 2} and door.at_door == {ONE: 1}  # two being answered, one waits, one refused
        assert sorted(answer.result()[0] for answer in asked if answer.done()) == [429]
        gradio.answered.set()
        await asyncio.wait_for(asyncio.gather(*asked), timeout=5)
        assert sorted(answer.result()[0] for answer in asked) == [200, 200, 200, 429] and not door.passing

    asyncio.run(scenario())


def test_an_endpoint_or_function_that_does_not_exist_is_answered_404_and_logged_a_line_a_minute(caplog):
    """An endpoint or function that does not exist is answered 404 at the door, and logged once a minute (gradio
    would answer HTTP 500 and write a traceback)."""
    gradio = Gradio()
    door = Door(gradio)

    async def scenario() -> list[tuple[int, str]]:
        asked = [("/gradio_api/run/nothing", ONE), ("/gradio_api/call/nothing", ONE),
                 ("/gradio_api/api/nothing", OTHER), ("/gradio_api/call/v2/nothing", None)]
        return [await request(door, gradio, "POST", path, address) for path, address in asked]

    with caplog.at_level(logging.WARNING, logger=http_limits.__name__):
        answers = asyncio.run(scenario())
    assert all(status == 404 and json.loads(body)["detail"] == UNKNOWN for status, body in answers)
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        f"unknown endpoint or function from {ONE}", f"unknown endpoint or function from {OTHER}",
        "unknown endpoint or function from this host's network"]


def test_a_component_server_call_is_answered_404_before_gradio_reads_it_and_logged_a_line_a_minute(caplog):
    """The app serves no custom component: a component-server call is answered 404 at the door, and logged once a
    minute (gradio would write a 30-line traceback for each)."""
    gradio = Gradio()
    door = Door(gradio)

    async def scenario() -> list[tuple[int, str]]:
        return [await request(door, gradio, "POST", path, ONE)
                for path in ["/gradio_api/component_server", "/gradio_api/component_server/"] * 5]

    with caplog.at_level(logging.WARNING, logger=http_limits.__name__):
        answers = asyncio.run(scenario())
    assert all(status == 404 and json.loads(body)["detail"] == SERVERLESS for status, body in answers)
    assert len(caplog.records) == 1 and not gradio.queue.event_ids_to_events


def test_no_component_of_the_app_has_a_server_function_the_door_would_refuse(registry):
    from bert_demo.app.ui import build_demo

    demo = build_demo(registry)
    served = [(type(block).__name__, name) for block in demo.blocks.values() for name in dir(type(block))
              if getattr(getattr(block, name, None), "_is_server_fn", False)]
    assert served == []


def test_twenty_addresses_filling_gradio_leave_a_newcomer_a_place_and_the_fullest_give_way():
    """Gradio's last places are kept for addresses that hold none: twenty addresses (IPv4, or /56s) filling the rest
    never tell a newcomer "Queue is full", and the address holding the most gives way first."""
    gradio = Gradio()
    door = Door(gradio, events=8, wait_s=0.01, places=72, kept=16, gate=SessionGate(per_s=1e6, burst=1e6))
    flooders = [f"93.184.{i}.1" for i in range(20)]

    async def scenario() -> None:
        for _ in range(3):  # each address asks 3 questions, one after another: 60, past the 56 places not kept
            for address in flooders:
                await request(door, gradio, "POST", "/gradio_api/call/fill_mask", address)
        assert len(gradio.queue.event_ids_to_events) == 72 - 16  # the kept places are left
        status, _ = await request(door, gradio, "POST", "/gradio_api/call/fill_mask", flooders[0])
        assert status == 429  # an address that holds some gives way
        for newcomer in ("151.101.1.69", "151.101.1.70"):
            assert (await request(door, gradio, "POST", "/gradio_api/call/fill_mask", newcomer))[0] == 200
        assert len(gradio.queue.event_ids_to_events) == 72 - 16 + 2 <= 72

    asyncio.run(scenario())


def test_a_cancel_stops_only_the_asking_sessions_own_event():
    """A cancel stops an event only for the session that asked it: another visitor's event id stops nothing."""
    gradio = Gradio()
    door = Door(gradio)

    async def cancel(event_id: str, session: str) -> int:
        scope = {"type": "http", "method": "POST", "path": "/gradio_api/cancel", "query_string": b"",
                 "headers": [(b"x-forwarded-for", OTHER.encode())], "client": ("127.0.0.1", 5000), "app": gradio}
        body = json.dumps({"event_id": event_id, "session_hash": session, "fn_index": 23}).encode()
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await door(scope, receive, send)
        return sent[0]["status"]

    async def scenario() -> list[int]:
        _, body = await request(door, gradio, "POST", "/gradio_api/call/train", ONE)
        event = json.loads(body)["event_id"]  # the stub's session is the event's id
        return [await cancel(event, "someone-else"), await cancel(event, event), await cancel("gone", "anyone")]

    assert asyncio.run(scenario()) == [403, 200, 200]


def test_an_uploads_progress_streams_count_against_the_address_and_all_streams_against_the_app():
    """gradio polls each `upload_progress` stream every 50 ms: 4,000 idle ones from one address took a core. Each is
    counted as the address's stream, and every stream of every address against the app's total."""
    gradio = Gradio()
    door = Door(gradio, streams=2, all_streams=3)

    async def scenario() -> None:
        held = [asyncio.create_task(request(door, gradio, "GET", "/gradio_api/upload_progress", ONE,
                                            "upload_id=abc&hold")) for _ in range(2)]
        await asyncio.sleep(0.1)
        status, body = await request(door, gradio, "GET", "/gradio_api/upload_progress", ONE, "upload_id=abc&hold")
        assert status == 429 and json.loads(body)["detail"].startswith("Your network has 2 streams open")
        other = asyncio.create_task(request(door, gradio, "GET", "/gradio_api/upload_progress", OTHER,
                                            "upload_id=xyz&hold"))
        await asyncio.sleep(0.1)
        status, body = await request(door, gradio, "GET", "/gradio_api/upload_progress", "8.8.8.8", "upload_id=q")
        assert status == 429 and "as many streams open as it serves" in json.loads(body)["detail"]
        assert gradio.streams_started == 3
        gradio.close.set()
        await asyncio.gather(*held, other)
        assert door.open_streams == {}

    asyncio.run(scenario())
