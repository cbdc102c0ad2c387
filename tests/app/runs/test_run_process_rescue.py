"""bert_demo/app/runs/run_process.py: a run whose process is killed between two steps is not lost: the app saves the
weights it shares with it, at the step they belong to."""
from __future__ import annotations

import os
import signal
import time

import torch

from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.runs.run_process import ProcessTrainer
from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.config import OPTIMIZER_NAME
from bert_demo.training.settings import TrainConfig


def test_a_child_killed_between_steps_leaves_its_shared_weights_saved_at_their_step(write_corpus, tmp_path):
    config = TrainConfig(preset="tiny", corpus=str(write_corpus(tmp_path / "corpus.txt")), steps=2000, batch_size=4,
                         seq_len=32, vocab_size=512, log_every=5, eval_every=20, save_every=10**9,
                         out=str(tmp_path / "run"))
    trainer = ProcessTrainer(config, origin="app", visible_to="me")
    job = TrainingJob(trainer, "run")
    job.start()
    deadline = time.monotonic() + 60
    while (trainer.model is None or trainer.step < 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(trainer.process.pid, signal.SIGSTOP)  # frozen, then killed: no chance to save
    while trainer._writes.value % 2:  # frozen mid-step: let it finish that step first
        os.kill(trainer.process.pid, signal.SIGCONT)
        time.sleep(0.001)
        os.kill(trainer.process.pid, signal.SIGSTOP)
    step, weights = trainer.step, {k: v.clone() for k, v in trainer.model.state_dict().items()}
    os.kill(trainer.process.pid, signal.SIGKILL)
    job.thread.join(timeout=60)
    done = job.done
    assert done["reason"] == "stopped" and done["step"] == step and "without saving" in done["message"], done
    saved, _ = load_pretrained(done["checkpoint"])
    assert all(torch.equal(saved.state_dict()[k], v) for k, v in weights.items())
    metadata = read_metadata(done["checkpoint"])
    assert metadata["step"] == step and metadata["visible_to"] == "me" and metadata["origin"] == "app"
    assert metadata["training_words"] == trainer.training_words > 0  # the words the child counted, kept too
    assert not (tmp_path / "run" / OPTIMIZER_NAME).exists()  # an app run is never resumed: no optimizer state


def test_a_child_killed_while_its_weights_are_being_fetched_has_ended_not_failed():
    from bert_demo.app.runs.run_process import _messages

    class Reset:
        """A pipe whose next message cannot be read: the sender died while its file descriptors were fetched."""

        def poll(self, timeout):
            return True

        def recv(self):
            raise ConnectionResetError(104, "Connection reset by peer")

    assert list(_messages(Reset())) == []
