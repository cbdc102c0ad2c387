"""What the app asks of the machine it runs on: whether it has a GPU (known without torch where no driver says so),
torch and transformers imported once for every thread, and what the app starts beside its page: the fork server its
CPU runs start from, and a C heap held down (few arenas, large blocks mapped apart, freed memory handed back on a
timer).

The app serves its first page before torch has loaded (a few seconds instead of about ten), so the modules that need
torch are imported where a handler first needs them. transformers builds its names lazily, and two threads importing
it at once can see a half-built module ("cannot import name 'BertTokenizerFast'"): the first import of the heavy
modules is made under one lock (`import_heavy`), by the first handler to run (`handlers.friendly`) or the
warm-up beside the page, whichever comes first.
"""
from __future__ import annotations

from collections.abc import Callable

import ctypes
import os
import threading
import time
from pathlib import Path

GPU_DRIVER_SIGNS = ("/proc/driver/nvidia/version", "/dev/dxg")  # NVIDIA's Linux driver; WSL2's GPU
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc's mallopt parameters (malloc.h)
HEAPS = 2  # glibc arenas the app's threads share
MMAP_FROM_BYTES = 1 << 20  # allocations this large are mapped on their own, and unmapped when freed
TRIM_EVERY_S = 60.0  # how often the app hands the freed memory of its C heap back to the system
_IMPORTING = threading.Lock()
_imported = False


def import_heavy() -> None:
    """Import torch, transformers and the model code once, under a lock; afterwards, nothing."""
    global _imported
    if _imported:
        return
    with _IMPORTING:
        if not _imported:
            import torch  # noqa: F401
            import transformers  # noqa: F401

            from bert_demo import checkpoint, inference  # noqa: F401  (transformers' tokenizer, built whole)
            _imported = True


def visible_device() -> str:
    """CUDA when torch can use a GPU, else the CPU; decided once, before the page is built, so that the Train form
    offers the caps of the device runs will use. A host with no sign of a GPU driver (neither NVIDIA's on Linux nor
    WSL2's /dev/dxg) is a CPU host without importing torch (about ten seconds of the first page's start); anywhere
    else torch decides: a driver file can sit beside a CPU-only torch, and under WSL2 it is absent while CUDA works."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    if not any(Path(sign).exists() for sign in GPU_DRIVER_SIGNS):
        return "cpu"
    import_heavy()
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def hold_heap_down() -> None:
    """Keep the C heap from growing with the threads that answer questions: at most HEAPS of glibc's arenas (it
    makes up to eight a core, each keeping what its threads freed), and each allocation of MMAP_FROM_BYTES or more
    (a long text's attention, a model copy's weights) mapped on its own and handed back when freed (glibc otherwise
    raises that bar after every large free, and large tensors then fragment the heap). Measured in docs/limits.md;
    elsewhere than glibc, nothing. Called before the app starts its threads."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_ARENA_MAX, HEAPS)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_FROM_BYTES)
    except (AttributeError, OSError):  # not glibc (macOS, musl, Windows)
        pass


def start_beside_the_page(fork_server: Callable[[], None]) -> None:
    """What the app starts once its page is served: on a CPU host the fork server runs start from (`fork_server`,
    `run_process.warm_up`, handed in: the runs sit above this module; a visitor who asks questions may train next),
    and the timer that hands freed heap memory back."""
    import torch

    if not torch.cuda.is_available():  # a GPU host trains in a thread (CUDA and fork do not mix)
        fork_server()
    threading.Thread(target=_trim_heap, name="trim-heap", daemon=True).start()


def _trim_heap() -> None:
    """Hand freed heap memory back to the system every TRIM_EVERY_S: questions answered in many threads leave it in
    glibc's heap, held rather than leaked (measured in docs/limits.md)."""
    from bert_demo.training.runtime import release_free_memory

    while True:
        time.sleep(TRIM_EVERY_S)
        release_free_memory()
