"""How long a run takes here, said one way on every part of the page, from one pace.

Before a run starts, the Train and Fine-tune tabs say how long the form's run would take at the pace measured on this
machine now (`pace.pace`: one measurement, shared by every page that asks within a minute, whatever its width). Once
a run trains, its own records are its pace (`TrainingJob.pace`): its status line's time left, the line under Start,
the wait a visitor in line is told (`Slot.seconds_ahead`) and the estimate of another run of the same shape all come
from them, so they agree, and nothing is measured beside it (a measurement would slow the run, and time a run that
trains after it, not beside it). Until the run has timed its own steps, the measurement it was started on answers.

Where a run's time is composed: `plan` and `forecast` (before Start), `run_line` and `experiment_line` (while it
trains), `job_status` (its status line); and the words for times (`duration`, `clock`, `seconds`).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bert_demo.app.machine import import_heavy
from bert_demo.app.runs.gpu_call import VISITOR_QUOTA_S, call_seconds, charged_seconds, duration_factor
from bert_demo.app.runs.pace import Pace, Shape, kept, pace
from bert_demo.config import PRESETS, read_config
from bert_demo.training.settings import VAL_BATCH_SIZE, FinetuneConfig, RunConfig

if TYPE_CHECKING:
    from bert_demo.app.runs.job import TrainingJob

# ZeroGPU's daily quota of a visitor, in seconds, by who they are (hub-docs spaces-zerogpu.md)
QUOTAS = (("without a Hugging Face account", VISITOR_QUOTA_S), ("with a free one", 300), ("with PRO", 2400))
PADDED_TO = 8  # a batch's length in tokens is taken as its examples' mean, rounded up to a multiple of this
LENGTH_SAMPLE = 1_000  # training examples tokenized to find that mean
KEPT_PLANS = 16  # plans of runs kept (a run's plan is made once)
PHASES = {  # what a run's preparation is doing, by how its status begins: said beside the status
    "asking ZeroGPU": "waiting for ZeroGPU to lend a GPU: seconds, longer when many visitors train",
    "reading": "reading the text, learning its vocabulary and cutting it into word pieces, on the CPU, so that the "
               "GPU's time goes to training",
    "loading corpus": "reading the text (a named corpus is fetched once, then read from the cache)",
    "preparing the tokenizer": "learning a vocabulary of word pieces from the text: a few seconds, kept for the "
                               "next run on the same corpus",
    "building pre-training examples": "cutting the text into word pieces and sentence pairs to mask: a few seconds",
    "training on": "building the model; the first steps come next",
    "loading the labelled examples": "reading the labelled sentences",
    "starting the classifier": "building the classifier on the encoder",
}
_run_plans: dict[str, "Plan"] = {}  # by the run's folder


@dataclass(frozen=True)
class Plan:
    """What a run's time is made of besides its pace: its shape, its steps, its checks on held-out examples, the
    examples each check scores, and those it scores only at its end."""

    shape: Shape
    steps: int
    checks: int
    per_check: int
    final: int = 0

    def seconds(self, at: Pace) -> float:
        return at.seconds(self.steps, self.checks, self.per_check, self.final)


def checks(steps: int, eval_every: int) -> int:
    """How many times a run of `steps` checks itself on held-out examples: every `eval_every` steps and at the end."""
    return steps // eval_every + (steps % eval_every != 0)


def plan(config: RunConfig, data: Any = None) -> Plan:
    """The plan of a checked run config (`forms.Forms`): a pre-training run's, or a fine-tuning run's, whose
    labelled examples (`data`, read from its task when not given) set its batches' length and its checks."""
    from bert_demo.data import labelled

    steps, count = config.steps, checks(config.steps, config.eval_every)
    if not isinstance(config, FinetuneConfig):
        model = (read_config(Path(config.init_from)) if config.init_from
                 else PRESETS[config.preset].with_vocab(config.vocab_size))
        shape = Shape(model, config.batch_size, config.seq_len, config.precision, str(config.device),
                      mask_prob=config.mask_prob)
        return Plan(shape, steps, count, config.eval_batches * VAL_BATCH_SIZE)
    data = data if data is not None else _labelled(config.task)
    length = min(config.max_seq_len, typical_length(config.model, labelled.first(data["train"],
                                                                                  config.train_examples)))
    shape = Shape(read_config(Path(config.model)), config.batch_size, length, config.precision, str(config.device),
                  classifier=True)
    outside = config.outside_task
    final = len(data["test"]) + (len(labelled.load_task(outside)["test"]) if outside else 0)
    return Plan(shape, steps, count, len(data["validation"]), final)


def _labelled(task: str) -> Any:
    """A fine-tuning run's labelled examples: a named task's, or a file's (the private copy a run trains on)."""
    from bert_demo.data import labelled

    return labelled.load_file(task) if Path(task).suffix.lower() in labelled.FILE_TYPES else labelled.load_task(task)


def typical_length(model: str, train: Any) -> int:
    """A training batch's length in tokens, about: the mean of the first examples' lengths through the model's own
    tokenizer ([CLS], both sentences, the [SEP]s), rounded up as a batch pads."""
    rows = train.select(range(min(LENGTH_SAMPLE, len(train))))
    texts_b = list(rows["text_b"])
    tokenizer = _tokenizer(str(model))
    encoded = tokenizer(list(rows["text"]), texts_b if any(b is not None for b in texts_b) else None,
                        truncation=True, max_length=tokenizer.model_max_length)["input_ids"]
    mean = sum(map(len, encoded)) / max(len(encoded), 1)
    return max(PADDED_TO, math.ceil(mean / PADDED_TO) * PADDED_TO)


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: str) -> Any:
    import_heavy()  # transformers, whole
    from bert_demo.tokenizer import load_tokenizer

    return load_tokenizer(folder)


def run_plan(job: TrainingJob) -> Plan | None:
    """The plan of the run `job` trains, made once per run (a fine-tuning run's reads its labelled examples); None
    where it cannot be made (its model or data are gone)."""
    config = job.trainer.config
    key = str(config.out)
    if key not in _run_plans:
        try:
            made = plan(config)
        except (OSError, ValueError, KeyError):
            return None
        while len(_run_plans) >= KEPT_PLANS:
            _run_plans.pop(next(iter(_run_plans)))
        _run_plans[key] = made
    return _run_plans[key]


def own_pace(job: TrainingJob) -> Pace | None:
    """The pace a training run keeps, from its own records: its steps', and its checks' by the one that ended last
    (until then, the measurement it was started on). Before it has timed two records, that measurement; None if
    neither is known."""
    planned = run_plan(job)
    if planned is None:
        return None
    before, measured = kept(planned.shape), job.pace()
    if measured is None:
        return before
    step_s, check_s, _ = measured
    if check_s:
        example_s = check_s / planned.per_check
    else:  # a forward pass, without the backward and the optimizer: about a third of a step, an example at a time
        example_s = before.example_s if before else step_s / 3 / planned.shape.batch_size
    return Pace(step_s, example_s, 1.0, before.threads if before else 1, time.monotonic(), own=True)


def pace_for(training: TrainingJob | None, shape: Shape) -> Pace:
    """The pace of a run of `shape` here now: that of the run `training` (the slot's job, if any) where it has this
    shape, else measured (`pace.pace`)."""
    return _training_at(training, shape) or pace(shape)


def known_pace(training: TrainingJob | None, shape: Shape) -> Pace | None:
    """The pace of a run of `shape` here, timing nothing: that of the run `training` where it has this shape, else
    the latest measurement of it (`pace.kept`), None where there is none."""
    return _training_at(training, shape) or kept(shape)


def _training_at(job: TrainingJob | None, shape: Shape) -> Pace | None:
    """The pace of the job, where it is training at `shape` (and has timed itself, or was timed before it started)."""
    if job is not None and job.running:
        planned = run_plan(job)
        if planned is not None and planned.shape == shape:
            return own_pace(job)
    return None


def forecast(training: TrainingJob | None, plans: list[Plan]) -> tuple[float, Pace]:
    """How long runs of `plans` would take here now, one after the other, each at its pace (`pace_for`, beside the
    run `training`, the slot's job if any); and the first one's pace."""
    paces = [pace_for(training, planned.shape) for planned in plans]
    return sum(planned.seconds(at) for planned, at in zip(plans, paces)), paces[0]


def estimate_text(what: str, total: float, parts: str, at: Pace, slot_busy: bool, after: str = "") -> str:
    """How long `what` would take here now, in a line: from a pace measured just now, or kept by the run training
    now (`parts`: what the time is made of; `after`: what comes on top, untimed), and whether the machine is
    busy."""
    how = "at the pace the run training now keeps" if at.own else "timed here just now"
    line = f"**{what}: about {duration(total)} on this machine now**: {parts}, {how}{after}."
    if at.busy:
        why = "a run of ours is training" if slot_busy else "other programs are running"
        cores = "the one core" if at.threads == 1 else f"the {at.threads} cores"
        line += (f" The machine is busy ({why}: the timing got {at.share:.0%} of the time of {cores} it ran on): "
                 "on a quiet one this is faster.")
    return f"<small>{line}</small>"


def call_text(what: str, configs: list[RunConfig], parts: str, noun: str) -> str:
    """How much of the visitor's daily ZeroGPU quota `what` asks for, said before Start: each run is one GPU call,
    whose length its settings set (`gpu_call.call_seconds`) and which ZeroGPU counts as that length times its GPU's
    factor (`gpu_call.charged_seconds`); and how many such `noun`s a day each visitor's quota (QUOTAS) holds."""
    longest, charged = max(map(call_seconds, configs)), sum(map(charged_seconds, configs))
    calls = "a GPU call of up to" if len(configs) == 1 else f"{len(configs)} GPU calls of up to"
    each = "" if len(configs) == 1 else " each"
    factor = duration_factor()
    why = f" ({factor:g} × a call's length on its GPU)" if factor != 1 else ""
    a_day = ", ".join(f"{quota // charged} {who} ({quota // 60} min)" for who, quota in QUOTAS)
    return (f"<small>**{what}: {calls} {longest} s{each} on ZeroGPU, counted as {charged} s** of your daily GPU "
            f"time{why}. Such {noun}s a day: {a_day}. {parts}. A run whose time runs out stops and saves.</small>")


def run_line(job: TrainingJob) -> str | None:
    """The line under Start while the visitor's own run trains: its whole time at the pace it keeps, which its
    status line counts down (None until it has timed its steps)."""
    planned, left = run_plan(job), job.seconds_left
    at = own_pace(job)
    if planned is None or left is None or at is None:
        return None
    untimed = " (not timed yet: not counted)" if job.pace()[1] is None else ""  # as its status line says
    return (f"<small>**This run: about {duration(job.seconds_total)} in all** at the pace it keeps: "
            f"{planned.steps:,} steps at {seconds_text(at.step_s)} each and {_checks_text(planned.checks)}"
            f"{untimed}; {clock(left)} left.</small>")


def experiment_line(jobs: list[TrainingJob], runs: int) -> str | None:
    """The Fine-tune tab's line under Start while the visitor's experiment trains: its `runs` in all, those still
    to come each taken to last as long as the one training now (None until that one has timed its steps)."""
    job, left = jobs[-1], jobs[-1].seconds_left
    if left is None:
        return None
    total = experiment_left(job, runs - len(jobs)) + time.perf_counter() - jobs[0].started
    return (f"<small>**The experiment: about {duration(total)} in all** at the pace its runs keep: run "
            f"{len(jobs)} of {runs} at {seconds_text(job.pace()[0])} a step; "
            f"{clock(experiment_left(job, runs - len(jobs)))} left.</small>")


def experiment_left(job: TrainingJob, rest: int) -> float:
    """An experiment's time left: its run training now's, and `rest` runs after it, each as long as that one."""
    return (job.seconds_left or 0.0) + rest * job.seconds_total


def _checks_text(count: int) -> str:
    return f"{count} check{'s' if count > 1 else ''} on held-out sentences"


def job_status(job: TrainingJob) -> str:
    """One line: step, speed, time spent and left; or how the run ended."""
    total, done = job.trainer.config.steps, job.done
    elapsed = time.perf_counter() - job.started
    if done is not None:
        where = (f" Saved as runs/{job.name}: choose “{job.name} (trained here)” in the Model list to look inside it."
                 if done.get("checkpoint") else "")
        message = f" {done['message']}" if done.get("message") else ""
        words = {"finished": f"Finished {done['step']} steps", "stopped": f"Stopped at step {done['step']}",
                 "diverged": f"Diverged at step {done['step']}",
                 "out of memory": f"Out of memory at step {done['step']}", "error": "Training failed"}
        return f"{words.get(done['reason'], done['reason'])} in {clock(elapsed)}.{where}{message}"
    train = [r for r in job.records if r.get("kind") == "train"]
    if not train:
        statuses = [r["message"] for r in job.records if r.get("kind") == "status"]
        status = statuses[-1] if statuses else "starting its process"
        gloss = next((words for start, words in PHASES.items() if status.startswith(start)), "")
        return f"Preparing ({clock(elapsed)}): {status}…" + (f" *({gloss})*" if gloss else "")
    last = train[-1]
    source = getattr(job.trainer.config, "init_from", None)  # a fine-tuning run has none
    prefix = f"Continuing {Path(source).name} · " if source else ""  # domain adaptation, said on every line
    step = max(job.trainer.step, last["step"])  # the step it is on now, not the last one it logged
    line = f"{prefix}Step {step}/{total} · {last['tokens_per_s']:,.0f} tokens/s · {clock(elapsed)} elapsed"
    left, measured = job.seconds_left, job.pace()
    if left is not None:
        line += f" · about {clock(left)} left"
        if measured[1] is None and measured[2]:  # no check has ended yet: its time is not known
            line += f" and {_checks_text(measured[2])}, not timed yet"
    latest = job.records[-1]
    if latest.get("kind") == "status":  # a phase after the steps, such as a fine-tuning run's scoring
        return f"{line} · {latest['message']}…"
    if latest.get("kind") == "check":
        return f"{line} · checking on held-out sentences…"
    return line


def duration(seconds: float) -> str:
    """A training time as people say it: 42 s, 12 min, 16 h 43 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def minutes(seconds: float) -> str:
    """A wait in whole minutes, at least one: 1 min, 18 min."""
    return f"{max(1, round(seconds / 60))} min"


def seconds_text(value: float) -> str:
    """A step's time: 0.17 s, 2.9 s."""
    return f"{value:.2f} s" if value < 1 else f"{value:.1f} s"


def clock(seconds: float) -> str:
    """Minutes and seconds: 15:18."""
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"
