"""A public Space's visitors attack the app as issues 27, 51 and 58 found: each finding reproduced over HTTP on
127.0.0.1."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest.mock import ANY

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from bert_demo.app.guards.admission import Admission, Share
from bert_demo.app.guards.queue_door import ADDRESS_EVENTS
from bert_demo.app.visitors import TRUSTED_PROXIES_ENV, identity, new_key
from bert_demo.app.handlers import refusals
from bert_demo.app.tabs.train import START_RANDOM
from bert_demo.checkpoint import MAX_HUB_MODELS
from tests.app.stand_in_hub import StandInHub, pointed_at
from tests.conftest import held

MODEL = "checkpoints/tiny-test"  # the checkpoint the served app is given (conftest.py)

RUN = {"corpus": [], "preset": "tiny", "steps": 1000, "batch_size": 4, "lr": 1e-3, "seq_len": 32,
       "vocab_size": 512}


@pytest.fixture(scope="module")
def app(served_app, tmp_path_factory):
    """One app for the tests that need none of their own: each leaves it as it found it (its runs ended, its line
    empty, the settings it changed put back); those with their own limits serve their own."""
    with served_app(tmp_path_factory.mktemp("shared")) as served:
        yield served


def train(client: Client, corpus: Path):
    """Submit a long run on `corpus` (it trains until stopped)."""
    return client.submit(RUN["corpus"], handle_file(str(corpus)), RUN["preset"], RUN["steps"], RUN["batch_size"],
                         RUN["lr"], RUN["seq_len"], RUN["vocab_size"], api_name="/train")


def wait_for(condition, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def statuses(job) -> list[str]:
    return [output[0] for output in job.outputs() if isinstance(output[0], str)]


def stop_index(url: str) -> int:
    """The fn_index of the Stop button's event, as an attacker reads it from /config."""
    config = httpx.get(f"{url}config").json()
    stop_id = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "stop")
    return next(i for i, d in enumerate(config["dependencies"]) if [stop_id, "click"] in d["targets"])


def test_an_upload_of_one_60_kb_word_is_refused_in_seconds_not_42(app, tmp_path):
    upload = tmp_path / "one-word.txt"
    upload.write_text("a" * 60_000)
    client = Client(app["url"], verbose=False)
    started = time.perf_counter()
    with pytest.raises(AppError, match="it has fewer than two usable sentences") as refused:
        client.predict(RUN["corpus"], handle_file(str(upload)), RUN["preset"], 10, 4, 1e-3, 32, 512,
                       api_name="/train")
    assert time.perf_counter() - started < 10  # 42 s with the quadratic sentence splitter
    assert "/tmp" not in str(refused.value) and "bert-demo-upload" not in str(refused.value)  # no server paths


def test_a_stop_request_without_a_session_or_from_another_session_or_browser_stops_nothing(app):
    owner = Client(app["url"], verbose=False)
    train(owner, app["corpus"])
    registry = app["registry"]
    wait_for(lambda: registry.slot.job is not None and registry.slot.job.trainer.step > 0, what="the run to start")
    index = stop_index(app["url"])

    def stop_request(data=(), **session):
        response = httpx.post(f"{app['url']}gradio_api/run/predict",
                              json={"data": list(data), "fn_index": index, **session}, timeout=30)
        assert response.status_code == 200, response.text

    stop_request()
    stop_request(session_hash="intruder")
    stop_request(data=[new_key()], session_hash="intruder")  # a key of its own making is a visitor of its own
    stop_request(session_hash=identity(new_key()))  # a session posing as some browser's identity is nobody
    # each answered once its handler had run (a Stop is no queued event): a stop it asked would show by now
    assert registry.slot.job.running and not registry.slot.job.trainer.stopping
    stop_request(session_hash=owner.session_hash)  # the same request from the visitor who started the run stops it
    registry.slot.job.thread.join(timeout=60)
    assert not registry.slot.job.running and registry.slot.job.done["reason"] == "stopped"


def test_odd_model_names_and_nul_inside_a_mask_get_answers_not_internal_errors(app):
    client = Client(app["url"], verbose=False)
    with pytest.raises(AppError, match="model name must be text"):
        client.predict(model_name=["not", "a", "name"], sentence="the [MASK] sat.", top_k=3, api_name="/fill_mask")
    sentence, *_ = client.predict(model_name=MODEL, sentence="the [\x00MASK] sat.", top_k=3, api_name="/fill_mask")
    assert [span["class_or_confidence"] is not None for span in sentence["value"]] == [False, True, False]


def test_a_refused_input_logs_one_line_not_a_traceback_and_more_like_it_none_for_a_minute(app, capfd, caplog,
                                                                                         monkeypatch):
    monkeypatch.setattr(refusals, "_seen", {})  # what earlier tests' refusals left: each test counts its own
    client = Client(app["url"], verbose=False)
    for text in ["no mask here", "x" * 6000, "no mask either"]:
        with pytest.raises(AppError):
            client.predict(model_name=MODEL, sentence=text, top_k=3, api_name="/fill_mask")
    assert "Traceback" not in capfd.readouterr().err
    as_logged = logging.Formatter()  # the message with any exc_info or stack_info a handler would print
    lines = [as_logged.format(r) for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "has no [MASK]" in lines[0] and "\n" not in lines[0]


def test_an_input_gradio_refuses_logs_one_line_not_a_traceback(app, capfd, caplog, monkeypatch):
    monkeypatch.setattr(refusals, "_seen", {})
    client = Client(app["url"], verbose=False)
    fill = {"model_name": MODEL, "sentence": "the [MASK] sat."}
    refused = [({**fill, "top_k": 300}, "/fill_mask", "Value 300 is greater than maximum value 20"),
               ({**fill, "top_k": "many"}, "/fill_mask", "“Top k” cannot take 'many': give a float"),
               ({"model_name": MODEL, "text_a": "the cat sat.", "view": "sideways"}, "/attention",
                "'sideways'.*is not in the list of choices"),
               ({"corpus": ["nope"], "upload": None, "preset": "tiny"}, "/train",
                "'nope'.*is not in the list of choices")]
    for asked, api_name, message in refused:  # a slider out of range, not a number, a radio's or dropdown's choice
        with pytest.raises(AppError, match=message):
            client.predict(**asked, api_name=api_name)
    assert "Traceback" not in capfd.readouterr().err  # gradio printed 30 lines for each
    lines = [logging.Formatter().format(r) for r in caplog.records if "refused by gradio" in r.getMessage()]
    assert len(lines) == 3 and "\n" not in "".join(lines)  # one for each endpoint: /fill_mask's second is counted


def test_a_visitor_gets_one_run_a_short_line_and_inference_is_never_refused(app, monkeypatch):
    registry = app["registry"]
    estimates = iter([100.0, 1000.0, 1000.0])  # the first run about 2 min, the next ones about 17 min each
    monkeypatch.setattr(registry.slot, "estimate", lambda configs: next(estimates))
    first, waiting, late = (Client(app["url"], verbose=False) for _ in range(3))
    running = train(first, app["corpus"])
    wait_for(lambda: registry.slot.job is not None and registry.slot.job.running, what="the first run")
    with pytest.raises(AppError, match="already have a run"):
        train(first, app["corpus"]).result()
    queued = train(waiting, app["corpus"])
    wait_for(lambda: any("you are next in line" in s for s in statuses(queued)), what="the place in line")
    with pytest.raises(AppError, match="The runs in line would take about 1[78] min before yours could start"):
        train(late, app["corpus"]).result()
    started = time.perf_counter()
    sentence, *_ = late.predict(model_name=MODEL, sentence="the cat [MASK] on the mat.", top_k=3, api_name="/fill_mask")
    assert sentence["value"] and time.perf_counter() - started < 30
    monkeypatch.setattr(registry.slot, "abandon_s", 1.0)
    queued.cancel()  # leaving the line (and not coming back) frees the place
    wait_for(lambda: len(registry.slot.line) == 1, what="the waiting place to be given up")
    running.cancel()
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)


def post(url: str, route: str, data: list, headers: dict | None = None, **body) -> tuple[int, dict]:
    """One request to a route of gradio's that answers in the request itself (`/gradio_api/run/<name>`,
    `/api/<name>`): its status and its JSON."""
    response = httpx.post(f"{url}gradio_api/{route}", json={"data": data, **body}, headers=headers, timeout=60)
    return response.status_code, response.json()


def with_defaults(url: str, name: str, data: list) -> list:
    """`data` for the endpoint `name`, its inputs after those given at their defaults (as /gradio_api/info gives
    them): what gradio_client sends, which gradio's plain API does not fill in."""
    parameters = httpx.get(f"{url}gradio_api/info").json()["named_endpoints"][f"/{name}"]["parameters"]
    return [*data, *[parameter["parameter_default"] for parameter in parameters[len(data):]]]


def run_inputs(url: str, upload: dict) -> list:
    """/train's inputs for RUN on an uploaded file."""
    return with_defaults(url, "train", [[], upload, *list(RUN.values())[1:], False, START_RANDOM, MODEL])


def uploaded(url: str, path: Path, headers: dict) -> dict:
    """A file uploaded to the app, as an API caller then names it."""
    with path.open("rb") as file:
        stored = httpx.post(f"{url}gradio_api/upload", files={"files": file}, headers=headers, timeout=60)
    return {"path": stored.raise_for_status().json()[0], "meta": {"_type": "gradio.FileData"}}


def test_runs_posted_without_a_session_are_their_networks_one_run_and_only_that_network_can_stop_it(app,
                                                                                                  monkeypatch):
    """A run posted without a session is its network's: one run a network, in line like any other, and only that
    network can stop it."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    registry, one = app["registry"], {"X-Forwarded-For": "93.184.216.34"}
    monkeypatch.setattr(registry.slot, "estimate", lambda configs: 60.0)  # each run about 1 min
    run = run_inputs(app["url"], uploaded(app["url"], app["corpus"], one))
    answers = [post(app["url"], "run/train", run, one) for _ in range(5)]
    assert answers[0][0] == 200 and [status for status, _ in answers[1:]] == [500] * 4
    assert all(body["error"].startswith("You already have a run training or waiting") for _, body in answers[1:])
    other = Client(app["url"], verbose=False, headers={"X-Forwarded-For": "151.101.1.69"})
    elsewhere = train(other, app["corpus"])  # another network's run is taken
    wait_for(lambda: any("you are next in line" in s for s in statuses(elsewhere)), what="another network's place")
    job = registry.slot.ticket_of(registry.slot.line[0].owner).wait_for_run(1, timeout=60)
    index = stop_index(app["url"])
    post(app["url"], "run/predict", [], {"X-Forwarded-For": "151.101.1.69"}, fn_index=index,
         session_hash=other.session_hash)  # another visitor's Stop
    post(app["url"], "run/predict", [], {"X-Forwarded-For": "151.101.1.69"}, fn_index=index)  # another network's
    assert job.running and not job.trainer.stopping
    post(app["url"], "run/predict", [], one, fn_index=index)  # the network that started it, as it started it
    job.thread.join(timeout=60)
    assert job.done["reason"] == "stopped"
    monkeypatch.setattr(registry.slot, "abandon_s", 1.0)
    elsewhere.cancel()
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)


def test_three_networks_runs_leave_another_visitor_a_place_and_a_wait_of_at_most_15_minutes(app, monkeypatch):
    """The line of runs is bounded by time, not count, and a network's second run waits behind every other
    network's first: three networks with two runs each leave another visitor a place, within about 15 minutes."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    registry = app["registry"]
    estimates = iter([60.0] + [250.0] * 6)  # the run training about 1 min, each of the others about 4 min
    monkeypatch.setattr(registry.slot, "estimate", lambda configs: next(estimates))

    run = run_inputs(app["url"], uploaded(app["url"], app["corpus"], {}))

    def post_run(name: str, address: str) -> tuple[int, dict]:  # a session of its own, its page never following
        return post(app["url"], "run/train", run, {"X-Forwarded-For": address}, session_hash=name)

    assert post_run("a1", "93.184.216.34") == (200, ANY)
    job = registry.slot.line[0].wait_for_run(1, timeout=60)
    wait_for(lambda: getattr(job.trainer.process, "pid", None) is not None, what="the run's process")
    with held(job):  # training still when the others join, however fast the machine
        for name, address in (("a2", "93.184.216.34"), ("b1", "151.101.1.69"), ("b2", "151.101.1.69"),
                              ("c1", "2.16.7.1")):
            assert post_run(name, address) == (200, ANY)
        status, refused = post_run("c2", "2.16.7.1")  # about 1 + 4 x 4 min ahead of it
        assert status == 500 and refused["error"].startswith("The runs in line would take about ")
        status, late = post_run("late", "8.8.4.4")
        told = late["data"][0]
        assert "number 3 in line" in told  # behind b1 and c1, ahead of a2 and b2
        assert int(told.split("have about ")[1].split(" min")[0]) <= 15
        monkeypatch.setattr(registry.slot, "abandon_s", 1.0)  # nobody follows them: the line empties
        wait_for(lambda: len(registry.slot.line) == 1, what="the waiting places to be given up")
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)


def test_a_flood_of_slow_questions_is_refused_at_once_while_another_visitors_fill_mask_answers(app, monkeypatch):
    """Each kind of question has its own line: a flood of slow questions (two being answered, 28 more from ten
    sessions) is refused at once past its line, and another visitor's Fill-mask is answered meanwhile. (28, not
    more: a burst from this host's own network, which the door does not count, past gradio's 32 places could meet
    "Queue is full" before gradio had taken it in, on a loaded machine.)"""
    from bert_demo.app.guards.admission import SLOW
    from bert_demo.inspection import heads

    real, held = heads.head_importance, threading.Event()

    def slow(*args, **kwargs):  # answered only once all 30 have arrived and the others are refused
        held.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(heads, "head_importance", slow)
    flood = [Client(app["url"], verbose=False) for _ in range(10)]
    jobs = [flood[i % 10].submit(model_name=MODEL, sentence=f"the [MASK] sat {i}.", snapshot="final",
                                 api_name="/head_importance")
            for i in range(30)]
    kept = SLOW.running + SLOW.waiting
    wait_for(lambda: sum(job.done() for job in jobs) == 30 - kept, what="the questions past the line refused")
    for _ in range(3):
        started = time.perf_counter()
        sentence, *_ = Client(app["url"], verbose=False).predict(model_name=MODEL,
                                                                 sentence="the [MASK] of france is paris.",
                                                                 top_k=5, api_name="/fill_mask")
        assert sentence["value"] and time.perf_counter() - started < 10
    held.set()
    answered, refusals = 0, []
    for job in jobs:
        try:
            job.result(timeout=60)
            answered += 1
        except AppError as refusal:
            refusals.append(str(refusal))
    assert answered == kept and len(refusals) == 30 - answered
    assert all("try again in about" in refusal for refusal in refusals)


def test_new_sessions_from_one_address_get_no_more_places_in_line_than_its_share(app, monkeypatch):
    """A script made a new `Client` (a new session) for each run it queued; limits are kept by address too: behind
    a proxy the app trusts (here: loopback, named as a Space's proxy would be), the address the proxy forwards."""
    from bert_demo.app.policy import ADDRESS_PLACES

    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    registry = app["registry"]
    monkeypatch.setattr(registry.slot, "max_waiting", 4)
    one = {"X-Forwarded-For": "93.184.216.34"}
    sessions = [Client(app["url"], verbose=False, headers=one) for _ in range(ADDRESS_PLACES + 1)]
    running = train(sessions[0], app["corpus"])
    wait_for(lambda: registry.slot.job is not None and registry.slot.job.running, what="the first run")
    queued = train(sessions[1], app["corpus"])
    wait_for(lambda: any("you are next in line" in s for s in statuses(queued)), what="the place in line")
    with pytest.raises(AppError, match=f"{ADDRESS_PLACES} runs from your network are already training or waiting"):
        train(sessions[2], app["corpus"]).result()
    elsewhere = train(Client(app["url"], verbose=False, headers={"X-Forwarded-For": "151.101.1.69"}), app["corpus"])
    wait_for(lambda: any("you are next in line" in s for s in statuses(elsewhere)),  # before the network's second
             what="another network's place")
    monkeypatch.setattr(registry.slot, "abandon_s", 1.0)
    for job in (elsewhere, queued, running):
        job.cancel()
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)


def call(url: str, name: str, data: list, headers: dict | None = None) -> tuple[str, object]:
    """One question through gradio's plain API (`POST /gradio_api/call/<name>`, a new session each time, then its
    event stream): ("complete", the outputs) or ("error", the message)."""
    posted = httpx.post(f"{url}gradio_api/call/{name}", json={"data": data}, headers=headers, timeout=60)
    event_id = posted.raise_for_status().json()["event_id"]
    event = None
    with httpx.stream("GET", f"{url}gradio_api/call/{name}/{event_id}", headers=headers, timeout=60) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:") and event in ("complete", "error"):
                data = json.loads(line.removeprefix("data:"))
                return event, data["error"] if event == "error" and isinstance(data, dict) else data
    raise AssertionError(f"the event stream of /{name} ended without an answer")


def test_a_flood_through_call_from_one_address_holds_its_share_and_another_visitors_fill_mask_answers(
        served_app, tmp_path, monkeypatch):
    """Places are counted by address, whatever the sessions: 30 threads on /call/fill_mask from one address (a new
    session per call) hold `max_open` places, a few more wait for them, the rest are refused at once, and another
    visitor is answered."""
    from bert_demo import inference

    real, held = inference.layer_predictions, threading.Event()

    def slow(*args, **kwargs):  # the first questions are answered only once the whole flood has arrived
        held.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(inference, "layer_predictions", slow)
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    flood_from = {"X-Forwarded-For": "93.184.216.34"}
    question = [MODEL, "final", "the [MASK] sat.", 3, []]
    with served_app(tmp_path, admission=Admission(max_open=2, address_waiting=2)) as app, \
            ThreadPoolExecutor(8) as pool:
        flood = [pool.submit(call, app["url"], "fill_mask", question, flood_from) for _ in range(8)]
        wait_for(lambda: sum(future.done() for future in flood) == 4, what="the flood past its share refused")
        held.set()  # while the flood's four are answered, another visitor asks
        started = time.perf_counter()
        event, _ = call(app["url"], "fill_mask", question, {"X-Forwarded-For": "151.101.1.69"})
        assert event == "complete" and time.perf_counter() - started < 10
        answers = [future.result() for future in flood]
    refusals = [message for event, message in answers if event == "error"]
    assert len(refusals) == 4 and all("Your network has 2 questions being answered and 2 more waiting" in message
                                      for message in refusals)


def held_answers(monkeypatch) -> tuple[threading.Event, list[str]]:
    """Fill-mask's answers held until the returned event is set, and the texts asked, in the order their
    questions were given a place to be answered in."""
    from bert_demo import inference

    real, held, order = inference.layer_predictions, threading.Event(), []

    def slow(model, tokenizer, text, *args, **kwargs):
        order.append(text)
        held.wait(60)
        return real(model, tokenizer, text, *args, **kwargs)

    monkeypatch.setattr(inference, "layer_predictions", slow)
    return held, order


def asked(url: str, route: str, question: list, address: str) -> tuple[str, object]:
    """One question through `route` from `address`: ("complete", outputs), ("error", the app's message), or
    ("refused", the door's)."""
    headers = {"X-Forwarded-For": address}
    try:
        if route == "call":
            return call(url, "fill_mask", question, headers)
        status, body = post(url, f"{route}/fill_mask", question, headers)
        return ("complete", body["data"]) if status == 200 else ("error", body["error"])
    except httpx.HTTPStatusError as refused:
        return "refused", refused.response.text


def test_a_flood_through_run_and_api_without_a_session_holds_its_networks_share_and_another_visitor_is_answered(
        app, monkeypatch):
    """Questions through `run/` and `api/`, which carry no session, are their network's, with its limits, and pass
    the same door: 30 threads of them from one address leave another visitor answered."""
    held, _ = held_answers(monkeypatch)
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    monkeypatch.setattr(app["admission"], "max_open", 2)
    monkeypatch.setattr(app["admission"], "address_waiting", 2)
    question = [MODEL, "final", "the [MASK] sat.", 3, []]
    with ThreadPoolExecutor(8) as pool:
        flood = [pool.submit(asked, app["url"], "run" if i % 2 else "api", question, "93.184.216.34")
                 for i in range(8)]
        wait_for(lambda: sum(future.done() for future in flood) == 4, what="the flood past its share refused")
        held.set()
        assert asked(app["url"], "call", question, "151.101.1.69")[0] == "complete"
        answers = [future.result() for future in flood]
    refusals = [message for event, message in answers if event != "complete"]
    assert len(refusals) == 4 and all(str(message).startswith("Your network has 2 questions being answered and 2 "
                                                              "more waiting") for message in refusals)


@pytest.mark.parametrize("addresses, flood_size", [
    (["93.184.216.34", "151.101.1.69", "2.16.7.1", "8.8.4.4", "9.9.9.9"], 30),
    ([f"2a00:1450:4001:8{i}c::1" for i in range(5)], 8)], ids=["five IPv4 addresses", "five /64s of one /56"])
def test_a_flood_from_five_addresses_leaves_another_visitor_a_place_behind_one_question_of_each(
        app, monkeypatch, addresses, flood_size):
    """A line serves its addresses in turn, and the /64s of one subscriber's /56 are one address: five flooding
    addresses (or five /64s) leave another visitor's questions answered (8 questions: as many as one address may
    have in gradio at once)."""
    held, order = held_answers(monkeypatch)
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    admission, most = app["admission"], [0]
    with ThreadPoolExecutor(flood_size + 1) as pool:
        flood = [pool.submit(asked, app["url"], "call", [MODEL, "final", f"flood {i} [MASK] sat.", 3, []],
                             addresses[i % 5]) for i in range(flood_size)]

        def settled() -> bool:  # every question of the flood answered, waiting in a line, or refused
            line = admission.line("fill_mask")
            most[0] = max(most[0], line.running + line.waiting)
            return line.running + line.waiting + sum(admission.held_back.values()) + sum(
                future.done() for future in flood) == flood_size

        wait_for(settled, what="the flood's places")
        other = pool.submit(asked, app["url"], "call", [MODEL, "final", "the other [MASK] sat.", 3, []], "1.1.1.1")
        wait_for(lambda: other.done() or ("address", "1.1.1.1") in admission.line("fill_mask").held,
                 what="the other visitor's place")
        held.set()
        assert other.result()[0] == "complete"
        for future in flood:
            future.result()
    # behind the two being answered and one of each address (and a question given its place just after it, which
    # may reach the model first: two are answered at once; and one the door let in as a place freed while the other's
    # was on its way); a line without turns would answer it after the flood's 30
    assert order.index("the other [MASK] sat.") <= 2 + 5 + 2
    if addresses[0].startswith("2a00"):  # one subscriber: one address's share of the line at most
        assert most[0] <= Share().per_visitor


def test_a_forged_x_forwarded_for_from_an_untrusted_peer_names_no_one_in_the_app_or_in_uvicorn(app,
                                                                                                  monkeypatch):
    """uvicorn believed the header from loopback and handed the app the forged address as the peer."""
    from bert_demo.app import ui

    seen, real = [], ui.visitor_of
    monkeypatch.setattr(ui, "visitor_of", lambda request, key=None: seen.append(real(request, key)) or seen[-1])
    forged = {"X-Forwarded-For": "93.184.216.34"}
    question = [MODEL, "final", "the [MASK] sat.", 3, []]
    assert call(app["url"], "fill_mask", question, forged)[0] == "complete"
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")  # loopback named as the proxy: now it is believed
    assert call(app["url"], "fill_mask", question, forged)[0] == "complete"
    assert [visitor.address for visitor in seen] == [None, "93.184.216.34"]


def test_a_forged_path_is_refused_without_naming_any_of_the_servers_folders(app):
    for path in ["secret.txt", "../x.txt", "/etc/passwd"]:
        upload = {"path": path, "meta": {"_type": "gradio.FileData"}}
        event, message = call(app["url"], "train", with_defaults(app["url"], "train", [
            [], upload, "tiny", 10, 4, 1e-3, 32, 512, False, START_RANDOM, MODEL, ""]))
        assert event == "error" and message.startswith("That file was not uploaded to this app")
        assert os.getcwd() not in message and path not in message and "/tmp" not in message


def test_a_file_given_by_its_web_address_is_refused_before_gradio_downloads_it_into_its_store(app):
    """gradio downloads a FileData's URL into its upload store, of any size: a way around the upload caps."""
    for upload in [{"path": "https://example.com/huge.txt", "meta": {"_type": "gradio.FileData"}},
                   {"path": None, "url": "http://example.com/huge.txt", "meta": {"_type": "gradio.FileData"}}]:
        event, message = call(app["url"], "train", with_defaults(app["url"], "train", [
            [], upload, "tiny", 10, 4, 1e-3, 32, 512, False, START_RANDOM, MODEL, ""]))
        assert event == "error" and message.startswith("Give the file itself, not its web address")


def test_a_long_value_gradio_refuses_comes_back_cut_short(app):
    """gradio's "Value: ... is not in the list of choices" repeated a visitor's value whole."""
    event, message = call(app["url"], "attention", [MODEL, "final", "the cat sat.", "", 1, 1, "x" * 5000,
                                                              False, "every token", "none"])
    assert event == "error" and "not in the list of choices" in message
    assert len(message) < 600 and "x" * 300 not in message


def test_one_address_posting_questions_it_never_reads_cannot_fill_gradios_queue_and_another_visitor_is_answered(
        served_app, tmp_path, monkeypatch):
    """Past its share of gradio's places, an address's questions wait at the door, outside gradio's queue: three
    threads posting questions they never read cannot fill the queue, and another visitor is answered."""
    from bert_demo.inspection import heads

    real, held = heads.query_key, threading.Event()

    def slow(*args, **kwargs):  # the flood's first questions are answered only once the other visitor has asked
        held.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(heads, "query_key", slow)
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    neuron = [MODEL, "final", "the cat sat on the mat.", "", 1, 1, 1]  # the step, then layer, head, query token
    flood_from = {"X-Forwarded-For": "93.184.216.34"}
    stop, posted, most = threading.Event(), Counter(), [0]
    with served_app(tmp_path) as app, ThreadPoolExecutor(9) as pool:
        queue = app["demo"]._queue

        def flood() -> None:
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    url = f"{app['url']}gradio_api/call/neuron"
                    posted[client.post(url, json={"data": neuron}, headers=flood_from).status_code] += 1

        def watch() -> None:  # the most events gradio held at once
            while not stop.is_set():
                most[0] = max(most[0], len(queue.event_ids_to_events))
                time.sleep(0.005)

        flooders = [pool.submit(flood) for _ in range(8)] + [pool.submit(watch)]
        time.sleep(2.0)  # long enough for the flood to fill every worker and place of an app without the door
        try:
            for _ in range(3):
                started = time.perf_counter()
                event, _ = call(app["url"], "fill_mask", [MODEL, "final", "the [MASK] sat.", 3, []],
                                {"X-Forwarded-For": "151.101.1.69"})
                assert event == "complete" and time.perf_counter() - started < 5
        finally:
            held.set()
            stop.set()
            for future in flooders:
                future.result()
    assert posted[200] >= ADDRESS_EVENTS and set(posted) <= {200, 429}  # never 503, "Queue is full"
    assert most[0] <= ADDRESS_EVENTS + 1  # the flood's share, and the other visitor's question


def test_streams_of_sessions_that_never_joined_are_answered_404_at_once_and_leave_the_log_as_it_was(
        app, capfd, caplog):
    """A `/queue/data` stream of a session that never joined (or a `call/` result of an event that never was) is
    answered 404 at once with no traceback, so a flood of them neither fills the log nor slows another visitor."""
    capfd.readouterr()
    stop, answers = threading.Event(), Counter()

    def flood(number: int) -> None:
        with httpx.Client(base_url=f"{app['url']}gradio_api/", timeout=10) as client:
            for i in range(100_000):
                if stop.is_set():
                    return
                path = f"queue/data?session_hash=never-{number}-{i}" if i % 2 else f"call/fill_mask/none-{i}"
                try:
                    response = client.get(path)
                    answers[response.status_code, response.headers["content-type"]] += 1
                except httpx.HTTPError:
                    answers["a stream started, then broke"] += 1

    with ThreadPoolExecutor(8) as pool:
        flooders = [pool.submit(flood, number) for number in range(8)]
        time.sleep(1.0)
        started = time.perf_counter()
        event, _ = call(app["url"], "fill_mask", [MODEL, "final", "the [MASK] sat.", 3, []])
        assert event == "complete" and time.perf_counter() - started < 5
        time.sleep(1.0)
        stop.set()
        for future in flooders:
            future.result()
    assert set(answers) == {(404, "application/json")} and sum(answers.values()) >= 200
    logged = capfd.readouterr().err + "\n".join(caplog.messages)
    assert "Traceback" not in logged and len(logged) < 2_000  # one line for the whole flood


def test_a_mistyped_list_through_the_api_gets_the_apps_message_and_a_flood_of_them_one_log_line(app, capfd, caplog,
                                                                                              monkeypatch):
    """An input of the wrong type (`heads_off` or `/compare_runs`' runs given as a number) gets a message naming
    the input and one log line, never "Something went wrong" and a traceback."""
    monkeypatch.setattr(refusals, "_seen", {})
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    one = {"X-Forwarded-For": "93.184.216.34"}
    for _ in range(5):
        event, message = call(app["url"], "fill_mask", [MODEL, "final", "the [MASK] sat.", 3, 7], one)
        assert (event, message) == ("error", "“Switch heads off, then Predict” takes a list of choices (such as [] "
                                             "for none), not 7")
        event, message = call(app["url"], "compare_runs", [7, "tokens"], one)
        assert (event, message) == ("error", "“Runs” takes a list of choices (such as [] for none), not 7")
        event, message = call(app["url"], "forward_steps", [MODEL, "final", "wiki", "", "paper", 0,
                                                               ["the [MASK] sat."]], one)
        assert event == "error" and message.startswith("“Sentence A (write [MASK] where the model should guess)” "
                                                       "takes text, not list ['the [MASK] sat.']")  # issue 69
    assert "Traceback" not in capfd.readouterr().err
    lines = [logging.Formatter().format(r) for r in caplog.records if "93.184.216.34" in r.getMessage()]
    assert len(lines) == 3 and "Traceback" not in "".join(lines)  # one for each endpoint


def test_unknown_routes_and_functions_are_answered_404_with_no_traceback_while_another_visitor_is_answered(
        app, capfd, caplog, monkeypatch):
    """An endpoint or function that does not exist (`run/nothing`, `call/nothing`, an fn_index of 9999 through
    `queue/join` or `run/predict`) is answered 404, with no traceback in the log."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    capfd.readouterr()
    stop, answers = threading.Event(), Counter()
    unknown = [("run/nothing", {"data": []}), ("call/nothing", {"data": []}), ("call/v2/nothing", {}),
               ("api/nothing", {"data": []}), ("run/predict", {"data": [], "fn_index": 9999}),
               ("queue/join", {"data": [], "fn_index": 9999, "session_hash": "anyone"})]

    def flood() -> None:
        with httpx.Client(base_url=f"{app['url']}gradio_api/", timeout=10,
                          headers={"X-Forwarded-For": "93.184.216.34"}) as client:
            while not stop.is_set():
                for route, body in unknown:
                    answers[route, client.post(route, json=body).status_code] += 1

    with ThreadPoolExecutor(4) as pool:
        flooders = [pool.submit(flood) for _ in range(4)]
        time.sleep(1.0)
        started = time.perf_counter()
        event, _ = call(app["url"], "fill_mask", [MODEL, "final", "the [MASK] sat.", 3, []],
                        {"X-Forwarded-For": "151.101.1.69"})
        assert event == "complete" and time.perf_counter() - started < 5
        stop.set()
        for future in flooders:
            future.result()
    assert {status for _, status in answers} == {404} and {route for route, _ in answers} == {r for r, _ in unknown}
    logged = capfd.readouterr().err + "\n".join(caplog.messages)
    assert "Traceback" not in logged and len(logged) < 2_000  # one line for the whole flood


def test_a_flood_of_questions_a_line_refuses_logs_one_line_not_a_line_a_refusal(app, caplog, monkeypatch):
    """A flood of refusals from one address is logged once, not a line a refusal."""
    held, _ = held_answers(monkeypatch)
    monkeypatch.setattr(refusals, "_seen", {})
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    monkeypatch.setattr(app["admission"], "max_open", 1)
    monkeypatch.setattr(app["admission"], "address_waiting", 0)  # the address's next questions: refused at once
    question = [MODEL, "final", "the [MASK] sat.", 3, []]
    with ThreadPoolExecutor(10) as pool:
        flood = [pool.submit(asked, app["url"], "call", question, "93.184.216.34") for _ in range(10)]
        wait_for(lambda: sum(future.done() for future in flood) == 9, what="the flood past its share refused")
        held.set()
        answers = [future.result()[0] for future in flood]
    assert sorted(answers) == ["complete"] + ["error"] * 9
    lines = [r.getMessage() for r in caplog.records if "fill_mask refused" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("fill_mask refused from 93.184.216.34: your network has 1 question")


def test_hub_downloads_hold_no_place_of_fill_masks_line_one_at_a_time_and_a_few_an_hour(app, tmp_path, monkeypatch,
                                                                                          make_checkpoint):
    """A download from the hub waits in a line of its own, one at a time, four an hour from one address, and holds
    none of Fill-mask's places: six threads asking with more hub names than the cache holds leave another visitor's
    answers prompt. (A stand-in hub on loopback.)"""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    catalog = app["registry"].catalog
    monkeypatch.setattr(catalog, "allow_hub", True)
    monkeypatch.setattr(catalog, "hub_cache", tmp_path / "hub-cache")
    model = make_checkpoint(tmp_path / "on-the-hub")
    with StandInHub(model) as hub, pointed_at(hub, monkeypatch), ThreadPoolExecutor(6) as pool:
        hub.released.clear()  # the first download is held until the other visitor has been answered
        flood = [pool.submit(asked, app["url"], "call", [f"attacker/model{i}", "final", "the [MASK] sat.", 3, []],
                             "93.184.216.34") for i in range(8)]
        try:
            wait_for(lambda: hub.at_once == 1, timeout=30, what="a download under way")
            for _ in range(2):
                assert asked(app["url"], "call", [MODEL, "final", "the [MASK] sat.", 3, []], "151.101.1.69")[0] == \
                    "complete"
            assert hub.at_once == 1  # answered while the download still held its place
        finally:
            hub.released.set()
        answers = [future.result() for future in flood]
    assert hub.most == 1 and len(hub.downloads) == 4
    assert sorted(event for event, _ in answers) == ["complete"] * 4 + ["error"] * 4
    assert all(message.startswith("Your network has started 4 downloads from the Hugging Face Hub in the last hour")
               for event, message in answers if event == "error")
    assert len(list((tmp_path / "hub-cache").glob("models--*"))) <= MAX_HUB_MODELS


def test_gradios_monitoring_page_is_off_and_asking_for_it_writes_nothing(app, capfd):
    """`/monitoring` printed a line a request (45,357 requests in 30 s: 3.9 MB of log): it is off."""
    import httpx

    capfd.readouterr()
    for _ in range(20):
        assert httpx.get(app["url"] + "monitoring", timeout=10).status_code == 403
    assert "Monitoring URL" not in capfd.readouterr().out


def test_a_question_whose_client_left_while_it_waited_in_line_is_never_computed(served_app, tmp_path, monkeypatch):
    """A client that gives up on a question waiting in its line closes its stream; gradio marks the event dead, and
    the app refuses it when its turn comes instead of computing it for nobody (the app stayed busy 130-340 s after
    each flood had stopped)."""
    from bert_demo.inspection import heads

    real, first_in, release, computed = heads.query_key, threading.Event(), threading.Event(), []

    def slow(model, tokenizer, text_a, *args, **kwargs):
        computed.append(text_a)
        first_in.set()
        release.wait(60)
        return real(model, tokenizer, text_a, *args, **kwargs)

    monkeypatch.setattr(heads, "query_key", slow)
    admission = Admission(shares={"neuron": Share(running=1, waiting=8, heavy=True)})
    with served_app(tmp_path, admission=admission) as app:
        url = app["url"]

        def post(text: str) -> str:
            posted = httpx.post(f"{url}gradio_api/call/neuron", json={"data": [MODEL, "final", text, "", 1, 1, 1]},
                                timeout=30)
            return posted.raise_for_status().json()["event_id"]

        first = post("the first text.")
        assert first_in.wait(30)
        second = post("the text nobody waits for.")
        wait_for(lambda: admission.lines["neuron"].waiting == 1, what="the second question in line")
        try:
            with httpx.stream("GET", f"{url}gradio_api/call/neuron/{second}", timeout=httpx.Timeout(30, read=0.5)) \
                    as stream:
                for _ in stream.iter_bytes():
                    pass
        except httpx.ReadTimeout:  # the client gives up
            pass
        time.sleep(1.0)
        release.set()
        with httpx.stream("GET", f"{url}gradio_api/call/neuron/{first}", timeout=60) as stream:
            assert "event: complete" in "".join(stream.iter_text())
        wait_for(lambda: admission.lines["neuron"].waiting == 0 and admission.lines["neuron"].running == 0,
                 what="the line to empty")
    assert computed == ["the first text."]
