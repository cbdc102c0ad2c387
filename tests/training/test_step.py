"""bert_demo/training/step.py under DistributedDataParallel: the gradients of a step's micro-batches are averaged
across processes once, after the last (DDP's `no_sync` for the others), whether the model is wrapped in DDP alone or
in torch.compile around it. A process group of one (gloo) is enough to wrap a model in DDP."""
from __future__ import annotations

import gc
from contextlib import contextmanager

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bert_demo.training import step


class Scaled(torch.nn.Module):
    """One weight times the sum of its input: its gradient is the sum of every input the step read."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.weight * x.sum()


@pytest.fixture
def counted(monkeypatch):
    """The micro-batches DDP is told not to synchronise (by their index, counted from 0), and the micro-batches the
    loss saw."""
    entered, calls = [], []
    original = DistributedDataParallel.no_sync

    @contextmanager
    def no_sync(self):
        entered.append(len(calls))
        with original(self):
            yield

    monkeypatch.setattr(DistributedDataParallel, "no_sync", no_sync)
    return entered, calls


def ddp_step(tmp_path, calls: list, compiled: bool) -> float:
    """One step's backward passes over four micro-batches of a model in DDP (within torch.compile where `compiled`),
    in a process group of one: the gradient they left. The model, its compiled wrapper and dynamo's cache of it are
    gone before the group is: a DDP reducer freed after its group joins the group's threads, and a worker that freed
    one later, at a garbage collection, hung there."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(Scaled())
        forward = torch.compile(ddp, backend="eager") if compiled else ddp
        batch = {"x": torch.arange(8.0).view(4, 2), "attention_mask": torch.ones(4, 2)}
        step.backward(forward, batch, lambda out, part, whole: calls.append(part) or (out, {}),
                      device=torch.device("cpu"), micro_batches=4)
        gradient = float(ddp.module.weight.grad)
        del forward, ddp
        torch._dynamo.reset()
        gc.collect()
        assert not [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
        return gradient
    finally:
        dist.destroy_process_group()


def test_every_micro_batch_but_the_last_runs_without_synchronising_the_gradients(counted, tmp_path):
    entered, calls = counted
    assert ddp_step(tmp_path, calls, compiled=False) == 28.0  # every input's sum: the four micro-batches' gradients
    assert entered == [0, 1, 2] and len(calls) == 4


def test_torch_compile_around_ddp_leaves_the_last_micro_batch_alone_to_synchronise(counted, tmp_path):
    entered, calls = counted
    assert ddp_step(tmp_path, calls, compiled=True) == 28.0
    assert entered == [0, 1, 2] and len(calls) == 4
