"""One run inside one ZeroGPU call: what runs in the GPU worker that Hugging Face's `spaces` forks from the app, and
how long the call asks for.

On ZeroGPU (docs/deploy.md) a GPU exists only inside a function decorated with `@spaces.GPU`, which runs in a worker
process forked from the app's. A worker may be kept and reused for a later call: it then holds the app's memory as it
was when it was forked. So the call is handed everything it needs in its arguments (the run's config, and the file
whose appearance asks it to stop), reads its text from the disk it shares with the app, and sends everything back as
messages that cross a queue, pickled: the run's records; once the model is built, a CPU copy of it and its tokenizer;
then its weights every LIVE_EVERY_S, so that the app can answer questions about the run in progress and keep what it
trained if the call is cut. The run writes its own checkpoint to the run's folder, as a run in the app's process does.

ZeroGPU asks each call's length before it starts (`call_seconds`, from the run's settings), and shorter calls are
served first. `spaces` multiplies that length by its GPU's factor before it asks (`charged_seconds`): the scheduler
checks the product against what is left of the visitor's daily quota. The run stops itself SAVE_RESERVE_S before the
call's length and saves, whatever its pace.
"""
from __future__ import annotations

import copy
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bert_demo.app.runs.run_process import run_for
from bert_demo.config import PRESETS, read_config
from bert_demo.training.settings import FinetuneConfig, RunConfig

MAX_CALL_ENV = "BERT_DEMO_ZEROGPU_MAX_S"
VISITOR_QUOTA_S = 120  # ZeroGPU's daily quota of a visitor without a Hugging Face account: no call may be charged more
# The factor `spaces` multiplies a call's length by where it cannot be imported (it is not installed, or torch is a CPU
# build under SPACES_ZERO_GPU): spaces 0.51.3's for the card ZeroGPU runs on since May 2026, an RTX Pro 6000 Blackwell
# (spaces/zero/configs.json), the largest it knows.
FALLBACK_FACTOR = 1.5
SETUP_S = 10  # the call's start: CUDA, the run's text read back from the cache, its model and data workers
SAVE_RESERVE_S = 5  # the run stops this long before its call's end: a last check on held-out text, and the save
SCORING_S = 10  # a fine-tuning run's scoring of its held-out and outside sentences
LIVE_EVERY_S = 5.0  # how often the call sends the run's weights back
WATCH_EVERY_S = 0.1  # how often the call looks for a stop request and at its clock
# Tokens a second a run reads on ZeroGPU's card (half an RTX Pro 6000 Blackwell, which `spaces` gives 1.5 times the
# time of its 3/7 of an H200), by model size: a fifth of the step alone measured on an H200 (benchmarks/README.md,
# "GPU": mini 2.20 M, small 1.37 M, base 0.43 M; tiny taken as twice mini), that is a quarter of the card, at the 80%
# of its step that a run should reach. An assumption until a run on ZeroGPU measures it: a slower run is stopped at
# its call's end all the same, and saves.
TOKENS_PER_S = {"tiny": 880_000, "mini": 440_000, "small": 275_000, "base": 86_000}

log = logging.getLogger(__name__)
Message = tuple[str, Any]  # ("record", a record), ("model", (CPU model, tokenizer)), ("weights", (step, bytes)),
# ("refused", why) or ("failed", why)


def duration_factor() -> float:
    """What `spaces` multiplies a call's length by before it asks ZeroGPU for the call: the `duration_factor` of the
    GPU it finds on this machine (`spaces.zero.config.get_config`, which `spaces.zero.client.get_duration_seconds`
    applies to every call but an `xlarge` one; the app's are never `xlarge`: it puts no weights on CUDA). Where
    `spaces` cannot be imported, FALLBACK_FACTOR."""
    try:
        from spaces.zero import config
    except (ImportError, AttributeError):  # AttributeError: spaces under SPACES_ZERO_GPU on a CPU build of torch
        return FALLBACK_FACTOR
    return float(config.get_config()["duration_factor"])


def charged_seconds(config: RunConfig) -> int:
    """The seconds of the visitor's quota a run's call asks for: its length times `duration_factor()`, rounded as
    `spaces` rounds it."""
    return round(call_seconds(config) * duration_factor())


def max_call_seconds() -> int:
    """The longest call a run may ask for here: BERT_DEMO_ZEROGPU_MAX_S, else the longest that `spaces` charges no
    more than VISITOR_QUOTA_S (80 s where the factor is 1.5), so that a visitor without an account can start any
    run's call on a day they have not used ZeroGPU."""
    value = os.environ.get(MAX_CALL_ENV)
    if not value:
        return math.floor(VISITOR_QUOTA_S / duration_factor())
    try:
        seconds = int(value)
    except ValueError:
        raise ValueError(f"{MAX_CALL_ENV} must be a whole number of seconds, got {value!r}") from None
    if not 20 <= seconds <= 300:
        raise ValueError(f"{MAX_CALL_ENV} must be between 20 and 300 seconds (ZeroGPU's longest call), got {seconds}")
    return seconds


def call_seconds(config: RunConfig) -> int:
    """The seconds a run's call asks ZeroGPU for, from its settings: the call's start, the tokens of its steps at
    the pace of its model's size (TOKENS_PER_S), a fine-tuning run's scoring, and its save; at most
    `max_call_seconds()`."""
    if isinstance(config, FinetuneConfig):
        tokens, extra = config.steps * config.batch_size * config.max_seq_len, SCORING_S
    else:
        tokens, extra = config.steps * config.batch_size * config.seq_len, 0
    seconds = SETUP_S + tokens / TOKENS_PER_S[_size(config)] + extra + SAVE_RESERVE_S
    return min(max_call_seconds(), math.ceil(seconds))


def _size(config: RunConfig) -> str:
    """The preset whose pace a run's model has: its own, else that of the smallest preset at least as large as the
    checkpoint it starts from (base's for anything larger)."""
    folder = config.model if isinstance(config, FinetuneConfig) else config.init_from
    if not folder:
        return config.preset
    shape = read_config(Path(folder))
    fits = [name for name in TOKENS_PER_S if PRESETS[name].hidden_size >= shape.hidden_size
            and PRESETS[name].num_hidden_layers >= shape.num_hidden_layers]
    return fits[0] if fits else "base"


def train_call(config: RunConfig, origin: str, visible_to: str | None, stop_file: str) -> Iterator[Message]:
    """The run, trained inside the call (`spaces.GPU` wraps this generator); see the module docstring. It stops at
    the first of: its last step, the app's stop request (`stop_file` appears), or SAVE_RESERVE_S before the call's
    length; then it saves and sends its last record. Its errors come back as messages: ZeroGPU would pass on only
    their class's name ("refused": settings or data it cannot train on, before any step; "failed": anything else)."""
    deadline = time.monotonic() + call_seconds(config) - SAVE_RESERVE_S
    one_cpu_thread()
    try:
        run = run_for(config, origin=origin, visible_to=visible_to)
        with children_allowed(), _Watch(run, Path(stop_file), deadline) as watch:
            yield from _messages(run, watch)
    except ValueError as exc:
        yield "refused", str(exc)
    except Exception as exc:  # noqa: BLE001 - the app turns this into the run's last record
        log.exception("training run %s failed in its GPU call", config.out)
        yield "failed", f"{type(exc).__name__}: {exc}"


def _messages(run: Any, watch: "_Watch") -> Iterator[Message]:
    """The run's records, the model once built, and its weights every LIVE_EVERY_S, all taken between steps."""
    sent_model, sent_weights = False, time.monotonic()
    for record in run.run():
        if watch.reason and not watch.told:
            watch.told = True
            yield "record", {"kind": "status", "step": run.step, "message": watch.reason}
        if run.model is not None and not sent_model:
            sent_model, sent_weights = True, time.monotonic()
            yield "model", (copy.deepcopy(run.model).cpu(), run.tokenizer)
        elif run.model is not None and time.monotonic() - sent_weights >= LIVE_EVERY_S:
            sent_weights = time.monotonic()
            yield "weights", (run.step, weights_bytes(run.model))
        yield "record", record


class _Watch(threading.Thread):
    """Stops the run when the app asks (its stop file appears) or when the call's time is nearly up, and says why."""

    def __init__(self, run: Any, stop_file: Path, deadline: float):
        super().__init__(name="gpu-call-watch", daemon=True)
        self.run_, self.stop_file, self.deadline = run, stop_file, deadline
        self.reason: str | None = None
        self.told = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(WATCH_EVERY_S):
            if self.stop_file.exists():
                self._stop_run("stopped as you asked: the run saves what it trained")
            elif time.monotonic() >= self.deadline:
                self._stop_run("the GPU call's time is nearly up: the run stops and saves what it trained")

    def _stop_run(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.run_.stop()

    def __enter__(self) -> "_Watch":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


def one_cpu_thread() -> None:
    """Compute on the CPU with one thread in this process. The worker is forked from the app's process, whose
    answers on the CPU started OpenMP's threads; OpenMP (GNU libgomp) cannot start threads again in a forked child,
    so the child's first parallel region on more than one thread waits for ever (seen: the first step of a run's
    preparation, `unigram_log_probs`). With one thread no team is started. The run's CPU work is light here (its data
    workers are processes of their own, which PyTorch keeps at one thread too); its GPU does the rest."""
    import torch

    from bert_demo.training.runtime import CPU_THREADS_ENV

    os.environ[CPU_THREADS_ENV] = "1"  # read by the run's set_cpu_threads
    torch.set_num_threads(1)


@contextmanager
def children_allowed() -> Iterator[None]:
    """Let the run start its data workers. `spaces` runs the call in a daemon process, and multiprocessing refuses
    children to a daemon ("daemonic processes are not allowed to have children"): the flag is lifted for the call
    only. The workers are the run's DataLoader's, which end with the run or when their parent dies."""
    process = multiprocessing.current_process()
    daemon = process.daemon
    if daemon:
        process.daemon = False
    try:
        yield
    finally:
        if daemon:
            process.daemon = True


def weights_bytes(model: Any) -> bytes:
    """The model's weights on the CPU, as safetensors bytes (the decoder tied to the word embeddings left out: it
    shares their storage, and follows them when loaded)."""
    from safetensors.torch import save

    from bert_demo.checkpoint import TIED_KEYS

    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in model.state_dict().items()
             if name not in TIED_KEYS}
    return save(state)


def load_weights_bytes(model: Any, data: bytes) -> None:
    """Load `weights_bytes` into a model of the same shape (the app's copy of the run in progress)."""
    from safetensors.torch import load

    from bert_demo.checkpoint import TIED_KEYS

    missing, unexpected = model.load_state_dict(load(data), strict=False)
    if unexpected or set(missing) - set(TIED_KEYS):
        raise ValueError(f"the GPU call sent weights of another model ({len(missing)} missing, {len(unexpected)} "
                         "unexpected)")
