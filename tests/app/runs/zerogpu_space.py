"""The app as on a ZeroGPU Space, under the real `spaces` package: `python -m tests.app.runs.zerogpu_space REPORT`, with
SPACES_ZERO_GPU set and SPACES_ZERO_DEVICE_API_URL pointing at ZeroGPU's device API
(tests/app/runs/zerogpu_device_api.py, on loopback); host and port from GRADIO_SERVER_NAME and GRADIO_SERVER_PORT,
models where `python app.py` finds them.

It is `python app.py`, with two things added:
- On a machine without an NVIDIA GPU (none in /proc/driver/nvidia/gpus, where `spaces` looks), what needs one is
  replaced in the GPU call's worker, and nothing else: its CUDA start (`spaces.zero.torch.init` and `move`, which make
  the GPU CUDA's only device, put a tensor on it and move there what the app's process recorded for CUDA: nothing may
  be recorded), and the run's device (a "cuda" run trains on the CPU). On a GPU machine nothing is replaced.
- Each attempt to initialise CUDA in the app's process is counted (`spaces` refuses it there: the count wraps its
  refusal). On SIGUSR1 the process writes REPORT, JSON: those attempts' stacks (`cuda_attempts`) and whether CUDA is
  initialised in it (`cuda_initialized`).
"""
from __future__ import annotations

import json
import runpy
import signal
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def main(report: Path) -> None:
    """Serve the app as `python app.py` does, after the additions above."""
    from bert_demo.app.runs import zerogpu  # first: `spaces` is imported before gradio, as app.py has it

    if zerogpu.GPU_TRAINING is None:
        raise SystemExit(f"{zerogpu.ZERO_GPU_ENV} is not set: the app would not run as on ZeroGPU")
    import torch

    from tests.app.runs.zerogpu_device_api import NVIDIA_GPUS

    if not any(NVIDIA_GPUS.glob("*/information")):
        replace_cuda_start()
    attempts = counted_cuda_attempts(torch)
    signal.signal(signal.SIGUSR1, lambda *_: write_report(report, attempts, torch))
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")


def replace_cuda_start() -> None:
    """The worker's CUDA start, on a machine without a GPU: the call's run trains on the CPU, and nothing recorded
    for CUDA in the app's process may need moving."""
    from spaces.zero import torch as zerogpu_torch

    from tests.app.runs.zerogpu_harness import cuda_runs_on_the_cpu

    def move(callback: Any = None) -> None:
        if zerogpu_torch.size():
            raise RuntimeError("the app's process recorded tensors for CUDA: a GPU call would have to move them")

    zerogpu_torch.init = lambda nvidia_uuid: cuda_runs_on_the_cpu()
    zerogpu_torch.move = move


def counted_cuda_attempts(torch: ModuleType) -> list[str]:
    """The stacks of the attempts to initialise CUDA in this process from now on, each still refused by `spaces`
    (the worker puts torch's own `_cuda_init` back, without the count)."""
    attempts: list[str] = []
    refuse = torch._C._cuda_init

    def counted() -> None:
        attempts.append("".join(traceback.format_stack(limit=12)))
        refuse()

    torch._C._cuda_init = counted
    return attempts


def write_report(report: Path, attempts: list[str], torch: ModuleType) -> None:
    """What the tests ask of the app's process, written whole (a reader never finds half of it)."""
    partial = report.with_suffix(".partial")
    partial.write_text(json.dumps({"cuda_attempts": attempts, "cuda_initialized": torch.cuda.is_initialized()}))
    partial.replace(report)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
