"""How long a run would take on this machine now, measured before it starts.

A few optimizer steps of the run's model, at its batch size and sequence length, in its precision, are timed in a
process of the kind a run trains in (run_process.py: forked from the runs' fork server, a thread per core), under
whatever else the machine is doing, with a few forward passes in fp32 for the checks on held-out examples (a run scores
them in fp32 whatever it trains in); the median step is the pace, so that a burst of other work that slows one step does
not set it. How much of its threads' time the measurement got says whether the machine is busy (other programs, or a run
of ours); on a busy machine the steps are timed on one thread too, and the faster kept, as a run chooses its threads
(`run_process.Threads`). A run's steps take what the measurement's took, plus a few percent for its batches and records.

A measurement answers for the same `Shape` for `KEEP_S` seconds, and one is taken at a time: visitors who open the
Train tab together share one. `estimates.py` says when a run's own pace answers instead.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

from bert_demo.app.runs.run_process import BUSY_SHARE
from bert_demo.config import BertConfig
from bert_demo.data.masking import MASK_PROB

MEASURED_STEPS = 5  # timed optimizer steps at most, after one that warms up, their median kept (a burst of other
MEASURING_S = 3.0  # work slows one step, not the pace), and no more once this much time has gone into them
FORWARD_REPEATS = 3  # forward passes for the checks' pace, their median kept (one alone: 7.7, then 1.6 ms an example)
KEEP_S = 60.0  # how long a measurement answers for the same shape
CHILD_WAIT_S = 120.0  # longest the measurement's process may take (on a very busy machine, seconds a step)
_kept: dict["Shape", "Pace"] = {}
_measuring = threading.Lock()


@dataclass(frozen=True)
class Shape:
    """What a run's pace depends on: its model's shape, its batches, its precision and device, and whether it
    trains a classifier (fine-tuning) or pre-trains."""

    model: BertConfig
    batch_size: int
    seq_len: int
    precision: str
    device: str = "cpu"
    classifier: bool = False
    mask_prob: float = MASK_PROB  # the share of positions a pre-training run scores (the MLM head's work)


@dataclass(frozen=True)
class Pace:
    """What a run of one shape takes here now: measured before it starts, or a run's own (`own`)."""

    step_s: float  # an optimizer step
    example_s: float  # one example of a check on held-out examples
    share: float  # of its threads' time the measurement got: 1.0 where nothing else wanted the cores
    threads: int  # the threads it ran on (one per core)
    measured: float  # time.monotonic() of the measurement
    own: bool = False  # the pace of a run training now, from its own records

    @property
    def busy(self) -> bool:
        return self.share < BUSY_SHARE

    def seconds(self, steps: int, checks: int, examples_per_check: int, final_examples: int = 0) -> float:
        """A run's time at this pace: its steps, its checks on held-out examples, and the examples it scores only at
        its end (its preparation aside)."""
        return steps * self.step_s + (checks * examples_per_check + final_examples) * self.example_s


def pace(shape: Shape) -> Pace:
    """The pace of a run of `shape`: measured now, or within the last `KEEP_S` seconds."""
    with _measuring:
        kept = _kept.get(shape)
        if kept is None or time.monotonic() - kept.measured > KEEP_S:
            kept = _kept[shape] = _measure(shape)
        return kept


def kept(shape: Shape) -> Pace | None:
    """The latest measurement of `shape`, however old (None if there is none): what a run of that shape was timed
    at before it started, until it has timed itself."""
    return _kept.get(shape)


def _measure(shape: Shape) -> Pace:
    """A few optimizer steps of `shape` timed, with the share of its threads' time they got, and a few forward passes
    in fp32 for the checks. On a CPU in a process of its own, as a run trains (`run_process`): its threads set as a
    run sets them, and the app's memory untouched by the model it builds (one estimate at the largest shape had
    taken the app from 1.0 to 2.3 GB)."""
    if shape.device != "cpu":  # a GPU run trains in a thread of the app's process
        return _measure_here(shape)
    from bert_demo.app.runs.run_process import context

    receive, send = context().Pipe(duplex=False)
    child = context().Process(target=_measure_in_child, args=(shape, send), name="pace", daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(CHILD_WAIT_S):
            raise ValueError("timing this run's steps took too long: the machine is very busy, try again shortly")
        step_s, example_s, share, threads = receive.recv()
    except EOFError:
        raise ValueError("timing this run's steps failed: try again shortly") from None
    finally:
        child.join(timeout=1.0)
        if child.is_alive():
            child.kill()
        receive.close()
    return Pace(step_s, example_s, share, threads, time.monotonic())


def _measure_in_child(shape: Shape, send: Any) -> None:
    """The measurement in a run's kind of process, its threads a run's."""
    import torch

    from bert_demo import model
    from bert_demo.training import runtime

    runtime.set_cpu_threads()
    measured = _measure_with(shape, torch, model, runtime)
    send.send((measured.step_s, measured.example_s, measured.share, measured.threads))
    send.close()


def _measure_here(shape: Shape) -> Pace:
    """The measurement in this process (a GPU's, or a test's)."""
    import torch

    from bert_demo import model
    from bert_demo.training import runtime

    return _measure_with(shape, torch, model, runtime)


def _measure_with(shape: Shape, torch: Any, model_module: Any, runtime: Any) -> Pace:
    """The measurement itself, with the modules it uses."""
    where, batch_size, seq_len = torch.device(shape.device), shape.batch_size, shape.seq_len
    computes = runtime.resolve_precision(shape.precision, where)
    generator = torch.Generator().manual_seed(0)
    if shape.classifier:
        model = model_module.BertForSequenceClassification(replace(shape.model, labels=("no", "yes")))
    else:
        model = model_module.BertForPreTraining(shape.model)
    model.to(where).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, shape.model.vocab_size, (batch_size, seq_len), generator=generator).to(where)
    segments = (torch.arange(seq_len) >= seq_len // 2).long().expand(batch_size, -1).to(where)
    labels = _labels(torch, ids, generator, shape)

    def step() -> None:
        with runtime.autocast(where, computes):
            out = model(ids, segments, None, **labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the first allocates what the others reuse
    _synchronise(torch, where)
    started, cpu = time.perf_counter(), time.process_time()
    steps = _steps(torch, where, step)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    threads = torch.get_num_threads() if where.type == "cpu" else 1
    share = 1.0 if where.type != "cpu" else min(1.0, cpu / (wall * threads))
    cores = threads
    try:
        if share < BUSY_SHARE and threads > 1:  # as a run would (run_process.Threads): one thread, if faster now
            torch.set_num_threads(1)
            alone = _steps(torch, where, step)
            steps, threads = (alone, 1) if median(alone) < median(steps) else (steps, threads)
            torch.set_num_threads(threads)
        model.eval()
        with torch.no_grad():  # in fp32, as the runs' checks score (evaluate.validate, finetune._scores)
            example_s = median(_timed(torch, where, lambda: model(ids, segments, None))
                               for _ in range(FORWARD_REPEATS)) / batch_size
    finally:
        if where.type == "cpu":
            torch.set_num_threads(cores)
    return Pace(median(steps), example_s, share, threads, time.monotonic())


def _steps(torch: Any, where: Any, step: Callable[[], None]) -> list[float]:
    """Up to MEASURED_STEPS steps timed, or fewer once MEASURING_S have gone into them."""
    started, steps = time.perf_counter(), []
    while len(steps) < MEASURED_STEPS and (not steps or time.perf_counter() - started < MEASURING_S):
        steps.append(_timed(torch, where, step))
    return steps


def _labels(torch: Any, ids: Any, generator: Any, shape: Shape) -> dict[str, Any]:
    """A classifier's labels, or masked-LM labels at the run's share of the positions and next-sentence labels."""
    if shape.classifier:
        return {"labels": torch.randint(0, 2, (ids.shape[0],), generator=generator).to(ids.device)}
    masked = (torch.rand(ids.shape, generator=generator) < shape.mask_prob).to(ids.device)
    return {"mlm_labels": torch.where(masked, ids, torch.full_like(ids, -100)),
            "nsp_labels": torch.randint(0, 2, (ids.shape[0],), generator=generator).to(ids.device)}


def _timed(torch: Any, device: Any, work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    _synchronise(torch, device)
    return time.perf_counter() - started


def _synchronise(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
