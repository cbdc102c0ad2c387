"""torch, transformers and the model code, imported on first use, in one place; and whether there is a GPU, known
without importing torch where no driver says so.

The app serves its first page before torch has loaded (a few seconds instead of about ten). Every handler that needs
a model calls `backend()`, which imports the heavy modules once. Two threads importing transformers at the same time
can see a half-initialised module ("cannot import name 'BertTokenizerFast'"), so the first import holds a lock.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

GPU_DRIVER_SIGNS = ("/proc/driver/nvidia/version", "/dev/dxg")  # NVIDIA's Linux driver; WSL2's GPU
TRIM_EVERY_S = 60.0  # how often the app hands the freed memory of its C heap back to the system
_IMPORTING = threading.Lock()


class Backend(SimpleNamespace):
    """The modules the app calls, as attributes; `labelled` is imported when first asked for."""

    @property
    def labelled(self) -> ModuleType:
        """The fine-tuning data (it needs `datasets`): imported where fine-tuning is asked for, so that a machine
        without `datasets`, such as a lent GPU's, still reads and shows pre-training checkpoints."""
        from bert_demo.data import labelled

        return labelled


_LOADED: Backend | None = None


def backend() -> Backend:
    """The modules the app calls: torch, attribution, checkpoint, evaluate, inference, labelled, model, neighbours,
    pretraining_data, runtime, timeline, trainer, weight_change."""
    global _LOADED
    if _LOADED is None:
        with _IMPORTING:
            if _LOADED is None:
                import torch

                from bert_demo import checkpoint, inference, model
                from bert_demo.app.runs import run_process
                from bert_demo.data import pairs as pretraining_data
                from bert_demo.inspection import attribution, neighbours, weight_change
                from bert_demo.training import evaluate, runtime, timeline
                from bert_demo.training import pretraining as trainer

                if not torch.cuda.is_available():  # a GPU host trains in a thread (CUDA and fork do not mix)
                    run_process.warm_up()  # a visitor who asks questions may train next: have the run's process ready
                threading.Thread(target=_trim_heap, name="trim-heap", daemon=True).start()

                _LOADED = Backend(torch=torch, attribution=attribution, checkpoint=checkpoint, evaluate=evaluate,
                                  inference=inference, model=model, neighbours=neighbours,
                                  pretraining_data=pretraining_data, runtime=runtime, timeline=timeline,
                                  trainer=trainer, weight_change=weight_change)
    return _LOADED


def _trim_heap() -> None:
    """Hand freed heap memory back to the system every TRIM_EVERY_S. Questions answered in many threads leave it
    in glibc's heap: 1,200 fill-mask and next-sentence requests from 16 threads held the process at 767 MB, and
    491 MB after one trim (the same 767 MB after 200 requests as after 1,200: held, not leaked)."""
    from bert_demo.training.runtime import release_free_memory

    while True:
        time.sleep(TRIM_EVERY_S)
        release_free_memory()


def visible_device() -> str:
    """CUDA when torch can use a GPU, else the CPU; decided once, before the page is built, so that the Train form
    offers the caps of the device runs will use. A host with no sign of a GPU driver (neither NVIDIA's on Linux nor
    WSL2's /dev/dxg) is a CPU host without importing torch (about ten seconds of the first page's start); anywhere
    else torch decides: a driver file can sit beside a CPU-only torch, and under WSL2 it is absent while CUDA works."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    if not any(Path(sign).exists() for sign in GPU_DRIVER_SIGNS):
        return "cpu"
    return "cuda" if backend().torch.cuda.is_available() else "cpu"
