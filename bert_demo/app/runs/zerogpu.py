"""ZeroGPU, the free GPU of Hugging Face Spaces: whether the app runs there, the GPU call a run trains in, and the
app's side of that call (`GPUCallTrainer`).

On a ZeroGPU Space (`SPACES_ZERO_GPU` set) the app's own process has no GPU, although `spaces` patches torch there so
that `torch.cuda.is_available()` says True; a GPU exists only inside a call of a function decorated with
`@spaces.GPU`, in a worker process forked from the app's (docs/deploy.md). So there the app answers every question on
the CPU in its own process, never initialising CUDA, and each visitor's run (a pre-training run, or one run of a
Fine-tune experiment) trains inside one call (`gpu_call.train_call`), which streams the run back.

`spaces` must be imported before gradio: `app.py` imports this module first. Elsewhere (locally, on CPU hardware or
a dedicated GPU) `GPU_TRAINING` is None and runs train as they always have.
"""
from __future__ import annotations

import contextvars
import copy
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bert_demo.app.runs.gpu_call import call_seconds, load_weights_bytes, train_call
from bert_demo.app.runs.run_process import rescue
from bert_demo.training.records import HISTORY_KINDS, Record
from bert_demo.training.settings import RunConfig, TrainConfig

log = logging.getLogger(__name__)

ZERO_GPU_ENV = "SPACES_ZERO_GPU"  # set by Hugging Face on a ZeroGPU Space
GPUCall = Callable[..., Iterator[Any]]  # train_call, as spaces.GPU wraps it (or a test's stand-in)


def on_zerogpu() -> bool:
    """Whether the app runs on a ZeroGPU Space (read as `spaces` reads it)."""
    return os.environ.get(ZERO_GPU_ENV, "").lower() in ("1", "t", "true")


def duration(config: RunConfig, *arguments: Any) -> int:
    """What a call of `train_call` asks ZeroGPU for, from the same arguments (spaces asks this before the call)."""
    return call_seconds(config)


def _decorated() -> GPUCall | None:
    """`train_call` wrapped by `spaces.GPU` on ZeroGPU, its length asked of the run's settings; None elsewhere. Done
    when this module is imported, before the app is launched: `spaces` reports its GPU functions at launch."""
    if not on_zerogpu():
        return None
    import spaces

    return spaces.GPU(duration=duration)(train_call)


GPU_TRAINING = _decorated()


class GPUCallTrainer:
    """A run trained inside a GPU call, followed from the app: it stands in for a `loop.Run` in the app's
    `TrainingJob`, as `run_process.ProcessTrainer` does (`run()`, `stop()`, `step`, `snapshot()`, `model`,
    `tokenizer`, `history`, `config`). The app holds a CPU copy of the model, brought up to date with the weights the
    call sends back; if the call ends without its run's last record (ZeroGPU cut it, or its worker died), the app
    saves the newest of those weights as the run's checkpoint."""

    def __init__(self, config: RunConfig, call: GPUCall, origin: str = "app", visible_to: str | None = None,
                 context: contextvars.Context | None = None):
        """`call` is `GPU_TRAINING` (or a test's stand-in); `context` is the one the visitor's click was handled in:
        ZeroGPU reads the visitor's request from it, to count the call against their quota."""
        self.config, self.call, self.origin, self.visible_to = config, call, origin, visible_to
        self.context = context or contextvars.copy_context()
        self.history: list[Record] = []
        self.training_words: int | None = None  # as the call's run counted them (its status record says)
        self.model: Any = None  # a CPU copy, once the call has built the model
        self.tokenizer: Any = None
        self.stop_file = Path(tempfile.gettempdir()) / f"bert-demo-stop-{uuid.uuid4().hex}"
        self._step = 0
        self._weights: tuple[int, bytes] | None = None  # the newest weights sent back, not yet loaded
        self._model_step = 0  # the step of the weights `model` holds

    @property
    def step(self) -> int:
        return self._step

    @property
    def stopping(self) -> bool:
        return self.stop_file.exists()

    def stop(self) -> None:
        """Ask the run to end after the current step (the call sees the stop file); it then saves."""
        self.stop_file.touch()

    def snapshot(self) -> Any:
        """An eval-mode copy of the run's newest weights that came back (None before the model is built)."""
        model = self._current()
        return None if model is None else copy.deepcopy(model).eval()

    def _current(self) -> Any:
        """The app's copy of the model, with the newest weights loaded."""
        if self.model is not None and self._weights is not None:
            self._model_step, data = self._weights
            self._weights = None
            load_weights_bytes(self.model, data)
        return self.model

    def run(self) -> Iterator[Record]:
        """Read the run's text on the CPU, then make the call and yield its run's records until the last. A call
        that fails before the model came back is refused with ZeroGPU's reason (ValueError); one cut later ends
        with the weights that came back, saved."""
        try:
            yield from self._prepare_here()
            yield {"kind": "status", "message": f"asking ZeroGPU for a GPU for up to {call_seconds(self.config)} s"}
            yield from self._follow_call()
        except _Refused as exc:
            raise ValueError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the call's errors come as gradio's, ZeroGPU's own or the run's
            reason = _reason(exc)
            saved = self.rescue(f"the GPU call ended at step {self._step:,} ({reason}): the app saved the weights of "
                                f"step {self._weights_step():,} that came back")
            if saved is None:
                raise ValueError(f"the GPU could not train this run: {reason}") from None
            yield saved
        finally:
            self.stop_file.unlink(missing_ok=True)

    def _prepare_here(self) -> Iterator[Record]:
        """A pre-training run on a named corpus has its text, vocabulary and token ids made here, on the CPU, and
        kept in the cache, where the call reads them back: none of the call's GPU time goes to them."""
        if isinstance(self.config, TrainConfig):
            from bert_demo.data.corpus import is_named
            from bert_demo.training.pretraining import prepare_data

            if is_named(self.config.corpus):
                yield {"kind": "status", "message": f"reading {self.config.corpus!r} on the CPU before the GPU call"}
                prepare_data(self.config)

    def _follow_call(self) -> Iterator[Record]:
        """The call's messages, read in the visitor's context (see `__init__`), until the call ends."""
        messages = self.context.run(self.call, self.config, self.origin, self.visible_to, str(self.stop_file))
        while True:
            try:
                kind, payload = self.context.run(next, messages)
            except StopIteration:
                return
            if kind == "refused":
                raise _Refused(payload)
            if kind == "failed":
                raise RuntimeError(payload)
            if kind == "model":
                self.model, self.tokenizer = payload
                self._model_step = self._step
            elif kind == "weights":
                self._weights = payload
            else:
                self._step = int(payload.get("step", self._step))
                if payload.get("kind") in HISTORY_KINDS:
                    self.history.append(payload)
                self.training_words = payload.get("training_words", self.training_words)
                yield payload  # and on after the last record, to the call's end: the GPU is then given back

    def _weights_step(self) -> int:
        return self._weights[0] if self._weights is not None else self._model_step

    def rescue(self, message: str | None = None) -> Record | None:
        """Save the newest weights that came back as the run's checkpoint, stopped at their step, with the records
        up to it: what a call cut short leaves. None where the model never came back. Saved in this process, on the
        CPU (the app's process never touches CUDA)."""
        model = self._current()
        if model is None:
            return None
        step = self._model_step
        message = message or (f"the GPU call ended at step {self._step:,} without saving: the app saved the weights "
                              f"of step {step:,} that came back")
        history = [r for r in self.history if r.get("step", 0) <= step]
        config = replace(self.config, device="cpu")
        return rescue(config, copy.deepcopy(model), self.tokenizer, step, history, message, self.training_words,
                      origin=self.origin, visible_to=self.visible_to)


class _Refused(Exception):
    """The call's run refused its settings or data, before any step: the visitor is told why, as on a CPU."""


def _reason(exc: Exception) -> str:
    """Why a call failed, in the words ZeroGPU gave the visitor (quota spent, no GPU free, the task aborted), else
    the error's."""
    message = getattr(exc, "message", None)  # gradio's Error, which ZeroGPU raises
    title = getattr(exc, "title", None)
    if isinstance(message, str) and message:
        return f"{title}: {message}" if isinstance(title, str) and title and title != "Error" else message
    return f"{type(exc).__name__}: {exc}"
