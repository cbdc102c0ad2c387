"""A stand-in for ZeroGPU's device API on loopback, the service Hugging Face's `spaces` package talks to on a ZeroGPU
Space (`SPACES_ZERO_DEVICE_API_URL`; spaces 0.51.3, spaces/zero/api.py), so that the app runs under the real package:

- `POST /startup-report`: the app has launched with its GPU functions; 200.
- `POST /schedule` (params `cgroupPath`, `taskId`, `durationSeconds`, `token`, `enableQueue`, `tokenVersion`,
  `gpuSize`): a GPU for a call, 200 with `{"idle", "nvidiaIndex", "nvidiaUUID", "allowToken"}`; or, where the call
  asks for more seconds than the visitor has left (`left`), 429 with `{"left", "wait"}` and, for a visitor signed in
  (`auth`), the `X-Authenticated` header. `idle` says that no call holds the GPU (spaces then reuses its worker).
- `POST /allow` (`allowToken`, `pid`): the call's worker process may use the GPU; 200, or 404 for a token never
  given.
- `POST /release` (`allowToken`, `fail`): the call has ended; 200, or 404 for a token not held.
- `GET /queue-size`: the calls waiting for a GPU (none: every call is served at once).

Every request is kept in `requests` (method, path, params), for tests to read what `spaces` asked.
"""
from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # where spaces reads which GPU this machine has
WAIT_S = 300  # how long a refused visitor is told to wait


def gpu_uuid() -> str:
    """This machine's first NVIDIA GPU's UUID as its driver reports it (the worker makes it CUDA's only visible
    device), or a made-up one where there is none."""
    for information in sorted(NVIDIA_GPUS.glob("*/information")):
        for line in information.read_text().splitlines():
            if line.startswith("GPU UUID:"):
                return line.split(":", 1)[1].strip()
    return f"GPU-{uuid.UUID(int=0)}"


class DeviceAPI:
    """The device API, served on 127.0.0.1 from a thread of this process while used as a context manager; `url` is
    what SPACES_ZERO_DEVICE_API_URL must say. `left`: the seconds the visitor has left today (None: no limit);
    `auth`: "regular" or "pro" for a visitor signed in, else None."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.left: int | None = None
        self.auth: str | None = None
        self.uuid = gpu_uuid()
        self.allowed: dict[str, int | None] = {}  # the tokens given and not yet released: the pid allowed, if any
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "DeviceAPI":
        threading.Thread(target=self._server.serve_forever, name="zerogpu-device-api", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def asked(self, path: str) -> list[dict[str, str]]:
        """The params of every request to `path`, in order."""
        with self._lock:
            return [params for _, seen, params in self.requests if seen == path]

    def answer(self, method: str, path: str, params: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        """The status, JSON body and headers the device API answers a request with."""
        with self._lock:
            self.requests.append((method, path, params))
            if (method, path) == ("POST", "/startup-report"):
                return 200, None, {}
            if (method, path) == ("POST", "/schedule"):
                return self._schedule(int(params.get("durationSeconds", 60)))
            if (method, path) == ("POST", "/allow"):
                return self._allow(params.get("allowToken", ""), int(params.get("pid", 0)))
            if (method, path) == ("POST", "/release"):
                return self._release(params.get("allowToken", ""))
            if (method, path) == ("GET", "/queue-size"):
                return 200, 0.0, {}
            return 404, {"detail": f"no {method} {path} here"}, {}

    def _schedule(self, seconds: int) -> tuple[int, Any, dict[str, str]]:
        if self.left is not None and seconds > self.left:
            return 429, {"left": self.left, "wait": WAIT_S}, {"X-Authenticated": self.auth} if self.auth else {}
        idle, token = not self.allowed, uuid.uuid4().hex
        self.allowed[token] = None
        return 200, {"idle": idle, "nvidiaIndex": 0, "nvidiaUUID": self.uuid, "allowToken": token}, {}

    def _allow(self, token: str, pid: int) -> tuple[int, Any, dict[str, str]]:
        if token not in self.allowed:
            return 404, {"detail": "unknown allowToken"}, {}
        self.allowed[token] = pid
        return 200, None, {}

    def _release(self, token: str) -> tuple[int, Any, dict[str, str]]:
        if token not in self.allowed:
            return 404, {"detail": "allowToken not held"}, {}
        del self.allowed[token]
        return 200, None, {}


def _handler(api: DeviceAPI) -> type[BaseHTTPRequestHandler]:
    """A request handler that answers with `api`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def _reply(self, method: str) -> None:
            url = urlsplit(self.path)
            params = {key: values[-1] for key, values in parse_qs(url.query).items()}
            status, body, headers = api.answer(method, url.path, params)
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:  # the requests are kept in `api.requests`, not printed
            pass

    return Handler
