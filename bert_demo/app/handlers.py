"""What the app's events have in common: how a handler's error reaches the visitor, and the timeline choice.

The events themselves live by what they do: `asking` (questions to a model: fill-mask, next sentence, attention,
embeddings), `training` (a run: start, follow, stop, compare) and `choosing` (which model the tabs show). Every
handler takes the `Registry` first and returns (or, for training, yields) a dict from output names to values;
`bert_demo.app.ui` maps the names to its components. Tests call these functions directly. A refused input becomes a
toast with its message and one line in the server log, never a traceback.
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

log = logging.getLogger(__name__)

Outputs = dict[str, Any]
FINAL, NO_COMPARE = "final", "none"  # the timeline choices that mean "the weights as they are now" and "no comparison"


def friendly(fn: Callable) -> Callable:
    """Turn a handler's ValueError into a toast with its message (and one log line); anything else into a toast
    that says something went wrong, with the traceback in the log."""

    def translate(exc: Exception) -> gr.Error:
        if isinstance(exc, ValueError):
            message = str(exc)
            log.warning("%s refused: %s", fn.__name__, message[:200])
            return gr.Error(message[:1].upper() + message[1:], print_exception=False)
        log.exception("unexpected error in %s", fn.__name__)
        return gr.Error(f"Something went wrong ({type(exc).__name__}). Try again, or choose another model.",
                        print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # noqa: BLE001
                raise translate(exc) from None
        return generator

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as exc:  # noqa: BLE001
            raise translate(exc) from None
    return wrapper


def snapshot_step(choice: str | None) -> int | None:
    """A timeline choice ("final", or a step number as text) as the step to load, None for the final weights."""
    if choice in (None, "", FINAL):
        return None
    try:
        return int(choice)
    except (TypeError, ValueError):
        raise ValueError(f"unknown training step {choice!r}: choose “{FINAL}” or one of the run's snapshot steps") \
            from None


def step_name(choice: str) -> str:
    step = snapshot_step(choice)
    return "Final weights" if step is None else f"Step {step:,}" + (" (the random start)" if step == 0 else "")


def timeline_choices(steps: list[int]) -> list[tuple[str, str]]:
    """The timeline dropdown's (label, value) pairs: the final weights first, then every snapshot."""
    return [("final weights", FINAL)] + [(step_name(str(step)).lower(), str(step)) for step in steps]
