"""bert_demo/app/machine.py: what the app asks of the machine: whether it has a GPU (without torch where no driver
says so), the run's fork server where there is none, and freed heap memory handed back, started beside the page."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bert_demo.app import machine
from bert_demo.app.registry import Registry
from tests.conftest import TEST_SHAPE


def test_the_app_asks_torch_whether_it_has_a_gpu_before_the_form_takes_its_caps(roots, monkeypatch):
    monkeypatch.delenv("BERT_DEMO_DEVICE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    make = lambda: Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], allow_hub=False)  # noqa: E731
    monkeypatch.setattr(machine, "GPU_DRIVER_SIGNS", (str(roots["checkpoints"]),))  # a driver file that exists
    for available, device, kind in ((True, "cuda", "gpu"), (False, "cpu", "cpu")):  # e.g. a CPU-only torch
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        registry = make()
        assert (registry.device, registry.caps.machine) == (device, kind)
    monkeypatch.setattr(machine, "GPU_DRIVER_SIGNS", (str(roots["checkpoints"] / "absent"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("torch asked on a host with no GPU driver"))
    assert make().device == "cpu"


def test_the_fork_server_for_cpu_runs_is_started_beside_the_page_only_where_there_is_no_gpu(monkeypatch):
    from bert_demo.app.runs import run_process

    started = []
    monkeypatch.setattr(run_process, "warm_up", lambda: started.append(True))
    monkeypatch.setattr(machine, "_trim_heap", lambda: None)
    for available in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        machine.start_beside_the_page(run_process.warm_up)
    assert started == [True]  # on the GPU host, runs train in a thread: no fork server


def test_the_app_hands_freed_heap_memory_back_to_the_system_while_it_runs(monkeypatch):
    from bert_demo.training import runtime

    trims = []
    monkeypatch.setattr(machine, "TRIM_EVERY_S", 0.05)
    monkeypatch.setattr(runtime, "release_free_memory", lambda: trims.append(time.monotonic()))
    machine.start_beside_the_page(lambda: None)
    deadline = time.monotonic() + 5
    while len(trims) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(trims) >= 2


def test_the_app_starts_its_fork_server_and_timer_as_it_warms_up_not_when_a_module_is_first_asked_for(roots,
                                                                                                      monkeypatch):
    started = []
    monkeypatch.setattr(machine, "start_beside_the_page", lambda warm_up: started.append(True))
    registry = Registry(checkpoints_dir=roots["checkpoints"], runs_dir=roots["runs"], device="cpu", allow_hub=False)
    registry.catalog.load("checkpoints/tiny-test")
    assert started == []  # loading a model starts nothing
    from bert_demo.app import registry as registry_module

    monkeypatch.setattr(registry_module, "start_beside_the_page", lambda warm_up: started.append(warm_up))
    registry.warm_up().join(timeout=60)
    assert started == [registry_module.run_process.warm_up]


def test_a_pre_training_checkpoint_is_read_and_shown_on_a_machine_without_datasets(make_checkpoint, tmp_path):
    """The lent GPU machine has no `datasets`: only fine-tuning needs it, so only fine-tuning may import it."""
    import subprocess
    import sys

    make_checkpoint(tmp_path / "runs" / "a-run")
    code = ("import sys; sys.modules['datasets'] = None  # import datasets now fails, as where it is absent\n"
            "from bert_demo.app.registry import Registry\n"
            f"registry = Registry(checkpoints_dir={str(tmp_path / 'none')!r}, runs_dir={str(tmp_path / 'runs')!r}, "
            "device='cpu', allow_hub=False)\n"
            "print(registry.catalog.load_at('runs/a-run', None).model.config.hidden_size)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.split()[-1] == str(TEST_SHAPE.hidden_size), done.stderr[-2000:]


MAPPED_AFTER_A_LARGE_FREE = """
import ctypes, sys
from bert_demo.app import machine

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "held":
    machine.hold_heap_down()
libc.free(libc.malloc(8 << 20))  # glibc raises its bar for mapping a block on its own past this one
before = libc.mallinfo2().hblks
block = libc.malloc(4 << 20)
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc only")
def test_a_held_down_heap_maps_a_large_block_on_its_own_even_after_a_larger_one_was_freed():
    """Large tensors freed in the answering threads stay out of the heap, so they go back to the system when freed."""
    mapped = {how: subprocess.run([sys.executable, "-c", MAPPED_AFTER_A_LARGE_FREE, how], capture_output=True,
                                  text=True, check=True).stdout.strip() for how in ("held", "glibc's own")}
    assert mapped == {"held": "1", "glibc's own": "0"}
