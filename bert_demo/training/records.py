"""What a training run reports, record by record: the shapes a run's `run()` yields and stores in a checkpoint's
history, and that the command line, the app and the plots read. Plain dicts (they are stored as JSON), typed here.
"""
from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

HISTORY_KINDS = ("train", "val")  # the records a run keeps in its checkpoint's history (`loop.Run.log` makes them)


class StatusRecord(TypedDict):
    """A phase of the preparation ("loading corpus 'wiki'"), a problem the run survived (a failed save), or the
    length a run on a time budget has set itself (`steps`)."""

    kind: Literal["status"]
    message: str
    step: NotRequired[int]
    steps: NotRequired[int]
    training_words: NotRequired[int]  # the run's training documents, counted (a trainer in another process keeps it)


class CheckRecord(TypedDict):
    """A validation begins: the run checks itself on held-out examples until its "val" record comes."""

    kind: Literal["check"]
    step: int
    elapsed: float


class TrainRecord(TypedDict):
    """Training metrics averaged over the steps since the last one."""

    kind: Literal["train"]
    step: int
    tokens: int  # seen since the run began (every process)
    mlm_loss: float
    nsp_loss: float
    mlm_acc: float
    nsp_acc: float
    tokens_per_s: float
    lr: float
    elapsed: float  # seconds since this process started the run


class ValRecord(TypedDict):
    """Metrics on the held-out documents (`evaluate.validate`)."""

    kind: Literal["val"]
    step: int
    tokens: int
    mlm_loss: float
    mlm_acc: float
    mlm_ppl: float
    nsp_loss: float
    nsp_acc: float
    targets: int
    pairs: int
    elapsed: float
    mlm_baseline_acc: NotRequired[float]  # always guessing the training text's most frequent token
    nsp_acc_any: NotRequired[float]  # next-sentence accuracy where B is a random document of any source (the paper's)
    nsp_acc_same: NotRequired[float]  # where B is another document of A's source: coherence, not topic, tells them


class ReadoutItem(TypedDict):
    text: str  # a held-out sentence with one [MASK]
    answer: str
    guesses: list[tuple[str, float]]
    right: bool


class ReadoutRecord(TypedDict):
    """What the model gets right on a few fixed held-out sentences at this step (`evaluate.readout`)."""

    kind: Literal["readout"]
    step: int
    items: list[ReadoutItem]
    baseline_token: str
    baseline_acc: float  # held-out MLM accuracy of always guessing baseline_token


class ProbeRecord(TypedDict):
    """The model's guesses for the probe sentence's [MASK] at this step, or why there are none."""

    kind: Literal["probe"]
    step: int
    text: str
    predictions: NotRequired[list[tuple[str, float]]]
    error: NotRequired[str]


class DoneRecord(TypedDict):
    """The last record of every run: how it ended and where its checkpoint is (None when nothing was written)."""

    kind: Literal["done"]
    reason: Literal["finished", "stopped", "diverged", "out of memory", "error"]
    step: int
    checkpoint: NotRequired[str | None]
    message: str | None


Record = StatusRecord | CheckRecord | TrainRecord | ValRecord | ProbeRecord | ReadoutRecord | DoneRecord
