"""What the app takes over HTTP before gradio reads a request: the largest body, and what gradio's upload store may
hold, in all and from one address.

Gradio reads a request's whole body before anything checks it, and keeps what it read, of any size. `Limits`, ASGI
middleware on gradio's FastAPI app, refuses a body over `max_body_bytes` before any of it is kept: at once where its
Content-Length says so, and as soon as the counted bytes of a body sent without one pass it. The refusal (413, with a
sentence that says what the app takes) is sent first; the rest of the body is then read and dropped, up to
`DRAIN_BYTES`, so that a client that reads its answer only once it has sent everything still reads it, and the
connection is closed.

Gradio keeps every upload (`/upload`) in its store until it deletes it `UPLOAD_RETENTION_S` later (it looks every
`UPLOAD_SWEEP_S`), whatever their number and size. `UploadLedger` counts what the uploads of that time hold, by address,
and an upload that would pass `UPLOADS_TOTAL_BYTES`, or its address's `UPLOADS_PER_ADDRESS_BYTES`, is refused before it
is read, with when there will be room. Gradio stores identical files once (their path is named by their content's
digest): the total counts each stored path once, as its newest upload, so that eleven addresses sending one 9 MB file
four times hold 9 MB of it, not 400; an address is charged for every upload it sends, stored anew or not. An upload is
checked by its size before it is read: near the total, one that gradio would have stored once already is refused too.
While it is read it counts by the bytes it has sent, not by those its Content-Length announces (issue 69: 41 slow
bodies announcing 10 MB each held the whole store's share while they trickled in, and every other upload was
refused); an upload whose sender leaves before its end keeps nothing and logs a line a minute, not a 77-line
traceback each.

Gradio also offers every visitor `/process_recording`, which runs ffmpeg on a posted video (its screen recorder's
trimming): CPU the app has no use for, so it is refused, and the page keeps the recording as it was.

A connection that sends its request's head slowly, or nothing at all, is below what the app sees, and uvicorn keeps it
open without a deadline. `close_slow_connections` gives uvicorn's HTTP protocol a deadline: a connection that has not
sent a whole request line and headers within `HEAD_S` of opening, or of its last answer, is closed. A body may take
longer (an upload over a slow link).

Every refusal is logged, but at most once a `LOG_EVERY_S` for each address and kind of refusal, with how many more
there were (`QuietLog`): a flood of refused requests leaves a line a minute, not a line a request.
"""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import ClientDisconnect, Request

from bert_demo.app.visitors import address_of

log = logging.getLogger(__name__)

UPLOAD_RETENTION_S = 1800  # gradio deletes an upload this long after it came (`delete_cache`)
UPLOAD_SWEEP_S = 300  # and looks for such uploads this often
UPLOADS_TOTAL_BYTES = 400 * 2**20  # what every upload of the last UPLOAD_RETENTION_S may hold together
UPLOADS_PER_ADDRESS_BYTES = 40 * 2**20  # and the uploads from one address (four files at the largest size)
UPLOAD_PATH = "/gradio_api/upload"
RECORDING_PATH = "/gradio_api/process_recording"  # gradio runs ffmpeg on any visitor's video there: not offered
DRAIN_BYTES = 256 * 2**20  # how much of a refused body is read and dropped before the connection is closed
HEAD_S = 10.0  # the time a connection has to send a whole request head (its line and headers)
LOG_EVERY_S = 60.0  # one line a minute, at most, for each address and kind of refusal

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def close_slow_connections() -> None:
    """Give every uvicorn server this process starts from now on a deadline for each request's head (`HEAD_S`):
    uvicorn reads the class that speaks HTTP from `uvicorn.protocols.http.auto` when a server starts."""
    from uvicorn.protocols.http import auto

    if not getattr(auto.AutoHTTPProtocol, "head_deadline", False):
        auto.AutoHTTPProtocol = _with_head_deadline(auto.AutoHTTPProtocol)


def _with_head_deadline(protocol: type) -> type:
    """uvicorn's `protocol` (h11's or httptools'), closing a connection whose request head has not come `HEAD_S`
    after it opened or after its last answer: a head that has come starts a new request cycle."""

    class HeadDeadline(protocol):
        head_deadline = True

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            self._arm()  # first: a pipelined request's head, read now, starts its cycle
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._deadline.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if getattr(self, "_deadline", None) is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(HEAD_S, self._too_slow, self.cycle)

        def _too_slow(self, cycle: Any) -> None:
            if self.cycle is cycle and not self.transport.is_closing():  # no new request since it was armed
                self.transport.close()

    return HeadDeadline


def max_body_bytes(max_upload_bytes: int) -> int:
    """The largest request a form needs: an upload or a typed text at its cap (`max_upload_bytes`) twice over, as
    JSON writes a typed text's line breaks and quotes with two characters, and a megabyte for the other fields."""
    return 2 * max_upload_bytes + 2**20


@dataclass
class _Upload:
    """One upload the store holds, or is receiving: when it came, from which address, its bytes so far, and the
    paths gradio stored its files as (none until it has answered)."""

    came: float
    address: str | None
    size: int
    stored: tuple[str, ...] = ()


class UploadLedger:
    """The uploads of the last `kept_s` seconds (gradio's store holds no older ones), by address; an address of
    None (this host's own network) counts in the total only."""

    def __init__(self, total: int = UPLOADS_TOTAL_BYTES, per_address: int = UPLOADS_PER_ADDRESS_BYTES,
                 kept_s: float = UPLOAD_RETENTION_S + UPLOAD_SWEEP_S):
        self.total, self.per_address, self.kept_s = total, per_address, kept_s
        self.uploads: list[_Upload] = []

    def held(self, address: str | None = None, besides: _Upload | None = None) -> int:
        """What the uploads hold now, `besides` one of them: in all, each stored path once (as its newest upload);
        or what `address` sent, every upload."""
        self._forget_old()
        counted = [u for u in self.uploads if (address is None or u.address == address) and u is not besides]
        if address is None:
            newest = {u.stored: u for u in counted if u.stored}  # uploads come in order: the last is the newest
            counted = [u for u in counted if not u.stored or newest[u.stored] is u]
        return sum(u.size for u in counted)

    def refusal(self, address: str | None, size: int, besides: _Upload | None = None) -> str | None:
        """Why an upload of `size` bytes from `address` cannot be kept now, beside the others (None: it can);
        `besides`: the upload itself, already counted as it comes."""
        total = self.held(besides=besides)
        if total + size > self.total:
            return (f"Uploads fill {_mb(total)} of the {_mb(self.total)} this app keeps for them, and this one is "
                    f"{_mb(size)}: {self._when(None)}")
        mine = self.held(address, besides) if address is not None else 0
        if address is not None and mine + size > self.per_address:
            return (f"Uploads from your network fill {_mb(mine)} of the {_mb(self.per_address)} one network may keep "
                    f"here, and this one is {_mb(size)}: {self._when(address)}")
        return None

    def add(self, address: str | None, size: int) -> _Upload:
        upload = _Upload(time.monotonic(), address, size)
        self.uploads.append(upload)
        return upload

    def drop(self, upload: _Upload) -> None:
        """Forget an upload that was refused: nothing of it is kept."""
        if upload in self.uploads:
            self.uploads.remove(upload)

    def _forget_old(self) -> None:
        now = time.monotonic()
        self.uploads = [u for u in self.uploads if now - u.came < self.kept_s]

    def _when(self, address: str | None) -> str:
        """When there will be room: once the oldest upload counted against `address` (or the total) is deleted."""
        came = [u.came for u in self.uploads if address is None or u.address == address]
        if not came:  # nothing is held: this upload alone is more than may be kept
            return "upload a smaller file"
        minutes = max(1, round((min(came) + self.kept_s - time.monotonic()) / 60))
        return f"try again in about {minutes} minute{'s' if minutes > 1 else ''}, when older uploads are deleted"


class _TooLarge(Exception):
    """Raised from `receive` once a body sent without its length passes the limit."""


class Limits:
    """ASGI middleware: a body over `max_body` is refused before it is kept, and so is an upload that would pass
    what `uploads` may hold (see the module's docstring)."""

    def __init__(self, app: Callable, max_body: int, uploads: UploadLedger):
        self.app, self.max_body, self.uploads = app, max_body, uploads
        self.quiet = QuietLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].endswith(RECORDING_PATH):  # the page keeps the recording unprocessed when refused
            await self._refuse(scope, receive, send, "This app does not process screen recordings", plain=True,
                               status=403)
            return
        declared = _content_length(scope)
        upload = scope["method"] == "POST" and scope["path"].endswith(UPLOAD_PATH)
        address = address_of(Request(scope)) if upload else None
        refusal = self._body_refusal(declared) if declared is not None and declared > self.max_body else None
        if refusal is None and upload:
            refusal = self.uploads.refusal(address, declared or 0)
        if refusal is not None:
            await self._refuse(scope, receive, send, refusal, plain=upload)
            return
        # an upload counts by the bytes it has sent, not those it says it will: slow bodies that announce 10 MB each
        # held the whole store's share while they trickled in, and every other visitor's upload was refused
        await self._counted(scope, receive, send, self.uploads.add(address, 0) if upload else None)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, upload: _Upload | None) -> None:
        """Pass the request on, counting its body as it is read; refused as soon as it passes a limit."""
        state = {"read": 0, "refusal": None, "started": False, "status": 0, "answer": b""}

        async def counted() -> Message:
            message = await receive()
            state["read"] += len(message.get("body", b""))
            if state["read"] > self.max_body:
                state["refusal"] = self._body_refusal(None)
            elif upload is not None and state["read"] > upload.size:  # counted as it comes
                upload.size = state["read"]
                state["refusal"] = self.uploads.refusal(upload.address, upload.size, besides=upload)
            if state["refusal"] is not None:
                raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            if state["refusal"] is not None and not state["started"]:  # the app's answer to a body cut short
                return  # ours goes instead
            if message["type"] == "http.response.start":
                state["started"], state["status"] = True, message["status"]
            elif upload is not None and state["status"] == 200:
                state["answer"] += message.get("body", b"")
                if not message.get("more_body", False):  # counted as stored before its sender hears it is
                    upload.stored = _stored_paths(state["answer"])
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            pass
        except ClientDisconnect:  # its sender left before the end of its body: nobody to answer, nothing to keep
            self.quiet.warn(address_of(Request(scope)), "request cut off by its sender", "its body ended early")
            return
        finally:
            if upload is not None and (state["refusal"] is not None or state["status"] != 200):
                self.uploads.drop(upload)
                _progress_ended(scope)
        if state["refusal"] is not None and not state["started"]:
            await self._refuse(scope, receive, send, state["refusal"], plain=upload is not None)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, message: str, plain: bool,
                      status: int = 413) -> None:
        self.quiet.warn(address_of(Request(scope)), "request refused", message)
        await refuse(receive, send, message, plain, status)

    def _body_refusal(self, size: int | None) -> str:
        told = _mb(size) if size is not None else f"over {_mb(self.max_body)}"
        return (f"What you sent is {told}; the app takes at most {_mb(self.max_body)} at once: an upload or a typed "
                f"text may be {_mb((self.max_body - 2**20) // 2)}")


def _progress_ended(scope: Scope) -> None:
    """An upload that failed or was cut off is no longer tracked by gradio, so that a stream of its progress ends
    (gradio kept the upload's id as unfinished for good, and polled every stream of it every 50 ms)."""
    from gradio.routes import file_upload_statuses

    for upload_id in parse_qs(scope.get("query_string", b"").decode("latin-1")).get("upload_id", []):
        file_upload_statuses.stop_tracking(upload_id)


class QuietLog:
    """Warnings a flood would repeat: the first of each kind from each address is logged, then at most one every
    `every_s`, saying how many more there were since; an unexpected `error` is logged with its traceback, as an
    error, on the same terms."""

    def __init__(self, every_s: float = LOG_EVERY_S):
        self.every_s = every_s
        self._seen: dict[Hashable, tuple[float, int]] = {}  # (address, kind): when last logged, how many since

    def warn(self, address: str | None, kind: str, message: str, error: BaseException | None = None) -> None:
        now, key = time.monotonic(), (address, kind)
        logged, since = self._seen.get(key, (None, 0))
        if logged is not None and now - logged < self.every_s:
            self._seen[key] = (logged, since + 1)
            return
        more = f" ({since:,} more like it in the last {now - logged:.0f} s)" if logged is not None and since else ""
        log.log(logging.ERROR if error else logging.WARNING, "%s from %s: %s%s", kind,
                address or "this host's network", message, more, exc_info=error)
        self._seen[key] = (now, 0)
        if len(self._seen) > 1000:  # a flood from many addresses: forget those quiet for a while
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.every_s}


class RepeatedWarnings(logging.Filter):
    """A logger's warnings a flood of malformed requests repeats one a request (uvicorn's "Invalid HTTP request
    received.", python-multipart's "Expected boundary character ..."), let through as `QuietLog` lets its own: the
    first of each (digits aside), then at most one every `every_s`, saying how many more there were since."""

    def __init__(self, every_s: float = LOG_EVERY_S):
        super().__init__()
        self.every_s, self._seen = every_s, {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        now, key = time.monotonic(), (record.name, re.sub(r"\d+", "N", record.getMessage()))
        logged, since = self._seen.get(key, (None, 0))
        if logged is not None and now - logged < self.every_s:
            self._seen[key] = (logged, since + 1)
            return False
        if logged is not None and since:
            more = f"({since:,} more like it in the last {now - logged:.0f} s)"
            record.msg, record.args = f"{record.getMessage()} {more}", ()
        self._seen[key] = (now, 0)
        if len(self._seen) > 1000:
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.every_s}
        return True


NOISY_LOGGERS = ("uvicorn.error", "python_multipart.multipart")  # a line a malformed request, written by others


def quiet_repeated_warnings() -> None:
    """A malformed request's warning logged a line a minute, not a line a request (issue 69: 10 threads from one
    address wrote 806 KB of log in 20 s), on each of NOISY_LOGGERS, once."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatedWarnings) for f in logger.filters):
            logger.addFilter(RepeatedWarnings())


async def refuse(receive: Receive, send: Send, message: str, plain: bool, status: int = 413) -> None:
    """Answer `status` with `message` (plain text for an upload, which the page shows as it comes; JSON's "detail"
    elsewhere, which the page shows for a question), read and drop the rest of the body, and close."""
    body = message.encode() if plain else json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8" if plain else b"application/json"),
                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    dropped = 0
    while dropped < DRAIN_BYTES:
        event = await receive()
        dropped += len(event.get("body", b""))
        if event["type"] != "http.request" or not event.get("more_body", False):
            break
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _stored_paths(answer: bytes) -> tuple[str, ...]:
    """The paths gradio's answer to an upload names (a JSON list), in order; none where it names none."""
    try:
        paths = json.loads(answer)
    except ValueError:
        return ()
    return tuple(sorted(p for p in paths if isinstance(p, str))) if isinstance(paths, list) else ()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:,.0f} MB"
