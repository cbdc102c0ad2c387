"""bert_demo/app/guards/sessions.py: gradio's sessions without a live page are forgotten once idle or past their
number, with the answers they never read; a page's session is kept while its heartbeat is open, and so is a session
with an event in the queue."""
from __future__ import annotations

import datetime
import threading
import time
from types import SimpleNamespace

import httpx

from bert_demo.app.guards.sessions import Sessions
from bert_demo.app.visitors import TRUSTED_PROXIES_ENV

MODEL = "checkpoints/tiny-test"


def gradio(sessions: dict[str, float], busy: tuple[str, ...] = ()) -> SimpleNamespace:
    """What a sweep reads of gradio: its sessions' states and when each was last used (`sessions`: seconds ago),
    and its queue (the events of `busy` sessions in it; an unread answer for every session)."""
    now = datetime.datetime.now()
    holder = SimpleNamespace(lock=threading.Lock(), session_data={s: object() for s in sessions},
                             time_last_used={s: now - datetime.timedelta(seconds=ago) for s, ago in sessions.items()})
    queue = SimpleNamespace(event_ids_to_events={f"e-{s}": SimpleNamespace(session_hash=s) for s in busy},
                            pending_messages_per_session={s: ["an answer"] for s in sessions},
                            pending_event_ids_session={s: {"e"} for s in sessions})
    return SimpleNamespace(state_holder=holder, _queue=queue)


def test_an_idle_session_without_a_page_is_forgotten_with_its_unread_answer_and_a_page_or_a_busy_one_is_kept():
    blocks = gradio({"api-call": 61, "page": 600, "busy": 600, "fresh": 5}, busy=("busy",))
    sessions = Sessions(idle_s=60)
    sessions.opened("page")  # its heartbeat stream is open
    assert sessions.sweep(blocks, now=100.0) == 1
    assert set(blocks.state_holder.session_data) == {"page", "busy", "fresh"}
    assert "api-call" not in blocks._queue.pending_messages_per_session
    assert "api-call" not in blocks.state_holder.time_last_used
    sessions.closed("page")  # the page has gone: its session is idle and pageless now
    assert sessions.sweep(blocks, now=200.0) == 1 and set(blocks.state_holder.session_data) == {"busy", "fresh"}
    assert sessions.forgotten == 2


def test_past_their_number_the_least_recently_used_sessions_without_a_page_go_first():
    blocks = gradio({f"call-{i}": 10 - i for i in range(10)})  # call-0 the least recently used
    sessions = Sessions(idle_s=60, most=4)
    assert sessions.sweep(blocks, now=100.0) == 6
    assert set(blocks.state_holder.session_data) == {f"call-{i}" for i in range(6, 10)}


def test_a_sweep_looks_at_most_once_every_so_often():
    blocks = gradio({"a": 100})
    sessions = Sessions(idle_s=60, every_s=1.0)
    assert sessions.sweep(gradio({}), now=10.0) == 0
    assert sessions.sweep(blocks, now=10.5) == 0 and "a" in blocks.state_holder.session_data  # too soon
    assert sessions.sweep(blocks, now=11.0) == 1


def test_the_sessions_of_calls_never_read_are_forgotten_in_the_served_app_and_a_page_is_answered(
        served_app, tmp_path, monkeypatch):
    """Forty `/call/` questions never read each left a session in gradio (0.3-0.7 MB each, kept for good): they are
    forgotten once idle, while another visitor's questions are answered."""
    from bert_demo.app.guards import sessions as module

    monkeypatch.setattr(module, "PAGELESS_IDLE_S", 1.0)
    monkeypatch.setattr(module.Sessions.__init__, "__defaults__", (1.0, module.MAX_PAGELESS, 0.2))
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    with served_app(tmp_path) as app, httpx.Client(timeout=30) as client:
        holder = app["demo"].state_holder
        url = f"{app['url']}gradio_api/call/fill_mask"
        for i in range(40):
            posted = client.post(url, json={"data": [MODEL, "final", "the [MASK] sat.", 3, []]},
                                 headers={"X-Forwarded-For": f"93.184.216.{i % 4 + 1}"})
            assert posted.status_code == 200
        deadline = time.monotonic() + 30
        while len(holder.session_data) > 0 and time.monotonic() < deadline:
            time.sleep(0.3)
            client.get(f"{app['url']}gradio_api/info")  # a request through the door, which sweeps
        assert len(holder.session_data) == 0, len(holder.session_data)
        assert len(app["demo"]._queue.pending_messages_per_session) == 0


def test_new_sessions_go_in_at_the_gates_rate_each_address_in_turn_so_a_newcomer_waits_behind_one_of_each():
    """Twenty addresses with ten new sessions each waiting, and then a newcomer: after the burst, sessions go in at
    `per_s`, one address after another, and the newcomer's goes in behind at most one of each other address."""
    import asyncio

    from bert_demo.app.guards.sessions import SessionGate

    gate, order = SessionGate(per_s=200.0, burst=5.0, wait_s=10.0), []

    async def enter(address: str) -> None:
        assert await gate.enter(address)
        order.append(address)

    admitted_before: list[int] = []

    async def newcomer() -> None:
        admitted_before.append(200 - sum(len(waiting) for waiting in gate.turns.values()))  # the gate's own count
        await enter("newcomer")

    async def scenario() -> float:
        started = time.monotonic()
        flood = [asyncio.create_task(enter(f"flood-{i % 20}")) for i in range(200)]
        await asyncio.sleep(0.01)
        await asyncio.gather(*flood, asyncio.create_task(newcomer()))
        return time.monotonic() - started

    took = asyncio.run(scenario())
    already = admitted_before[0]

    assert took >= (200 + 1 - 5) / 200 * 0.9  # the rate holds: no more than the burst at once
    assert order.index("newcomer") <= already + 20  # behind at most one of each flooding address
    after = order.index("newcomer") + 1  # in turn: any twenty in a row are twenty addresses
    assert all(len(set(order[i:i + 20])) == 20 for i in range(after, after + 40))


def test_a_new_session_whose_turn_does_not_come_in_time_is_refused_and_its_turn_passes_on():
    import asyncio

    from bert_demo.app.guards.sessions import SessionGate

    gate = SessionGate(per_s=2.0, burst=1.0, wait_s=0.2)

    async def scenario() -> list[bool]:
        return await asyncio.gather(*(gate.enter("one") for _ in range(3)))

    assert asyncio.run(scenario()) == [True, False, False]
    assert not gate.turns
