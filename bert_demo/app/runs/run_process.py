"""A training run in a child process, so that training and the visitors' questions share the CPU fairly.

In the app's own process, training competes with every request for the GIL, and two sets of OpenMP threads fight
over the cores: under 20 users' load a run made 3-5 steps/s of its 15-17 alone (benchmarks/load_app.py). In a
process of its own it trains at the speed of the CLI, and while visitors are being answered it trains on one core
instead of all of them: a parallel region with two threads stalls whenever the scheduler runs only one of them.

`ProcessTrainer` stands in for a `loop.Run` in the app's `TrainingJob`: the same `run()`, `stop()`, `step`,
`snapshot()`, `tokenizer`, `history` and `config`. The child shares its model's weights with this process (shared
memory, updated in place by the optimizer), so the run in progress can be asked questions as before. Nothing
waits across the two processes, so that neither can hang the other by dying: `snapshot` copies the weights and
keeps the copy only if no write overlapped it (a seqlock), and the records come through a one-way pipe that reads
as ended when the child is gone. Records and the model travel between our own two processes; nothing a visitor
sent is ever unpickled. As with any multiprocessing, the child imports the main module again (as `__mp_main__`): a
script that starts runs through the `Registry` needs the usual `if __name__ == "__main__":` guard (app.py has one).
"""
from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from statistics import median
from typing import Any

from bert_demo.training.records import HISTORY_KINDS, Record
from bert_demo.training.settings import FinetuneConfig, RunConfig, TrainConfig

log = logging.getLogger(__name__)

BUSY_SHARE = 0.75  # work on all the cores that got less of their time than this: the machine is busy (`pace.py` too)
PROBE_S = 0.15  # how long a run, as it starts, works on all its cores to see whether it gets them (`first_threads`)
BUSY_S = 1.0  # a run trains on one core for this long after a visitor's question was answered
POLL_S = 0.05  # how often the child passes its step and a stop request on
SNAPSHOT_WAIT_S = 10.0  # longest a snapshot keeps retrying while the weights change (a save, or many steps)
HANDOVER_WAIT_S = 30.0  # longest the child stays, once done, for the app to take over the shared weights
_context: Any = None
_last_question: Any = None  # time.monotonic() of the newest question, shared with the child
_CONTEXT_LOCK = threading.Lock()


def context() -> Any:
    """The multiprocessing context for runs: a fork server that has imported torch and the trainer once, so a run
    starts in a fraction of a second, and forks no thread of the web server. Spawn where there is no fork server.
    The fork server keeps the environment it started with."""
    global _context, _last_question
    with _CONTEXT_LOCK:
        if _context is None:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            if "forkserver" in methods:
                ctx.set_forkserver_preload(["bert_demo.app.runs.run_process", "bert_demo.training.pretraining",
                                            "bert_demo.training.finetuning"])
            _last_question = ctx.Value("d", 0.0, lock=False)
            _context = ctx
    return _context


def warm_up() -> None:
    """Start the fork server in the background (it imports torch and the trainer: about two seconds of one core),
    so that the first run a visitor starts does not wait for it. The app calls this on its first use of a model."""
    def start() -> None:
        if context().get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()

    threading.Thread(target=start, name="start-fork-server", daemon=True).start()


def run_for(config: RunConfig, **options: Any) -> Any:
    """The run that trains a config (a `loop.Run`): fine-tuning for a FinetuneConfig, pre-training for a
    TrainConfig; `options` as `loop.Run` takes them (origin, visible_to, control)."""
    if isinstance(config, FinetuneConfig):
        from bert_demo.training.finetuning import finetuning

        return finetuning(config, **options)
    from bert_demo.training.pretraining import pretraining

    return pretraining(config, **options)


def rescue(config: RunConfig, model: Any, tokenizer: Any, step: int, history: list[Record], message: str,
           training_words: int | None = None, **options: Any) -> Record:
    """Save weights that outlived the process that trained them (the app's shared copy of a run whose process was
    killed, the last weights a GPU call sent back) as the run's checkpoint, stopped at `step`, with the records it
    had sent and the words it had counted; the record that says so (its checkpoint None where the save failed)."""
    run = run_for(config, **options)
    run.model, run.tokenizer, run.control.step, run.history = model, tokenizer, step, history
    run.training_words = training_words
    elapsed = float(history[-1]["elapsed"]) if history else 0.0
    return run.finish("stopped", time.perf_counter() - elapsed, None, message)


def question_asked() -> None:
    """Tell a run in progress that a visitor is waiting for an answer (see BUSY_S)."""
    if _last_question is not None:
        _last_question.value = time.monotonic()


class ProcessTrainer:
    """A pre-training or fine-tuning run in a child process; see the module docstring."""

    def __init__(self, config: TrainConfig | FinetuneConfig, origin: str = "app", visible_to: str | None = None):
        """`config` was checked when the visitor's settings were read (`requests`); the child builds the run."""
        self.config = config
        self.visible_to = visible_to
        self.history: list[Record] = []  # as a run keeps it (an app run never resumes, so it starts empty)
        self.training_words: int | None = None  # as the child counted them (its status record says)
        self._arguments = (config, origin, visible_to)
        ctx = context()
        self._stop, self._step = ctx.Value("b", 0, lock=False), ctx.Value("q", 0, lock=False)
        self._writes = ctx.Value("q", 0, lock=False)  # odd while the child changes the weights
        self._received = ctx.Value("b", 0, lock=False)  # set once this process holds the shared weights
        self.model: Any = None
        self.tokenizer: Any = None
        self.torn = False  # whether the child died in the middle of changing the weights
        self.process: Any = None  # the child, once started
        self._app_alive: Any = None  # the writing end of a pipe never written to: the child stops when it closes

    @property
    def step(self) -> int:
        return int(self._step.value)

    @property
    def stopping(self) -> bool:
        return bool(self._stop.value)

    def stop(self) -> None:
        """Ask the run to end after the current step; it then saves its checkpoint."""
        self._stop.value = 1

    def snapshot(self) -> Any:
        """An eval-mode copy of the run's weights as they are now: one that no optimizer step or save overlapped."""
        if self.model is None:
            return None
        deadline = time.monotonic() + SNAPSHOT_WAIT_S
        while time.monotonic() < deadline:
            before = self._writes.value
            if before % 2 == 0:
                model = copy.deepcopy(self.model)
                if self._writes.value == before:
                    return model.eval()
            time.sleep(0.002)
        raise ValueError("the run is busy: try again in a few seconds")

    def rescue(self) -> Record | None:
        """After the child ended without saving (killed): save the weights this process shares with it, as the run
        stopped at the step they belong to, unless the child died mid-step (then they are half updated) or before
        it built its model. The record that ends the run, or None when nothing could be saved."""
        if self.model is None or self.torn:
            return None
        config, origin, visible_to = self._arguments
        step = self.step
        message = (f"the run's process ended at step {step} without saving: the app saved the weights it shares "
                   "with it")
        return rescue(config, copy.deepcopy(self.model), self.tokenizer, step, list(self.history), message,
                      self.training_words, origin=origin, visible_to=visible_to)

    def run(self) -> Iterator[Record]:
        """Start the child and yield its records until the last one ("done"), or until the child ends."""
        ctx = context()
        records, sender = ctx.Pipe(duplex=False)
        app_alive, self._app_alive = ctx.Pipe(duplex=False)  # only this process holds the writing end
        self.process = child = ctx.Process(
            target=_train, name=f"train-{os.path.basename(self.config.out)}", daemon=True,
            args=(*self._arguments, sender, self._stop, self._step, self._writes, self._received, _last_question,
                  app_alive))
        child.start()
        sender.close()  # the child's end only: once the child is gone, reading says so (EOFError)
        app_alive.close()
        try:
            for kind, payload in _messages(records):
                if kind == "model":
                    self.model, self.tokenizer = payload
                    self._received.value = 1
                elif kind == "refused":
                    raise ValueError(payload)
                elif kind == "failed":
                    raise RuntimeError(payload)
                else:
                    if payload.get("kind") in HISTORY_KINDS:
                        self.history.append(payload)
                    self.training_words = payload.get("training_words", self.training_words)
                    yield payload
                    if payload.get("kind") == "done":
                        return
        finally:
            self.stop()
            for _ in _messages(records, until=time.monotonic() + 60):  # let it save; read on so it never blocks
                pass
            records.close()
            child.join(timeout=5)
            if not child.is_alive():
                self.torn = self._writes.value % 2 == 1  # killed mid-step: the shared weights are half updated
                self._writes.value += self._writes.value % 2  # a child killed mid-step never finished its write
                if self.model is not None:  # into this process's own memory, so the shared memory is freed
                    self.model = copy.deepcopy(self.model)


def _messages(records: Any, until: float | None = None) -> Iterator[tuple[str, Any]]:
    """What the child sends, until it has ended (or until the time `until`). A child killed while this process
    fetches the shared weights it sent (their file descriptors come from the child's own socket) has ended too."""
    while until is None or time.monotonic() < until:
        if records.poll(POLL_S * 10):
            try:
                yield records.recv()
            except (EOFError, ConnectionError):
                return


class _Writing:
    """The child run's `Control.lock`: counts up when the weights start changing and again when they are consistent
    (a seqlock), so that `snapshot` can tell whether its copy overlapped a change. Nothing ever waits on it. The
    shared step is set before the count closes: weights and step agree whenever the count is even."""

    def __init__(self, writes: Any, control: Any, step: Any):
        self.writes, self.control, self.step = writes, control, step

    def __enter__(self) -> None:
        self.writes.value += 1

    def __exit__(self, *exc: object) -> None:
        self.step.value = self.control.step
        self.writes.value += 1


def _train(config: TrainConfig, origin: str, visible_to: str | None, sender: Any, stop: Any, step: Any,
           writes: Any, received: Any, last_question: Any, app_alive: Any) -> None:
    """The child: run the pre-training or fine-tuning, send its records, and share its model once built."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the app stops the run

    shared, connected = None, True  # shared: None until the model is built, then whether it could be

    def send(message: tuple[str, Any]) -> None:
        nonlocal connected
        if connected:
            try:
                sender.send(message)
            except ConnectionError:  # the app is gone: the run goes on to stop and save all the same
                connected = False

    try:
        import torch

        from bert_demo.training.loop import Control
        from bert_demo.training.runtime import CPU_THREADS_ENV, cpu_threads

        cores = cpu_threads()
        first = first_threads(torch, cores)
        os.environ[CPU_THREADS_ENV] = str(first)  # read by the run's set_cpu_threads as it starts
        control = Control(after_step=Threads(last_question, torch.set_num_threads, cores, first))
        control.lock = _Writing(writes, control, step)
        trainer = run_for(config, origin=origin, visible_to=visible_to, control=control)
        threading.Thread(target=_relay, args=(trainer, stop, step, app_alive), daemon=True).start()
        for record in trainer.run():
            step.value = trainer.step  # exact with every record, not only every POLL_S
            if shared is None and trainer.model is not None:  # between steps: the weights are not changing now
                shared = _share(trainer, send)
            send(("record", record))
    except ValueError as exc:
        send(("refused", str(exc)))
    except Exception as exc:  # noqa: BLE001 - the parent turns this into the run's last record
        log.exception("training run %s failed", config.out)
        send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        # the app takes the shared weights over from this process while it lives: wait for that, or for its end
        deadline = time.monotonic() + HANDOVER_WAIT_S
        while shared and connected and not received.value and not app_alive.poll() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        sender.close()


def _share(trainer: Any, send: Callable[[tuple[str, Any]], None]) -> bool:
    """Move the model's weights to shared memory and send it to the app; False (the run trains on, but cannot be
    asked questions while it does) where the shared memory is too small, as in a container's 64 MB /dev/shm."""
    try:
        for tensor in trainer.model.state_dict().values():
            tensor.share_memory_()
    except (RuntimeError, OSError) as exc:
        log.warning("the run's weights cannot be shared (%s): it cannot be asked questions while it trains", exc)
        return False
    send(("model", (trainer.model, trainer.tokenizer)))
    return True


class Threads:
    """The child's trainer calls this after each step: it picks the CPU threads the next steps train on.

    While a visitor's question was answered within the last BUSY_S, one thread, so that the question gets a core.
    Otherwise the count that trains faster now: all of this process's `cores` where nothing else wants them, but one
    where another program keeps a core busy (two OpenMP threads then wait on each other at every parallel region: a
    tiny step took 0.38-0.89 s on two threads and 17 ms on one, on a loaded machine). The run starts on `first`
    (`first_threads`). Every so often it trains on the other count, for TRIAL_STEPS steps or until one of them takes
    LOSING times the kept count's median, and keeps whichever's median step was shorter. A trial lost doubles the
    wait for the next, from TRY_EVERY_S up to MAX_WAIT_S: beside a second heavy process, trials of two threads every
    20 s and a start on two made the Fine-tune tab's experiment take 217 s, against 110 s on one thread throughout.
    `pace.py` times a run the same way before it starts."""

    TRY_EVERY_S = 20.0
    MAX_WAIT_S = 160.0
    TRIAL_STEPS = 3
    LOSING = 2.0

    def __init__(self, last_question: Any, set_threads: Callable[[int], None], cores: int, first: int,
                 clock: Callable[[], float] = time.monotonic):
        self.last_question, self.set_threads, self.clock = last_question, set_threads, clock
        self.cores, self.best, self.current = cores, first, first
        self.steps: dict[int, list[float]] = {1: [], cores: []}  # the latest step times on each count
        self.trying: int | None = None
        self.wait = self.TRY_EVERY_S
        self.next_trial = clock() + self.wait
        self.before: float | None = None  # when the step that just ended began

    def __call__(self) -> None:
        now = self.clock()
        if self.before is not None:
            self._keep(self.current, now - self.before)
        wanted = 1 if now - self.last_question.value < BUSY_S else self._wanted(now)
        if wanted != self.current:
            self.set_threads(wanted)
            self.current = wanted
        self.before = self.clock()

    def _keep(self, threads: int, seconds: float) -> None:
        times = self.steps[threads]
        times.append(seconds)
        del times[:-self.TRIAL_STEPS]

    def _wanted(self, now: float) -> int:
        """The count to train the next step on: the one on trial until its trial is over, then the faster."""
        if self.cores == 1:
            return 1
        if self.trying is not None:
            trial, kept = self.steps[self.trying], median(self.steps[self.best] or [float("inf")])
            lost = bool(trial) and trial[-1] > self.LOSING * kept
            if lost or len(trial) >= self.TRIAL_STEPS:
                won = not lost and median(trial) < kept
                self.best = self.trying if won else self.best
                self.wait = self.TRY_EVERY_S if won else min(2 * self.wait, self.MAX_WAIT_S)
                self.trying, self.next_trial = None, now + self.wait
        if self.trying is None and now >= self.next_trial and len(self.steps[self.best]) >= self.TRIAL_STEPS:
            self.trying = 1 if self.best == self.cores else self.cores
            self.steps[self.trying].clear()
        return self.trying or self.best


def first_threads(torch: Any, cores: int) -> int:
    """The threads a run starts on, its preparation included: all of `cores`, unless a moment of work on them got
    less than BUSY_SHARE of their time (another program keeps a core busy), then one. `Threads` corrects it at its
    first trial. (The load average, tried first, speaks for the last minute: with it, the Fine-tune experiment started
    seconds after a second heavy process still spent 22.6 s preparing, against 5.4 s with this.)"""
    if cores == 1:
        return 1
    return 1 if cpu_share(torch, cores) < BUSY_SHARE else cores


def cpu_share(torch: Any, threads: int, wall: Callable[[], float] = time.perf_counter,
              cpu: Callable[[], float] = time.process_time) -> float:
    """Of `threads` threads' time, the share that matrix products on them got for PROBE_S."""
    torch.set_num_threads(threads)
    matrix = torch.ones(384, 384)
    started, used = wall(), cpu()
    while wall() - started < PROBE_S:
        matrix @ matrix
    return (cpu() - used) / ((wall() - started) * threads)


def _relay(trainer: Any, stop: Any, step: Any, app_alive: Any) -> None:
    """Pass the trainer's step to the parent until the process ends, and the parent's stop request to the trainer;
    stop it too when the app is gone (its end of `app_alive` closed: it is never written to), so that a killed app
    leaves a saved run."""
    stopped = False
    while True:
        step.value = trainer.step
        if not stopped and (stop.value or app_alive.poll()):
            trainer.stop()
            stopped = True
        time.sleep(POLL_S)
