"""A run the app follows: its records as they come, its time left, a stop, and a live copy of its weights.

`TrainingJob` follows a run (a `loop.Run` in a thread, or `run_process.ProcessTrainer` with the run in a child
process) in a daemon thread of its own, and keeps every record for the pages that show it, their messages naming a
visitor's text by its name, not its private copy's path (`uploads.shown`). Whatever happens to the run, the job ends
with a "done" record: the run's own, one saved from the weights a killed child shared, or an error.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bert_demo.app.runs.disk import remove_if_empty
from bert_demo.app.uploads import remove_uploads, shown
from bert_demo.training.records import DoneRecord, Record

log = logging.getLogger(__name__)


@dataclass
class TrainingJob:
    """A run followed in a daemon thread; its records are appended to `records` for readers to follow."""

    trainer: Any
    name: str
    owner: str | None = None
    records: list[Record] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        self._changed = threading.Condition()
        self.thread = threading.Thread(target=self._run, name=f"train-{self.name}", daemon=True)
        self._live: tuple[int, Any, Any] | None = None  # the step, its eval copy of the weights, the tokenizer
        self._arrived: list[float] = []  # when each record arrived here (time.perf_counter)

    def start(self) -> None:
        atexit.register(self.shutdown)  # on exit (Ctrl-C included), stop the run and let it save
        self.thread.start()

    def _run(self) -> None:
        try:
            for record in self.trainer.run():
                self._append(record)
        except ValueError as exc:  # bad data or settings: a message for the visitor
            self._append(self._failed(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a run must always end with a record, never hang its readers
            log.exception("training run %s failed", self.name)
            self._append(self._failed(f"the run failed ({type(exc).__name__}: {exc})"))
        finally:
            if not self.records or self.records[-1].get("kind") != "done":
                self._append(self._rescued() or self._failed("the run ended without saving"))
            remove_uploads(self.trainer.config)
            remove_if_empty(self.trainer.config.out)  # a run that saved nothing leaves no folder behind
            self._release()
            atexit.unregister(self.shutdown)  # and let the finished job, with its model, be freed

    def _release(self) -> None:
        """Let go of what the ended run holds: its live copy answers nothing more, and on a GPU its model leaves the
        card's memory to the next run (visitors load the saved checkpoint now)."""
        import torch

        self._live = None
        if str(self.trainer.config.device).startswith("cuda"):
            self.trainer.model = None
            torch.cuda.empty_cache()

    def _rescued(self) -> DoneRecord | None:
        """What a run whose process died left: its weights saved from the app's shared copy where they are whole."""
        rescue = getattr(self.trainer, "rescue", None)  # a run in a thread of this process cannot die alone
        if rescue is None:
            return None
        try:
            return rescue()
        except (OSError, ValueError) as exc:
            log.warning("could not save what run %s left: %s", self.name, exc)
            return None

    def _failed(self, message: str) -> DoneRecord:
        return {"kind": "done", "reason": "error", "step": self.trainer.step, "message": message, "checkpoint": None}

    def _append(self, record: Record) -> None:
        if isinstance(record.get("message"), str):  # a phase of the preparation, or how the run ended
            record = {**record, "message": shown(record["message"])}
        with self._changed:
            self.records.append(record)
            self._arrived.append(time.perf_counter())
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    @property
    def done(self) -> DoneRecord | None:
        """The final record once the run has ended."""
        return self.records[-1] if self.records and self.records[-1].get("kind") == "done" else None

    @property
    def seconds_total(self) -> float:
        """How long the whole run takes at its measured pace (0 before it knows): what the line's estimates count
        for each run still to come."""
        left = self.seconds_left
        return 0.0 if left is None else left + time.perf_counter() - self.started

    @property
    def seconds_left(self) -> float | None:
        """Time left, measured (`pace`), counted down from the latest record's arrival so that the clock moves while
        the run checks itself on held-out examples too (None before two training records: a guess from the settings
        alone would be wrong by an order of magnitude between a CPU and a GPU)."""
        pace = self.pace()
        if pace is None:
            return None
        step_s, check_s, checks = pace
        left = step_s * (self.trainer.config.steps - self._last_step()) + (check_s or 0.0) * checks
        return max(1.0, left - (time.perf_counter() - self._arrived[-1]))

    def pace(self) -> tuple[float, float | None, int] | None:
        """(seconds a step, seconds a check on held-out examples or None until one has ended, checks to come, the
        one under way included), measured between the first and latest training records; the checks between them
        are counted apart, so that neither a check's minute nor the steps' pace hides the other. None before two
        training records."""
        train = [r for r in self.records if r.get("kind") == "train"]
        if len(train) < 2 or train[-1]["step"] <= train[0]["step"]:
            return None
        checks = self._checks()
        inside = sum(end - start for start, end in checks if train[0]["elapsed"] <= start < train[-1]["elapsed"])
        step_s = max(0.0, train[-1]["elapsed"] - train[0]["elapsed"] - inside) / (train[-1]["step"] - train[0]["step"])
        config, step = self.trainer.config, self._last_step()
        to_come = (config.steps // config.eval_every - step // config.eval_every  # every eval_every steps,
                   + (config.steps % config.eval_every != 0 and step < config.steps)  # at the last step,
                   + (self.records[-1].get("kind") == "check"))  # and the one under way
        return step_s, (checks[-1][1] - checks[-1][0]) if checks else None, to_come

    def _checks(self) -> list[tuple[float, float]]:
        """(start, end) of each check on held-out examples that has ended, in the run's own seconds."""
        checks, start = [], None
        for record in self.records:
            if record.get("kind") == "check":
                start = record["elapsed"]
            elif record.get("kind") == "val" and start is not None:
                checks.append((start, record["elapsed"]))
                start = None
        return checks

    def _last_step(self) -> int:
        return max((r["step"] for r in self.records if r.get("kind") in ("train", "check")), default=0)

    def stop(self) -> None:
        self.trainer.stop()

    def shutdown(self, timeout: float = 90.0) -> None:
        """Stop the run and wait for it to save, so the process never exits under a running thread."""
        if self.running:
            self.stop()
            self.thread.join(timeout=timeout)

    def wait(self, seen: int, timeout: float) -> list[Record]:
        """Records after the first `seen`, waiting up to `timeout` seconds for at least one."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.records) > seen or not self.running, timeout=timeout)
            return self.records[seen:]

    def live_weights(self, max_age_steps: int = 0) -> tuple[Any, Any, int]:
        """An eval copy of the weights as they are now (taken between optimizer steps), reused until the next step,
        the run's tokenizer, and the step the copy was taken at."""
        step = self.trainer.step
        if self._live is None or step - self._live[0] > max_age_steps:
            model = self.trainer.snapshot()
            if model is None:
                raise ValueError("the run has not built its model yet: try again in a few seconds")
            self._live = (step, model, self.trainer.tokenizer)
        return self._live[1], self._live[2], self._live[0]
