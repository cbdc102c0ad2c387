"""A stand-in for the Hugging Face Hub on loopback: every repository id names the same model folder, whose files it
serves as the hub does (the repository's listing and tree, then each file by `resolve`), its weights slowly where
asked, or held until `released` is set, and it counts the weights downloads, how many at once. `huggingface_hub` is
pointed at it by `pointed_at` (in this process) or by $HF_ENDPOINT (in a process started with it)."""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 64 * 1024  # bytes sent at a time
COMMIT = "0" * 40  # the one revision every repository has


class StandInHub:
    """The hub, serving `folder` as every repository, each weights file at `bytes_per_s` (None: at once)."""

    def __init__(self, folder: Path, bytes_per_s: float | None = None):
        self.files = {p.name: p for p in folder.iterdir() if p.is_file()}
        self.bytes_per_s = bytes_per_s
        self.downloads: list[str] = []  # the repositories whose weights were sent, in order
        self.at_once = self.most = 0  # weights downloads under way; the most at once
        self.released = threading.Event()  # weights are sent once it is set (it is, unless a test clears it)
        self.released.set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "StandInHub":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _listing(self, repo: str) -> dict:
        siblings = [{"rfilename": name, "size": path.stat().st_size} for name, path in self.files.items()]
        return {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": siblings, "private": False}

    def _tree(self) -> list[dict]:
        return [{"type": "file", "path": name, "size": path.stat().st_size, "oid": _digest(path)[:40]}
                for name, path in self.files.items()]

    def _weights(self, name: str) -> bool:
        return name.endswith(".safetensors")

    @contextmanager
    def _sending(self, repo: str) -> Iterator[None]:
        with self._lock:
            self.at_once += 1
            self.most = max(self.most, self.at_once)
            self.downloads.append(repo)
        try:
            yield
        finally:
            with self._lock:
                self.at_once -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet: a test's output is its own
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                path = self.path.split("?", 1)[0].strip("/").split("/")
                if path[:2] == ["api", "models"] and len(path) >= 5 and path[4] == "tree":
                    self._json(hub._tree(), body)
                elif path[:2] == ["api", "models"] and len(path) >= 4:
                    self._json(hub._listing("/".join(path[2:4])), body)
                elif len(path) >= 5 and path[2] == "resolve" and path[4] in hub.files:
                    self._file("/".join(path[:2]), path[4], body)
                else:
                    self.send_error(404, "Repository Not Found")

            def _json(self, value: dict | list, body: bool) -> None:
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _file(self, repo: str, name: str, body: bool) -> None:
                data = hub.files[name].read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", f'"{_digest(hub.files[name])}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                if not body:
                    return
                if not hub._weights(name):
                    self.wfile.write(data)
                    return
                with hub._sending(repo):
                    hub.released.wait(60)
                    for start in range(0, len(data), CHUNK):
                        self.wfile.write(data[start:start + CHUNK])
                        if hub.bytes_per_s:
                            time.sleep(CHUNK / hub.bytes_per_s)

        return Handler


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def pointed_at(hub: StandInHub, patch) -> Iterator[None]:
    """`huggingface_hub` in this process asks `hub` (`patch`: a pytest MonkeyPatch) instead of huggingface.co."""
    from huggingface_hub import constants

    patch.setattr(constants, "ENDPOINT", hub.url)
    patch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    yield
