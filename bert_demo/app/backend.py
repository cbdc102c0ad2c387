"""torch, transformers and the model code, imported on first use, in one place.

The app serves its first page before torch has loaded (a few seconds instead of about ten). Every handler that needs
a model calls `backend()`, which imports the heavy modules once. Two threads importing transformers at the same time
can see a half-initialised module ("cannot import name 'BertTokenizerFast'"), so the first import holds a lock.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

_IMPORTING = threading.Lock()
_LOADED: SimpleNamespace | None = None


def backend() -> SimpleNamespace:
    """The modules the app calls: torch, checkpoint, evaluate, inference, pretraining_data, timeline, trainer."""
    global _LOADED
    if _LOADED is None:
        with _IMPORTING:
            if _LOADED is None:
                import torch

                from bert_demo import checkpoint, evaluate, inference, pretraining_data, timeline, trainer
                from bert_demo.app import run_process

                if not torch.cuda.is_available():  # a GPU host trains in a thread (CUDA and fork do not mix)
                    run_process.warm_up()  # a visitor who asks questions may train next: have the run's process ready

                _LOADED = SimpleNamespace(torch=torch, checkpoint=checkpoint, evaluate=evaluate, inference=inference,
                                          pretraining_data=pretraining_data, timeline=timeline, trainer=trainer)
    return _LOADED
