"""A public Space's visitors attack the app as issue 27 found: each finding reproduced over HTTP on 127.0.0.1."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from bert_demo.app.visitors import identity, new_key

MODEL = "checkpoints/tiny-test"  # the checkpoint the served app is given (conftest.py)

RUN = {"corpus": [], "preset": "tiny", "steps": 1000, "batch_size": 4, "lr": 1e-3, "seq_len": 32,
       "vocab_size": 512}


@pytest.fixture()
def app(served_app, tmp_path):
    with served_app(tmp_path) as served:
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
    time.sleep(1.0)
    assert registry.slot.job.running and not registry.slot.job.trainer.stopping
    stop_request(session_hash=owner.session_hash)  # the same request from the visitor who started the run stops it
    registry.slot.job.thread.join(timeout=60)
    assert not registry.slot.job.running and registry.slot.job.done["reason"] == "stopped"


def test_odd_model_names_and_nul_inside_a_mask_get_answers_not_internal_errors(app):
    client = Client(app["url"], verbose=False)
    with pytest.raises(AppError, match="model name must be text"):
        client.predict(["not", "a", "name"], "the [MASK] sat.", 3, api_name="/fill_mask")
    sentence, *_ = client.predict(MODEL, "the [\x00MASK] sat.", 3, api_name="/fill_mask")
    assert [span["class_or_confidence"] is not None for span in sentence["value"]] == [False, True, False]


def test_a_refused_input_logs_one_line_not_a_traceback(app, capfd, caplog):
    client = Client(app["url"], verbose=False)
    for text in ["no mask here", "x" * 6000]:
        with pytest.raises(AppError):
            client.predict(MODEL, text, 3, api_name="/fill_mask")
    assert "Traceback" not in capfd.readouterr().err
    as_logged = logging.Formatter()  # the message with any exc_info or stack_info a handler would print
    refusals = [as_logged.format(r) for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2 and "has no [MASK]" in refusals[0] and "\n" not in "".join(refusals)


def test_an_input_gradio_refuses_logs_one_line_not_a_traceback(app, capfd, caplog):
    client = Client(app["url"], verbose=False)
    refused = [((MODEL, "the [MASK] sat.", 300), "/fill_mask", "Value 300 is greater than maximum value 20"),
               ((MODEL, "the [MASK] sat.", "many"), "/fill_mask", "“Top k” cannot take 'many': give a float"),
               ((MODEL, "the cat sat.", "", 1, 1, "sideways", False), "/attention",
                "'sideways'.*is not in the list of choices"),
               ((["nope"], None, "tiny", 10, 4, 1e-3, 32, 512), "/train", "'nope'.*is not in the list of choices")]
    for args, api_name, message in refused:  # a slider out of range, not a number, a radio's or dropdown's choice
        with pytest.raises(AppError, match=message):
            client.predict(*args, api_name=api_name)
    assert "Traceback" not in capfd.readouterr().err  # gradio printed 30 lines for each
    lines = [logging.Formatter().format(r) for r in caplog.records if "refused by gradio" in r.getMessage()]
    assert len(lines) == len(refused) and "\n" not in "".join(lines)


def test_a_visitor_gets_one_run_a_short_line_and_inference_is_never_refused(app, tmp_path):
    registry = app["registry"]
    registry.slot.max_waiting = 1
    first, waiting, late = (Client(app["url"], verbose=False) for _ in range(3))
    running = train(first, app["corpus"])
    wait_for(lambda: registry.slot.job is not None and registry.slot.job.running, what="the first run")
    with pytest.raises(AppError, match="already have a run"):
        train(first, app["corpus"]).result()
    queued = train(waiting, app["corpus"])
    wait_for(lambda: any("you are next in line" in s for s in statuses(queued)), what="the place in line")
    with pytest.raises(AppError, match="already waiting to train"):
        train(late, app["corpus"]).result()
    started = time.perf_counter()
    sentence, *_ = late.predict(MODEL, "the cat [MASK] on the mat.", 3, api_name="/fill_mask")
    assert sentence["value"] and time.perf_counter() - started < 30
    registry.slot.abandon_s = 1.0
    queued.cancel()  # leaving the line (and not coming back) frees the place
    wait_for(lambda: len(registry.slot.line) == 1, what="the waiting place to be given up")
    running.cancel()
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)


def test_a_flood_of_slow_questions_is_refused_at_once_while_another_visitors_fill_mask_answers(app, monkeypatch):
    """Issue 42's reproduction: two slow questions, then 34 more of the same kind from ten sessions, filled gradio's
    one queue, and every visitor's Fill-mask was refused for half a minute. Each kind now has its own line."""
    from bert_demo.app.admission import SLOW
    from bert_demo.app.backend import backend

    inference = backend().inference
    real = inference.head_importance

    def slow(*args, **kwargs):  # long enough for all 36 to have arrived before the first two are answered
        time.sleep(4)
        return real(*args, **kwargs)

    monkeypatch.setattr(inference, "head_importance", slow)
    flood = [Client(app["url"], verbose=False) for _ in range(10)]
    jobs = [flood[i % 10].submit(MODEL, f"the [MASK] sat {i}.", "final", api_name="/head_importance")
            for i in range(36)]
    time.sleep(2)
    for _ in range(3):
        started = time.perf_counter()
        sentence, *_ = Client(app["url"], verbose=False).predict(MODEL, "the [MASK] of france is paris.", 5,
                                                                 api_name="/fill_mask")
        assert sentence["value"] and time.perf_counter() - started < 10
    answered, refusals = 0, []
    for job in jobs:
        try:
            job.result(timeout=60)
            answered += 1
        except AppError as refusal:
            refusals.append(str(refusal))
    assert answered == SLOW.running + SLOW.waiting and len(refusals) == 36 - answered
    assert all("try again in about" in refusal for refusal in refusals)


def test_new_sessions_from_one_address_get_no_more_places_in_line_than_its_share(app):
    """A script made a new `Client` (a new session) for each run it queued; limits are kept by address too, as
    gradio reports it: behind a proxy (here: loopback, as a Space's proxy is a private address), the address the
    proxy forwards."""
    from bert_demo.app.slot import ADDRESS_PLACES

    registry = app["registry"]
    registry.slot.max_waiting = 4
    one = {"X-Forwarded-For": "93.184.216.34"}
    sessions = [Client(app["url"], verbose=False, headers=one) for _ in range(ADDRESS_PLACES + 1)]
    running = train(sessions[0], app["corpus"])
    wait_for(lambda: registry.slot.job is not None and registry.slot.job.running, what="the first run")
    queued = train(sessions[1], app["corpus"])
    wait_for(lambda: any("you are next in line" in s for s in statuses(queued)), what="the place in line")
    with pytest.raises(AppError, match=f"{ADDRESS_PLACES} runs from your network are already training or waiting"):
        train(sessions[2], app["corpus"]).result()
    elsewhere = train(Client(app["url"], verbose=False, headers={"X-Forwarded-For": "151.101.1.69"}), app["corpus"])
    wait_for(lambda: any("number 2 in line" in s for s in statuses(elsewhere)), what="another network's place")
    registry.slot.abandon_s = 1.0
    for job in (elsewhere, queued, running):
        job.cancel()
    wait_for(lambda: not registry.slot.line, what="the line to empty")
    registry.slot.job.thread.join(timeout=60)
