"""bert_demo/app/runs/slot.py: the training slot starts the runs of the tickets in its line, whatever their pages do; a
run outlives its page for a while, an experiment keeps its turn, every waiting visitor has a number of their own, the
line says how long the runs ahead have left, takes no run that would wait more than about 15 minutes, and puts a
network's second run behind every other network's first."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bert_demo.app.visitors import Visitor
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.slot import LINE_S, Slot, Ticket
from bert_demo.app.runs.disk import Disk
from bert_demo.app.tabs.train_views import busy_text, waiting_text
from bert_demo.training.settings import FinetuneConfig, TrainConfig


class Counting:
    """A run that counts its steps, 20 ms each, until it has done `config.steps` or is stopped."""

    def __init__(self, config):
        self.config, self.step, self.model, self.tokenizer, self.visible_to = config, 0, None, None, None
        self.stopping = False

    def run(self):
        while not self.stopping and self.step < self.config.steps:
            time.sleep(0.02)
            self.step += 1
            yield {"kind": "train", "step": self.step, "elapsed": 0.02 * self.step}
        yield {"kind": "done", "reason": "stopped" if self.stopping else "finished", "step": self.step,
               "checkpoint": None, "message": None}

    def stop(self) -> None:
        self.stopping = True


@pytest.fixture
def slot(tmp_path, monkeypatch) -> Slot:
    """A slot whose runs count (no model, no process), each in its own folder under tmp_path; they train until
    stopped, so the line takes them whatever their time (a test of the line's bound sets its own)."""
    slot = Slot(Disk(tmp_path / "runs"))
    slot.max_wait_s = float("inf")

    def start(config, owner=None, share=False, context=None):
        slot.job = TrainingJob(Counting(config), Path(config.out).name, owner=owner)
        slot.job.start()
        return slot.job

    monkeypatch.setattr(slot, "start", start)
    monkeypatch.setattr(slot.disk, "check", lambda *args: None)  # test_disk.py checks the disk's budget
    yield slot
    for ticket in list(slot.line):
        deadline = time.monotonic() + 10
        while not ticket.ended.is_set() and time.monotonic() < deadline:
            slot.stop(ticket.owner)  # again while it has not ended: a stop asked as its run starts is lost
            ticket.ended.wait(timeout=0.05)


def run(tmp_path: Path, steps: int = 10**6) -> TrainConfig:
    return TrainConfig(corpus="wiki", steps=steps, out=str(tmp_path / f"run-{time.perf_counter_ns()}"))


def follow(ticket: Ticket, seconds: float) -> None:
    """A page following the ticket for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ticket.followed()
        time.sleep(0.05)


def test_a_run_trains_on_while_no_page_follows_it_and_is_stopped_once_none_has_for_abandon_s(slot, tmp_path):
    slot.abandon_s = 1.0
    ticket = slot.join({"run": run(tmp_path)}, "me")
    job = ticket.wait_for_run(1, timeout=5)
    assert job is not None and slot.ticket_of("me") is ticket and slot.ticket_of("you") is None
    time.sleep(0.6)  # the page reloads: nobody follows for a moment
    follow(ticket, 1.5)  # then the reopened page follows it on
    assert job.running and not job.trainer.stopping
    assert ticket.ended.wait(timeout=10)  # then nobody, for good
    assert job.done["reason"] == "stopped" and slot.ticket_of("me") is None


def test_a_stop_pressed_as_the_run_starts_still_stops_it(slot, tmp_path):
    ticket = slot.join({"run": run(tmp_path)}, "me")
    job = ticket.wait_for_run(1, timeout=5)
    ticket.cancelled = True  # what Slot.stop leaves where the run's thread had not started yet: no job to stop
    assert ticket.ended.wait(timeout=10) and job.done["reason"] == "stopped"


def test_a_waiting_ticket_keeps_its_place_while_followed_and_gives_it_up_when_abandoned(slot, tmp_path):
    slot.abandon_s = 1.0
    ahead = slot.join({"run": run(tmp_path)}, "ahead")
    ahead.wait_for_run(1, timeout=5)
    waiting = slot.join({"run": run(tmp_path)}, "me")
    threading.Thread(target=follow, args=(ahead, 4.0), daemon=True).start()
    follow(waiting, 2.0)
    assert slot.ticket_of("me") is waiting and not waiting.jobs
    assert waiting.ended.wait(timeout=5) and not waiting.jobs and ahead.job.running


def test_an_experiments_runs_train_one_after_the_other_and_nobody_comes_between(slot, tmp_path):
    mine = slot.join({"pretrained": run(tmp_path, 30), "random": run(tmp_path, 30)}, "me")
    mine.wait_for_run(1, timeout=5)
    theirs = slot.join({"run": run(tmp_path, 30)}, "them")  # joins while the experiment's first run trains
    assert theirs.ended.wait(timeout=20) and mine.ended.wait(timeout=1)
    first, second, other = mine.jobs[0], mine.jobs[1], theirs.jobs[0]
    assert [job.done["reason"] for job in (first, second, other)] == ["finished"] * 3
    assert first.started < second.started < other.started


def test_an_experiment_ends_with_a_run_that_did_not_finish(slot, tmp_path):
    mine = slot.join({"pretrained": run(tmp_path), "random": run(tmp_path)}, "me")
    mine.wait_for_run(1, timeout=5)
    assert slot.stop("me")
    assert mine.ended.wait(timeout=5) and len(mine.jobs) == 1 and mine.jobs[0].done["reason"] == "stopped"


def test_every_waiting_visitor_has_a_number_of_their_own_and_moves_up_when_one_leaves(slot, tmp_path):
    front = slot.join({"pretrained": run(tmp_path), "random": run(tmp_path)}, "front")  # an experiment, whose
    front.wait_for_run(1, timeout=5)  # place is kept for its second run: counted once (issue 50: two "number 2"s)
    tickets = {owner: slot.join({"run": run(tmp_path)}, owner) for owner in ("b", "c", "d")}
    said = {owner: slot.place(ticket) for owner, ticket in tickets.items()}
    assert said["b"].number == 1 and said["b"].after_run
    assert said["c"].number == 2 and said["d"].number == 3
    assert slot.stop("b") and tickets["b"].ended.wait(timeout=5)
    assert slot.place(tickets["c"]).number == 1 and slot.place(tickets["d"]).number == 2


def test_a_visitor_has_one_ticket_and_only_they_can_stop_it(slot, tmp_path):
    ticket = slot.join({"run": run(tmp_path)}, "me")
    job = ticket.wait_for_run(1, timeout=5)
    with pytest.raises(ValueError, match="already have a run"):
        slot.join({"run": run(tmp_path)}, "me")
    assert not slot.stop("someone else") and not slot.stop(None)
    assert job.running and slot.stop("me")
    assert ticket.ended.wait(timeout=5) and job.done["reason"] == "stopped"


def test_another_visitor_hears_that_someone_elses_run_has_the_slot_but_not_whose(slot, tmp_path):
    assert slot.busy("you") is None  # a free slot
    experiment = {"pretrained": FinetuneConfig(model="m", steps=10**6, out=str(tmp_path / "ft-1")),
                  "random": FinetuneConfig(model="m", init="random", steps=10**6, out=str(tmp_path / "ft-2"))}
    ticket = slot.join(experiment, "visitor-7f3a")
    job = ticket.wait_for_run(1, timeout=5)
    while len(job.records) < 2:  # its pace is measured
        time.sleep(0.01)
    slot.join({"run": run(tmp_path)}, "them")
    busy = slot.busy("you")
    assert busy.fine_tuning and busy.of_experiment == (1, 2) and busy.steps == 1_000_000 and busy.waiting == 1
    assert busy.seconds_ahead is not None  # the run's own pace
    told = busy_text(busy)
    assert told.startswith("**Busy:** someone else's fine-tuning run (1 of the 2 of an experiment) has the "
                           "training slot now (step ")
    assert "of 1,000,000), and 1 more visitor waits in line. A run you start now waits about " in told
    assert "7f3a" not in repr(busy)  # never whose
    assert slot.busy("visitor-7f3a") is None  # their own


def test_the_waiting_line_states_the_time_left_of_every_run_ahead_at_the_pace_the_run_in_progress_measured(slot,
                                                                                                       tmp_path):
    release = threading.Event()

    class Slow(Counting):
        def run(self):
            yield {"kind": "train", "step": 10, "elapsed": 20.0}
            yield {"kind": "train", "step": 20, "elapsed": 80.0}  # 6 s a step, 180 steps to go: 18 minutes
            release.wait(timeout=30)
            yield {"kind": "done", "reason": "stopped", "step": 20, "checkpoint": None, "message": None}

    job = slot.job = TrainingJob(Slow(run(tmp_path, 200)), "slow")
    assert not slot.seconds_ahead()  # not started: no time said
    job.start()
    while len(job.records) < 2:
        time.sleep(0.01)
    assert round(slot.seconds_ahead() / 60) == 18
    # an experiment of two runs waits ahead: each taken to last as long as the run training now
    mine = Ticket("me", {"run": run(tmp_path)})
    slot.line += [Ticket("someone", {"a": run(tmp_path), "b": run(tmp_path)}), mine]
    assert waiting_text(slot.place(mine), "") == ("Waiting for the training slot: you are number 2 in line, after "
                                                       "the run training now. The runs ahead of yours have about 54 "
                                                       "min left.")
    slot.line.clear()
    release.set()
    job.thread.join(timeout=10)


def test_the_line_takes_a_run_only_where_the_runs_ahead_would_start_it_within_about_15_minutes(slot, tmp_path):
    """The line is bounded by time: it takes a run only where the runs ahead would start it within about 15
    minutes, by each ticket's estimated time (here 5 min a run) and the pace of the run training now."""
    slot.max_wait_s, slot.estimate = LINE_S, lambda configs: 300.0 * len(configs)
    front = slot.join({"run": run(tmp_path, 3000)}, Visitor("a", "93.184.216.34"))  # 20 ms a step: about 1 min
    job = front.wait_for_run(1, timeout=5)
    while job.seconds_left is None:
        time.sleep(0.01)
    for name, address in (("b", "151.101.1.69"), ("c", "2.16.7.1"), ("d", "8.8.4.4")):  # 1, 6, 11 min ahead
        slot.join({"run": run(tmp_path)}, Visitor(name, address))
    with pytest.raises(ValueError, match="the runs in line would take about 16 min before yours could start, and "
                                         "the app asks nobody to wait more than 15 min: try again in about 1 min"):
        slot.join({"run": run(tmp_path)}, Visitor("e", "9.9.9.9"))
    assert "The line takes no more runs for about 1 min: nobody is asked to wait more than 15 min." in \
        busy_text(slot.busy(Visitor("e", "9.9.9.9")))


def test_a_networks_second_run_waits_behind_the_first_run_of_every_other_network(slot, tmp_path):
    one = "93.184.216.34"
    front = slot.join({"run": run(tmp_path)}, Visitor("a1", one))
    front.wait_for_run(1, timeout=5)
    second = slot.join({"run": run(tmp_path)}, Visitor("a2", one))  # nobody else waits: the network may have two
    assert slot.place(second).number == 1
    other = slot.join({"run": run(tmp_path)}, Visitor("b", "151.101.1.69"))
    assert slot.place(other).number == 1 and slot.place(second).number == 2
    with pytest.raises(ValueError, match="2 runs from your network are already training or waiting"):
        slot.join({"run": run(tmp_path)}, Visitor("a3", one))
