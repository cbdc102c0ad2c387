"""bert_demo/app/guards/http_limits.py: a body over the largest any form needs is refused before it is read (by its
length, or by its bytes as they come), with a message; uploads are refused past what the store may hold in all and from
one address, with when there will be room, a file stored once counting once in all; a connection slow to send its
request's head is closed."""
from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from bert_demo.app.guards import http_limits
from bert_demo.app.guards.http_limits import UPLOAD_PATH, Limits, UploadLedger, max_body_bytes
from bert_demo.app.visitors import TRUSTED_PROXIES_ENV
from bert_demo.app.state.forms import Caps

MODEL = "checkpoints/tiny-test"
MB = 2**20


def test_the_largest_body_is_what_the_largest_upload_or_typed_text_needs_in_json():
    assert max_body_bytes(Caps().max_upload_bytes) == 21 * MB
    typed = "a line of typed text\n" * (10 * MB // 21)  # at the cap, every line break written as two characters
    assert len(json.dumps({"data": [[], None, "tiny", 10, 4, 1e-3, 32, 512, False, "x", "m", typed]})) < 21 * MB


def test_uploads_are_refused_past_an_addresss_share_or_the_total_until_the_old_ones_are_deleted(monkeypatch):
    ledger = UploadLedger(total=10 * MB, per_address=4 * MB, kept_s=1800)
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    ledger.add("93.184.216.34", 3 * MB)
    assert ledger.refusal("93.184.216.34", MB) is None
    refusal = ledger.refusal("93.184.216.34", 2 * MB)
    assert refusal == ("Uploads from your network fill 3.0 MB of the 4.0 MB one network may keep here, and this one "
                       "is 2.0 MB: try again in about 30 minutes, when older uploads are deleted")
    assert ledger.refusal("151.101.1.69", 2 * MB) is None  # another address
    ledger.add(None, 6 * MB)  # this host's own network: counted in the total only
    assert ledger.refusal(None, MB) is None
    assert ledger.refusal("151.101.1.69", 2 * MB).startswith("Uploads fill 9.0 MB of the 10 MB this app keeps for them")
    now[0] += 1801  # gradio has deleted them
    assert ledger.held() == 0 and ledger.refusal("93.184.216.34", 4 * MB) is None
    assert ledger.refusal("93.184.216.34", 5 * MB).endswith("and this one is 5.0 MB: upload a smaller file")


def asgi(limits: Limits, path: str, chunks: list[bytes], length: int | None = None) -> list[dict]:
    """One request through `limits`, its body sent in `chunks` (with a Content-Length of `length`, if given): the
    messages sent back."""
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "client": ("127.0.0.1", 5000)}
    pending = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
               for i, chunk in enumerate(chunks)]
    sent: list[dict] = []

    async def receive() -> dict:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(limits(scope, receive, send))
    assert not pending  # the whole body was read: by the app, or read and dropped after a refusal
    return sent


async def reading_app(scope, receive, send) -> None:
    """An app that reads the whole body, as gradio does, then answers 200 with its length."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


def test_a_body_without_its_length_is_refused_once_its_bytes_pass_the_limit_and_the_app_never_answers():
    limits = Limits(reading_app, max_body=3 * MB, uploads=UploadLedger())
    sent = asgi(limits, "/gradio_api/call/fill_mask", [b"x" * MB] * 8)
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]
    assert json.loads(sent[-1]["body"])["detail"] == ("What you sent is over 3.0 MB; the app takes at most 3.0 MB at "
                                                      "once: an upload or a typed text may be 1.0 MB")
    assert asgi(limits, "/gradio_api/call/fill_mask", [b"x" * MB] * 2)[-1]["body"] == str(2 * MB).encode()


def test_an_upload_without_its_length_counts_against_its_address_as_it_comes():
    ledger = UploadLedger(total=100 * MB, per_address=2 * MB)
    limits = Limits(reading_app, max_body=50 * MB, uploads=ledger)
    sent = asgi(limits, UPLOAD_PATH, [b"x" * MB] * 3)
    assert sent[0]["status"] == 200 and ledger.held() == 3 * MB  # local (no address): the total only
    ledger.per_address, ledger.total = 2 * MB, 4 * MB
    sent = asgi(limits, UPLOAD_PATH, [b"x" * MB] * 3)
    assert sent[0]["status"] == 413 and sent[-1]["body"].decode().startswith("Uploads fill 3.0 MB of the 4.0 MB")
    assert ledger.held() == 3 * MB  # the refused upload is not counted


def test_an_upload_under_way_holds_the_bytes_it_sent_not_those_it_announces_so_slow_bodies_lock_no_one_out():
    """An upload counts against the store by the bytes it has sent: slow bodies that announce 10 MB each cannot hold
    the store's share while they trickle in, and so refuse everyone else's uploads."""
    ledger = UploadLedger(total=20 * MB, per_address=20 * MB)
    slow = [ledger.add(f"93.184.{i}.1", 0) for i in range(41)]  # as `Limits` adds one: by what it has sent so far
    for upload in slow:
        upload.size = 100  # a hundred bytes each, announcing 10 MB
    assert ledger.refusal("151.101.1.69", MB) is None
    limits = Limits(reading_app, max_body=30 * MB, uploads=ledger)
    sent = asgi(limits, UPLOAD_PATH, [b"x" * MB], length=10 * MB)  # announces 10 MB, sends 1 MB
    assert sent[0]["status"] == 200 and ledger.held() == MB + 41 * 100


def test_an_upload_its_sender_leaves_before_its_end_keeps_nothing_and_logs_a_line_not_a_traceback(caplog):
    """A client that leaves mid-body costs one log line, never a traceback (77 lines each would flood the log)."""
    from starlette.requests import ClientDisconnect

    async def leaving_app(scope, receive, send) -> None:  # as gradio's multipart parser, when the client goes
        await receive()
        raise ClientDisconnect()

    ledger = UploadLedger()
    limits = Limits(leaving_app, max_body=30 * MB, uploads=ledger)
    scope = {"type": "http", "method": "POST", "path": UPLOAD_PATH, "headers": [], "client": ("127.0.0.1", 5000)}

    async def receive() -> dict:
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    async def send(message: dict) -> None:
        raise AssertionError("nobody is there to answer")

    with caplog.at_level("WARNING", logger=http_limits.__name__):
        for _ in range(50):
            asyncio.run(limits(scope, receive, send))
    assert ledger.held() == 0 and len(caplog.records) == 1 and "cut off by its sender" in caplog.records[0].message
    assert not any(record.exc_info for record in caplog.records)


@pytest.fixture(scope="module")
def app(served_app, tmp_path_factory):
    ledger = UploadLedger(per_address=250_000)
    with served_app(tmp_path_factory.mktemp("limits"), uploads=ledger) as served:
        yield {**served, "ledger": ledger}


def test_a_body_over_the_limit_is_refused_at_once_by_its_length_or_its_bytes_and_the_app_still_answers(app):
    body = json.dumps({"data": [MODEL, "final", "x" * 25 * MB, 3, []]}).encode()
    for sent in (body, (body[i:i + MB] for i in range(0, len(body), MB))):  # with its length, then chunked
        started = time.perf_counter()
        response = httpx.post(f"{app['url']}gradio_api/call/fill_mask", content=sent, timeout=60,
                              headers={"content-type": "application/json"})
        assert response.status_code == 413 and time.perf_counter() - started < 10
        assert "the app takes at most 21 MB at once: an upload or a typed text may be 10 MB" in \
            response.json()["detail"]
    question = {"data": [MODEL, "final", "the [MASK] sat.", 3, []]}
    assert httpx.post(f"{app['url']}gradio_api/call/fill_mask", json=question, timeout=60).status_code == 200


def test_uploads_from_one_address_past_its_share_are_refused_and_another_address_still_uploads(app, monkeypatch):
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")

    def upload(address: str, number: int) -> httpx.Response:
        return httpx.post(f"{app['url']}gradio_api/upload", headers={"X-Forwarded-For": address}, timeout=60,
                          files={"files": (f"file-{number}.txt", f"{number} ".encode() * 50_000)})

    assert [upload("93.184.216.34", i).status_code for i in range(2)] == [200, 200]
    refused = upload("93.184.216.34", 2)
    assert refused.status_code == 413 and refused.text.startswith("Uploads from your network fill 0.2 MB of the 0.2 "
                                                                  "MB one network may keep here")
    assert "try again in about 35 minutes" in refused.text
    assert upload("151.101.1.69", 3).status_code == 200


def test_gradios_screen_recording_processing_which_runs_ffmpeg_is_not_offered(app):
    response = httpx.post(f"{app['url']}gradio_api/process_recording", timeout=60,
                          files={"video": ("recording.mp4", b"\x00" * 100_000, "video/mp4")})
    assert response.status_code == 403 and response.text == "This app does not process screen recordings"


def test_a_file_stored_once_counts_once_in_the_total_and_each_address_is_charged_for_what_it_sends(app,
                                                                                                     monkeypatch):
    """The uploads' total counts each file gradio stores once, however many times it is sent: eleven addresses
    sending one file four times each leave room for another visitor's upload."""
    monkeypatch.setenv(TRUSTED_PROXIES_ENV, "127.0.0.1")
    ledger = app["ledger"]
    monkeypatch.setattr(ledger, "uploads", [])
    monkeypatch.setattr(ledger, "total", 400_000)  # four copies and a file more, counted each

    def upload(address: str, name: str, content: bytes) -> httpx.Response:
        return httpx.post(f"{app['url']}gradio_api/upload", headers={"X-Forwarded-For": address}, timeout=60,
                          files={"files": (name, content)})

    same = b"the same text " * 7_000  # 98 KB
    senders = ["2.16.7.1", "8.8.4.4", "9.9.9.9", "1.0.0.1"]
    assert [upload(address, "corpus.txt", same).status_code for address in senders] == [200] * 4
    assert ledger.held() < 2 * len(same)  # one copy (and its multipart wrapping), not four
    assert upload("1.1.1.1", "mine.txt", b"another text " * 7_000).status_code == 200  # room in the total
    assert [upload("2.16.7.1", "corpus.txt", same).status_code for _ in range(2)] == [200, 413]  # its own share


def test_a_connection_that_sends_its_request_head_slowly_or_not_at_all_is_closed(app, monkeypatch):
    """A connection that sends its request head slowly, or nothing at all, is closed at the deadline (10 s; 1 s
    here)."""
    monkeypatch.setattr(http_limits, "HEAD_S", 1.0)
    host, port = app["url"].removeprefix("http://").strip("/").split(":")

    def closed_by_the_app(trickle: bytes) -> bool:
        """Whether the app closes a connection that sends `trickle` a byte every 0.2 s (for 10 s at most)."""
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.settimeout(0.2)
            for byte in trickle:
                try:
                    connection.sendall(bytes([byte]))
                    if connection.recv(1024) == b"":
                        return True
                except TimeoutError:
                    continue
                except OSError:  # reset while sending: closed
                    return True
            connection.settimeout(10)
            try:
                return connection.recv(1024) == b""
            except TimeoutError:
                return False

    assert closed_by_the_app(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 50)
    assert closed_by_the_app(b"")  # sends nothing
    assert httpx.get(f"{app['url']}gradio_api/info", timeout=30).status_code == 200  # a request that comes whole


def test_a_malformed_requests_warning_written_by_others_is_logged_a_line_a_minute(caplog, monkeypatch):
    """Warnings that other libraries write once a malformed request (uvicorn's "Invalid HTTP request received.",
    python-multipart's "Expected boundary character ...") are logged once a minute, so no client can flood the log."""
    import logging

    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    quiet = http_limits.RepeatedWarnings(every_s=60)
    logger = logging.getLogger("python_multipart.multipart")
    logger.addFilter(quiet)
    try:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            for index in range(500):
                logger.warning("Expected boundary character %r, got %r at index %d", 45, 31, index % 7)
            now[0] += 61
            logger.warning("Expected boundary character %r, got %r at index %d", 45, 31, 2)
    finally:
        logger.removeFilter(quiet)
    assert [r.getMessage() for r in caplog.records] == [
        "Expected boundary character 45, got 31 at index 0",
        "Expected boundary character 45, got 31 at index 2 (499 more like it in the last 61 s)"]
    http_limits.quiet_repeated_warnings()
    http_limits.quiet_repeated_warnings()  # once
    assert sum(isinstance(f, http_limits.RepeatedWarnings) for f in logging.getLogger("uvicorn.error").filters) == 1


def test_an_upload_cut_off_by_its_sender_is_no_longer_tracked_so_its_progress_streams_end():
    """gradio kept an aborted upload's id as unfinished for good, and each stream of its progress polled it every
    50 ms, forever: the upload's id is forgotten, and a stream of it ends."""
    from gradio.routes import file_upload_statuses
    from starlette.requests import ClientDisconnect

    async def leaving_app(scope, receive, send) -> None:  # gradio tracks the upload, then its client goes
        file_upload_statuses.track("cut-off-upload")
        await receive()
        raise ClientDisconnect()

    limits = Limits(leaving_app, max_body=30 * MB, uploads=UploadLedger())
    scope = {"type": "http", "method": "POST", "path": UPLOAD_PATH, "headers": [], "client": ("127.0.0.1", 5000),
             "query_string": b"upload_id=cut-off-upload"}

    async def receive() -> dict:
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    async def send(message: dict) -> None:
        raise AssertionError("nobody is there to answer")

    asyncio.run(limits(scope, receive, send))
    with pytest.raises(Exception, match="") as raised:
        file_upload_statuses.is_done("cut-off-upload")
    assert type(raised.value).__name__ == "FileUploadProgressNotTrackedError"
