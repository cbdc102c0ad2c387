"""A training run in a child process, so that training and the visitors' questions share the CPU fairly.

In the app's own process, training competes with every request for the GIL, and two sets of OpenMP threads fight
over the cores: under 20 users' load a run made 3-5 steps/s of its 15-17 alone (benchmarks/load_app.py). In a
process of its own it trains at the speed of the CLI, and while visitors are being answered it trains on one core
instead of all of them: a parallel region with two threads stalls whenever the scheduler runs only one of them.

`ProcessTrainer` stands in for `Trainer` in the app's `TrainingJob`: the same `run()`, `stop()`, `step`,
`snapshot()`, `tokenizer` and `config`. The child shares its model's weights with this process (shared memory,
updated in place by the optimizer), so the run in progress can be asked questions as before; `snapshot` copies
them under a lock the child holds while it changes them. Records and the model travel through a queue between our
own two processes; nothing a visitor sent is ever unpickled.
"""
from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from bert_demo.records import HISTORY_KINDS, Record
from bert_demo.train_config import TrainConfig

log = logging.getLogger(__name__)

BUSY_S = 1.0  # a run trains on one core for this long after a visitor's question was answered
POLL_S = 0.05  # how often the child passes its step and a stop request on
LOCK_WAIT_S = 10.0  # longest wait for the child to finish an optimizer step before a snapshot gives up
_context: Any = None
_last_question: Any = None  # time.monotonic() of the newest question, shared with the child


def context() -> Any:
    """The multiprocessing context for runs: a fork server that has imported torch and the trainer once, so a run
    starts in a fraction of a second, and forks no thread of the web server. Spawn where there is no fork server."""
    global _context, _last_question
    if _context is None:
        methods = multiprocessing.get_all_start_methods()
        _context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            _context.set_forkserver_preload(["bert_demo.app.run_process", "bert_demo.trainer"])
        _last_question = _context.Value("d", 0.0, lock=False)
    return _context


def warm_up() -> None:
    """Start the fork server in the background (it imports torch and the trainer: about two seconds of one core),
    so that the first run a visitor starts does not wait for it. The app calls this on its first use of a model."""
    def start() -> None:
        if context().get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()

    threading.Thread(target=start, name="start-fork-server", daemon=True).start()


def question_asked() -> None:
    """Tell a run in progress that a visitor is waiting for an answer (see BUSY_S)."""
    if _last_question is not None:
        _last_question.value = time.monotonic()


class ProcessTrainer:
    """A `Trainer` run in a child process; see the module docstring."""

    def __init__(self, config: TrainConfig, origin: str = "app", visible_to: str | None = None):
        """Checks the settings here (by building a Trainer, which does no work until it runs), so that a refusal
        comes at once; the child builds its own."""
        from bert_demo.trainer import Trainer

        self.config = Trainer(config, origin=origin, visible_to=visible_to).config
        self.visible_to = visible_to
        self.history: list[Record] = []  # as Trainer keeps it (an app run never resumes, so it starts empty)
        self._arguments = (config, origin, visible_to)
        ctx = context()
        self._messages = ctx.Queue()
        # flags, not an Event: an Event.set() waits for every waiter to wake, and a dead child's never does
        self._stop, self._step = ctx.Value("b", 0, lock=False), ctx.Value("q", 0, lock=False)
        self._lock = ctx.Lock()
        self.model: Any = None
        self.tokenizer: Any = None
        self.process: Any = None  # the child, once started
        self._app_alive: Any = None  # the writing end of a pipe never written to: the child stops when it closes

    @property
    def step(self) -> int:
        return int(self._step.value)

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self._stop.value = 1

    @property
    def stopping(self) -> bool:
        return bool(self._stop.value)

    def snapshot(self) -> Any:
        """An eval-mode copy of the run's weights as they are now, taken between optimizer steps."""
        if self.model is None:
            return None
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            raise ValueError("the run is busy: try again in a few seconds")
        try:
            return copy.deepcopy(self.model).eval()
        finally:
            self._lock.release()

    def run(self) -> Iterator[Record]:
        """Start the child and yield its records until the last one ("done"), or until the child ends."""
        app_alive, self._app_alive = context().Pipe(duplex=False)  # only this process holds the writing end
        self.process = child = context().Process(
            target=_train, name=f"train-{os.path.basename(self.config.out)}", daemon=True,
            args=(*self._arguments, self._messages, self._stop, self._lock, self._step, _last_question, app_alive))
        child.start()
        app_alive.close()
        try:
            while (message := self._next(child)) is not None:
                kind, payload = message
                if kind == "model":
                    self.model, self.tokenizer = payload
                elif kind == "refused":
                    raise ValueError(payload)
                elif kind == "failed":
                    raise RuntimeError(payload)
                else:
                    if payload.get("kind") in HISTORY_KINDS:
                        self.history.append(payload)
                    yield payload
                    if payload.get("kind") == "done":
                        return
        finally:
            self.stop()
            deadline = time.monotonic() + 60  # let it save; read on, so that it never waits to send
            while child.is_alive() and time.monotonic() < deadline:
                try:
                    self._messages.get(timeout=POLL_S)
                except queue.Empty:
                    pass

    def _next(self, child: Any) -> tuple[str, Any] | None:
        """The child's next message; None once it has ended and sent everything (a run killed without a last
        record: TrainingJob then reports that it ended unsaved)."""
        while True:
            try:
                return self._messages.get(timeout=POLL_S * 10)
            except queue.Empty:
                if not child.is_alive():
                    return None


def _train(config: TrainConfig, origin: str, visible_to: str | None, messages: Any, stop: Any, lock: Any,
           step: Any, last_question: Any, app_alive: Any) -> None:
    """The child: run the Trainer, send its records, and share its model once built."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the app stops the run
    from bert_demo.trainer import Trainer

    try:
        trainer = Trainer(config, origin=origin, visible_to=visible_to)
        trainer.lock = lock
        trainer.after_step = _yield_cores_to_questions(last_question)
        threading.Thread(target=_relay, args=(trainer, stop, step, app_alive), daemon=True).start()
        shared = False
        for record in trainer.run():
            if not shared and trainer.model is not None:  # between steps: the weights are not changing now
                for tensor in trainer.model.state_dict().values():
                    tensor.share_memory_()
                messages.put(("model", (trainer.model, trainer.tokenizer)))
                shared = True
            messages.put(("record", record))
    except ValueError as exc:
        messages.put(("refused", str(exc)))
    except Exception as exc:  # noqa: BLE001 - the parent turns this into the run's last record
        log.exception("training run %s failed", config.out)
        messages.put(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        messages.close()
        messages.join_thread()  # everything sent arrives before the process ends


def _yield_cores_to_questions(last_question: Any) -> Callable[[], None]:
    """What the child's trainer calls after each step: train on one core while a question was asked within the
    last BUSY_S, on all of this process's cores otherwise."""
    import torch

    cores = current = 0

    def after_step() -> None:
        nonlocal cores, current
        if not cores:  # what the Trainer set when it started (runtime.set_cpu_threads)
            cores = current = torch.get_num_threads()
        wanted = 1 if time.monotonic() - last_question.value < BUSY_S else cores
        if wanted != current:
            torch.set_num_threads(wanted)
            current = wanted

    return after_step


def _relay(trainer: Any, stop: Any, step: Any, app_alive: Any) -> None:
    """Pass the trainer's step to the parent, and the parent's stop request to the trainer; stop it too when the
    app is gone (its end of `app_alive` closed: it is never written to), so that a killed app leaves a saved run."""
    while not stop.value and not app_alive.poll():
        step.value = trainer.step
        time.sleep(POLL_S)
    trainer.stop()
