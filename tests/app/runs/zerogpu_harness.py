"""What Hugging Face's `spaces` does with a `@spaces.GPU` generator on a ZeroGPU Space, done here without ZeroGPU, so
that tests hold the app to that contract (the `spaces` package, 0.51.3: spaces/zero/wrappers.py, torch/patching.py):

- The duration function is asked first, with the call's arguments; the call is bounded by what it said: past it the
  worker is killed and the call fails with gradio's error "GPU task aborted" (`GPUError`).
- The call runs in a worker process forked from this one (multiprocessing's fork context, a daemon, as spaces makes
  it). A worker may be forked ahead (`fork_now`) and is reused by later calls, so it holds this process's memory as
  it was when forked: what changed since must travel in the arguments or on disk.
- The arguments, and everything the call yields, cross a pipe pickled: a value that cannot be pickled fails the call.
  An exception raised in the call comes back as gradio's error naming only its class, as spaces passes it on.
- The app's process looks as if it had a GPU (`ZeroGPUTorch`: `torch.cuda.is_available()` says True) while any
  attempt to initialise CUDA there fails and is recorded; the worker undoes that, as spaces does, and has whatever
  the machine has (CUDA on a GPU host, the CPU elsewhere).
- `refuse_next(message)`: the next call is refused before it starts, as ZeroGPU refuses a visitor whose quota is spent.
"""
from __future__ import annotations

import multiprocessing
import pickle
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

try:
    from gradio import Error as GPUError  # what ZeroGPU raises in the app's process
except ImportError:  # a lent GPU machine has no gradio: an error with the same message and title stands in

    class GPUError(Exception):
        def __init__(self, message: str, title: str = "Error"):
            super().__init__(message)
            self.message, self.title = message, title

_FORK = multiprocessing.get_context("fork")


class ZeroGPUTorch:
    """torch as it looks in a ZeroGPU Space's own process: CUDA available and one device, but no CUDA can be
    initialised (each attempt recorded in `attempts`, then refused, as spaces's patched `_cuda_init` refuses it).
    `patch()` and `unpatch()` as spaces's. `in_worker()` undoes the patch in a GPU call's worker, and where this
    machine has no GPU lets the call's "cuda" runs train on the CPU, so that everything else is as on ZeroGPU."""

    ENTRIES = ("_lazy_init", "init", "set_device")  # the ways into CUDA (a CPU-only torch has no _cuda_init)

    def __init__(self):
        self.attempts: list[str] = []
        self.has_gpu = torch.cuda.is_available()
        self._real = {name: getattr(torch.cuda, name) for name in ("is_available", "device_count", *self.ENTRIES)}

    def patch(self) -> None:
        def refuse(*args: Any, **kwargs: Any) -> None:
            self.attempts.append("".join(traceback.format_stack(limit=12)))
            raise RuntimeError("CUDA must not be initialised in the main process on ZeroGPU")

        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 1
        for name in self.ENTRIES:
            setattr(torch.cuda, name, refuse)

    def unpatch(self) -> None:
        for name, real in self._real.items():
            setattr(torch.cuda, name, real)

    def in_worker(self) -> None:
        self.unpatch()
        if not self.has_gpu:
            cuda_runs_on_the_cpu()


def cuda_runs_on_the_cpu() -> None:
    """A run asked to train on "cuda" trains on the CPU (in a GPU call's worker on a machine without a GPU)."""
    from bert_demo.training import loop, runtime

    loop.pick_device = lambda requested, distributed: runtime.pick_device(
        "cpu" if str(requested).startswith("cuda") else requested, distributed)


class ForkedGPU:
    """`spaces.GPU(duration=...)` applied to a generator function, as on ZeroGPU (see the module docstring)."""

    def __init__(self, task: Callable[..., Iterator[Any]], duration: Callable[..., float],
                 in_worker: Callable[[], None] = lambda: None):
        """`in_worker` runs once in each new worker before its first call (ZeroGPUTorch.unpatch)."""
        self.task, self.duration, self.in_worker = task, duration, in_worker
        self.durations: list[float] = []  # what the duration function said, call by call
        self.workers_forked = 0
        self._worker: tuple[Any, Any] | None = None  # (process, this end of its pipe)
        self._refusal: str | None = None

    def fork_now(self) -> None:
        """Fork the worker now, before the app changes, for the next calls to reuse."""
        self._live_worker()

    def refuse_next(self, message: str) -> None:
        self._refusal = message

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        seconds = self.duration(*args, **kwargs)
        self.durations.append(seconds)
        if self._refusal is not None:
            message, self._refusal = self._refusal, None
            raise GPUError(message, title="ZeroGPU quota exceeded")
        process, pipe = self._live_worker()
        pipe.send_bytes(pickle.dumps((args, kwargs)))
        deadline = time.monotonic() + seconds
        try:
            while True:
                kind, value = self._receive(pipe, deadline)
                if kind == "end":
                    return
                if kind == "error":
                    raise GPUError(value, title="ZeroGPU worker error")
                yield value
        except GeneratorExit:  # the caller stopped reading: the call is closed after its next item, as spaces does
            if self._worker is not None:
                pipe.send_bytes(pickle.dumps("stop"))
            while self._worker is not None and self._receive(pipe, deadline)[0] not in ("end", "error"):
                pass
            raise

    def _receive(self, pipe: Any, deadline: float) -> tuple[str, Any]:
        """The worker's next message, or gradio's error "GPU task aborted" where the call's time is up (the worker
        is killed) or the worker died."""
        if not pipe.poll(max(0.0, deadline - time.monotonic())):
            self.kill()
            raise GPUError("GPU task aborted", title="ZeroGPU worker error")
        try:
            return pickle.loads(pipe.recv_bytes())
        except EOFError:
            self._worker = None
            raise GPUError("GPU task aborted", title="ZeroGPU worker error") from None

    def _live_worker(self) -> tuple[Any, Any]:
        if self._worker is None or not self._worker[0].is_alive():
            here, there = _FORK.Pipe()
            process = _FORK.Process(target=_serve, args=(self.task, there, self.in_worker), daemon=True)
            process.start()
            there.close()
            self._worker = (process, here)
            self.workers_forked += 1
        return self._worker

    def kill(self) -> None:
        """End the worker at once (SIGKILL), as ZeroGPU ends a call past its duration."""
        if self._worker is not None:
            self._worker[0].kill()
            self._worker[0].join(timeout=10)
            self._worker = None


def _serve(task: Callable[..., Iterator[Any]], pipe: Any, in_worker: Callable[[], None]) -> None:
    """The worker: calls, one after another, each item pickled back, then "end" (or "error" with the class name); a
    call whose caller stopped reading is closed after its next item."""
    in_worker()
    while True:
        try:
            args, kwargs = pickle.loads(pipe.recv_bytes())
        except EOFError:
            return
        try:
            items = task(*args, **kwargs)
            for item in items:
                pipe.send_bytes(pickle.dumps(("item", item)))
                if pipe.poll() and pickle.loads(pipe.recv_bytes()) == "stop":
                    items.close()
                    break
            pipe.send_bytes(pickle.dumps(("end", None)))
        except Exception as exc:  # noqa: BLE001 - passed on as spaces passes it: its class's name only
            traceback.print_exc()
            pipe.send_bytes(pickle.dumps(("error", type(exc).__name__)))
