"""bert_demo/app/runs/run_process.py: a run in a child process streams the run's records, shares its weights live,
stops when asked, and reports a refusal, a crash or its own death instead of hanging its readers."""
from __future__ import annotations

import copy
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from bert_demo.app.runs import run_process
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.run_process import ProcessTrainer, question_asked
from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.config import WEIGHTS_NAME
from bert_demo.training import recipe
from bert_demo.training.loop import Control
from bert_demo.training.pretraining import pretraining
from bert_demo.training.settings import TrainConfig


def config(tmp_path, corpus: str, steps: int = 40) -> TrainConfig:
    return TrainConfig(preset="tiny", corpus=corpus, steps=steps, batch_size=4, seq_len=32, vocab_size=512,
                       log_every=5, eval_every=20, save_every=10**9, out=str(tmp_path / "run"))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def wait_until(condition, seconds: float) -> bool:
    """Whether `condition()` came true within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def shared(value=0):
    """A stand-in for a multiprocessing.Value, for the child's function run in this process."""
    return SimpleNamespace(value=value)


def test_a_child_run_streams_the_records_and_saves_the_weights_the_parent_sees_live(write_corpus, tmp_path):
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt"))))
    records, live = [], []
    for record in trainer.run():
        records.append(record)
        if record["kind"] == "train":
            live.append(weights(trainer.snapshot()))
    assert records[-1]["kind"] == "done" and records[-1]["reason"] == "finished"
    assert [r["step"] for r in trainer.history if r["kind"] == "val"] == [20, 40]
    assert len(live) >= 2 and any(not torch.equal(live[0][k], live[-1][k]) for k in live[0])  # the weights moved
    saved, _ = load_pretrained(records[-1]["checkpoint"])
    final = weights(trainer.snapshot())
    assert all(torch.equal(final[name], tensor) for name, tensor in saved.state_dict().items())
    assert trainer.step == 40 and trainer.tokenizer is not None and not trainer.process.is_alive()


def test_stop_ends_the_child_run_after_a_step_with_a_saved_checkpoint(write_corpus, tmp_path):
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=2000))
    asked_at = None
    for record in trainer.run():
        if record["kind"] == "train" and asked_at is None:
            question_asked()  # the child then trains on one core; it must still stop and save
            trainer.stop()
            asked_at = record["step"]
    assert record["kind"] == "done" and record["reason"] == "stopped" and asked_at <= record["step"] < asked_at + 100
    assert read_metadata(record["checkpoint"])["step"] == record["step"]  # saved as it stopped
    assert load_pretrained(record["checkpoint"])[0] is not None


def test_the_child_stops_and_saves_when_the_app_dies(write_corpus, tmp_path):
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=2000))
    closed_at = None
    for record in trainer.run():
        if record["kind"] == "train" and closed_at is None:
            trainer._app_alive.close()  # what the kernel does to a killed app's end of the pipe
            closed_at = record["step"]
    assert record["kind"] == "done" and record["reason"] == "stopped" and record["step"] < closed_at + 100
    assert load_pretrained(record["checkpoint"])[0] is not None


def test_a_run_of_one_step_hands_its_weights_over_before_the_child_ends(write_corpus, tmp_path, monkeypatch):
    read, late_once = run_process._messages, []

    def late(records, until=None):  # the app reads only after the child has finished (a busy app)
        if not late_once:
            late_once.append(True)
            assert wait_until(lambda: (tmp_path / "run" / WEIGHTS_NAME).is_file(), 60)  # saved: done is sent
            wait_until(lambda: not trainer.process.is_alive(), 2)  # a child that did not wait would be gone
        yield from read(records, until)

    monkeypatch.setattr(run_process, "_messages", late)
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=1))
    records = list(trainer.run())
    assert records[-1]["reason"] == "finished" and trainer.snapshot() is not None


def test_a_snapshot_is_never_a_copy_that_a_weight_change_overlapped(write_corpus, tmp_path, monkeypatch):
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=1))
    list(trainer.run())
    copies, deepcopy = [], copy.deepcopy

    def overlapped_once(model):  # a whole optimizer step happens while the first copy is taken
        if not copies:
            trainer._writes.value += 2
        copies.append(model)
        return deepcopy(model)

    monkeypatch.setattr(run_process.copy, "deepcopy", overlapped_once)
    assert trainer.snapshot() is not None and len(copies) == 2  # the first copy was thrown away
    monkeypatch.setattr(run_process, "SNAPSHOT_WAIT_S", 0.2)
    trainer._writes.value += 1  # the child is changing the weights now, and never finishes
    with pytest.raises(ValueError, match="busy"):
        trainer.snapshot()


def test_a_refusal_in_the_child_reaches_the_parent_as_a_value_error(tmp_path):
    trainer = ProcessTrainer(config(tmp_path, str(tmp_path / "gone.txt")))
    with pytest.raises(ValueError, match="no such file"):
        list(trainer.run())


def test_a_killed_child_ends_the_job_with_an_error_record_instead_of_hanging(write_corpus, tmp_path):
    job = TrainingJob(ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=2000)),
                      "run")
    job.start()
    deadline = time.monotonic() + 60
    while (job.trainer.step < 1 or job.trainer.model is None) and time.monotonic() < deadline:
        time.sleep(0.1)  # the shared weights arrive with a record, a little after the first step on a busy machine
    os.kill(job.trainer.process.pid, signal.SIGSTOP)
    job.trainer._writes.value |= 1  # as if killed in the middle of an optimizer step
    os.kill(job.trainer.process.pid, signal.SIGKILL)
    job.thread.join(timeout=30)
    assert not job.running and job.done["reason"] == "error" and "without saving" in job.done["message"]
    assert job.trainer.snapshot() is not None  # not "busy" for ever: the dead child's write is over


def test_weights_that_cannot_be_shared_leave_the_run_training_without_live_questions(write_corpus, tmp_path,
                                                                                     monkeypatch):
    def no_room(tensor):
        raise RuntimeError("unable to write to file </torch_1_2>: No space left on device")

    monkeypatch.setattr(torch.Tensor, "share_memory_", no_room)
    monkeypatch.setattr(run_process, "_relay", lambda *args: None)  # no parent here to pass stop requests on
    monkeypatch.setattr(run_process.signal, "signal", lambda *args: None)  # this process keeps its Ctrl-C
    sent = []
    sender = SimpleNamespace(send=sent.append, close=lambda: None)
    run_process._train(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=10), "app", None, sender,
                       shared(), shared(), shared(), shared(), shared(0.0), SimpleNamespace(poll=lambda: False))
    assert [kind for kind, _ in sent] == ["record"] * len(sent)  # never a model: the run is not listed as live
    assert sent[-1][1]["reason"] == "finished" and sent[-1][1]["step"] == 10  # it trained to the end all the same


def test_the_child_counts_each_change_of_its_weights_in_the_seqlock(write_corpus, tmp_path):
    trainer = ProcessTrainer(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=3))
    assert list(trainer.run())[-1]["reason"] == "finished"
    assert trainer._writes.value >= 2 * 3 and trainer._writes.value % 2 == 0  # opened and closed for each step


def test_the_weights_change_only_while_the_seqlock_count_is_odd(write_corpus, tmp_path, monkeypatch):
    real, counts = recipe.make_optimizer, []
    writes, step = shared(), shared()

    def make_optimizer(model, cfg):
        optimizer = real(model, cfg)
        optimizer.register_step_pre_hook(lambda *args: counts.append(writes.value))
        optimizer.register_step_post_hook(lambda *args: counts.append(writes.value))
        return optimizer

    monkeypatch.setattr(recipe, "make_optimizer", make_optimizer)
    control = Control()
    control.lock = run_process._Writing(writes, control, step)  # what the child gives its run
    list(pretraining(config(tmp_path, str(write_corpus(tmp_path / "corpus.txt")), steps=3), control=control).run())
    assert len(counts) == 6 and all(count % 2 == 1 for count in counts)
    assert writes.value % 2 == 0 and step.value == 3


class StepClock:
    """A clock that a fake run advances by its step's time on the thread count it trains on now."""

    def __init__(self, seconds_on: dict[int, float]):
        self.now, self.seconds_on, self.threads = 0.0, seconds_on, 2

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.seconds_on[self.threads]


def steps_on(chooser: run_process.Threads, clock: StepClock, steps: int) -> list[int]:
    """The thread count of each of `steps` steps, the chooser called after each as the trainer calls it."""
    counts = []
    for _ in range(steps):
        clock.step()
        counts.append(clock.threads)
        chooser()
    return counts


def chooser_on(clock: StepClock, first: int = 2) -> run_process.Threads:
    """A Threads choosing among one and two threads for a fake run on `clock`, started on `first`."""
    clock.threads = first
    return run_process.Threads(SimpleNamespace(value=-1e9), lambda n: setattr(clock, "threads", n), 2, first,
                               clock=clock)


def test_a_run_trains_on_the_thread_count_that_is_faster_now_and_tries_the_other_again_later():
    clock = StepClock({2: 0.9, 1: 0.05})  # another program keeps a core busy: two threads wait on each other
    chooser = chooser_on(clock)
    counts = steps_on(chooser, clock, 40)  # 20 s of two-thread steps, then a trial of one thread, kept
    assert counts[:23] == [2] * 23 and set(counts[30:]) == {1}
    clock.seconds_on = {2: 0.02, 1: 0.05}  # the other program ended: two threads are faster again
    counts = steps_on(chooser, clock, 4000)
    found = counts.index(2)
    assert found <= run_process.Threads.MAX_WAIT_S / 0.05 + 3  # at a later trial
    assert counts[-1] == 2 and counts[found:].count(1) <= 12  # one thread then only tried again, a step at a time
    question = SimpleNamespace(value=clock.now + 1)  # a visitor's question: one thread, whatever is faster
    chooser.last_question = question
    assert steps_on(chooser, clock, 3)[1:] == [1, 1]


def test_a_losing_trial_ends_after_one_slow_step_and_the_next_comes_twice_as_late():
    clock = StepClock({2: 0.9, 1: 0.05})  # a loaded machine, the run started on one thread
    chooser = chooser_on(clock, first=1)
    counts, starts = [], []
    for _ in range(12_000):  # 600 s on one thread
        clock.step()
        counts.append(clock.threads)
        if clock.threads == 2 and (len(counts) < 2 or counts[-2] == 1):
            starts.append(round(clock.now))
        chooser()
    assert counts.count(2) == len(starts) >= 4  # each trial of two threads lost after its first step
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert gaps[:3] == [pytest.approx(40, abs=2), pytest.approx(80, abs=2), pytest.approx(160, abs=2)]
    assert max(gaps) <= run_process.Threads.MAX_WAIT_S + 2


def test_a_run_starts_on_one_thread_where_its_cores_are_not_all_its_own(monkeypatch):
    shares = {2: 0.52}  # as measured beside a second heavy process
    monkeypatch.setattr(run_process, "cpu_share", lambda torch_, threads: shares[threads])
    assert run_process.first_threads(torch, 2) == 1
    shares[2] = 0.97  # a quiet machine
    assert run_process.first_threads(torch, 2) == 2


class SharedCores:
    """A fake torch whose matrix product takes 10 ms of wall time, in which its threads get `share` of the cores
    they were given; its clocks (`wall`, `cpu`) stand in for time.perf_counter and time.process_time."""

    def __init__(self, share: float):
        self.share, self.threads, self.wall, self.cpu = share, 1, 0.0, 0.0

    def set_num_threads(self, threads: int) -> None:
        self.threads = threads

    def ones(self, *shape: int) -> "SharedCores":
        return self

    def __matmul__(self, other: "SharedCores") -> "SharedCores":
        self.wall += 0.01
        self.cpu += 0.01 * self.threads * self.share
        return self


def test_a_moment_of_work_measures_the_share_of_its_threads_time_it_got():
    cores = SharedCores(share=0.5)  # two threads, one of whose cores another program keeps busy
    clocks = {"wall": lambda: cores.wall, "cpu": lambda: cores.cpu}
    assert run_process.cpu_share(cores, 2, **clocks) == pytest.approx(0.5)
    cores.share = 1.0
    assert run_process.cpu_share(cores, 2, **clocks) == pytest.approx(1.0)
