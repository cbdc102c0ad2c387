"""A visitor's training run: start it (from random weights or a saved model, on corpora, an upload or typed text),
follow it live, stop it, and compare runs."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gradio as gr

from bert_demo import plots
from bert_demo.app import text
from bert_demo.app.handlers import Outputs, friendly
from bert_demo.app.registry import Registry
from bert_demo.app.runs import UPLOAD_PREFIX, TrainingJob
from bert_demo.train_config import default

MAX_COMPARED = 8  # runs on one comparison chart
UPDATE_EVERY_S = 1.0  # how often the training stream sends new charts
STARTS = ("random weights (pre-train from scratch)", "the model selected above (continue training it)")
START_RANDOM, START_CONTINUE = STARTS
PROBE_LABEL = f"Probe: guesses for “{default('probe')}”"
STOP_ACTIVE = gr.Button(interactive=True, variant="stop")  # red only while there is a run to stop
STOP_IDLE = gr.Button(interactive=False, variant="secondary")
UPLOADED, TYPED = "the uploaded file", "the typed text"  # how the registry's refusals of an upload begin, and ours


@friendly
def train(registry: Registry, corpus: list[str], upload: str | None, preset: str, steps: float,
          batch_size: float, lr: float, seq_len: float, vocab_size: float, share: bool = False,
          start: str = START_RANDOM, model_name: str | None = None, typed: str = "",
          owner: str | None = None) -> Iterator[Outputs]:
    """Wait in line for the training slot, start the run (from random weights, or continuing `model_name`), and
    stream its charts until it ends. Text the visitor typed is trained on as if uploaded."""
    if start not in STARTS:
        raise ValueError(f"start from {' or '.join(STARTS)}, not {start!r}")
    with _typed_upload(registry, typed, upload) as upload:
        yield from _train(registry, corpus, upload, preset, steps, batch_size, lr, seq_len, vocab_size, share,
                          start, model_name, owner)


@contextmanager
def _typed_upload(registry: Registry, typed: str | None, upload: str | None) -> Iterator[str | None]:
    """The typed text as a temporary .txt, deleted when the run ends (checking the settings copies it, as it
    copies an upload). The upload's refusals ("the uploaded file is 11.0 MB ...") name it as typed text."""
    if not isinstance(typed, str) or not typed.strip():
        yield upload
        return
    if upload:
        raise ValueError("upload a file or type text, not both")
    limit = registry.caps.max_upload_bytes
    if len(typed) > limit:  # a character is at least a byte: refused before any copy of it is made
        raise ValueError(f"{TYPED} is {len(typed) / 2**20:.1f} MB; at most {limit // 2**20} MB are allowed")
    folder = Path(tempfile.mkdtemp(prefix=f"{UPLOAD_PREFIX}{os.getpid()}-"))  # swept if the app dies mid-run
    path = folder / "typed.txt"
    try:
        path.write_text(typed, encoding="utf-8")  # its exact size is checked with the upload's (`_check_upload`)
        try:
            yield str(path)
        except ValueError as exc:
            if not str(exc).startswith(UPLOADED):
                raise
            raise ValueError(TYPED + str(exc)[len(UPLOADED):]) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _train(registry: Registry, corpus: list[str], upload: str | None, preset: str, steps: float,
           batch_size: float, lr: float, seq_len: float, vocab_size: float, share: bool, start: str,
           model_name: str | None, owner: str | None) -> Iterator[Outputs]:
    job = None
    for update in registry.train_in_line(corpus=corpus, upload=upload, preset=preset, steps=steps,
                                         batch_size=batch_size, lr=lr, seq_len=seq_len, vocab_size=vocab_size,
                                         init_from=model_name if start == START_CONTINUE else None,
                                         share=bool(share), owner=owner):
        if isinstance(update, str):
            yield {"status": update, "stop": STOP_ACTIVE}  # Stop also takes a visitor out of the line
        else:
            job = update
    if job is None:
        yield {"status": "You left the line: no run was started.", "stop": STOP_IDLE}
        return
    try:
        yield {"status": text.job_status(job), **_figures([]), "probe": gr.Label(value=None, label=PROBE_LABEL),
               "checkpoint_file": None, "stop": STOP_ACTIVE, "readout": ""}
        yield from _follow(registry, job, owner)
    finally:
        if job.done is None:  # the visitor went away (tab closed, job cancelled): end the run, keep its weights
            job.stop()
    job.thread.join(timeout=10)
    yield training_outputs(registry, job, owner, final=True)
    if job.done.get("reason") == "error":
        raise gr.Error(f"Training failed: {job.done.get('message')}", print_exception=False)


def _follow(registry: Registry, job: TrainingJob, owner: str | None) -> Iterator[Outputs]:
    """Charts and status about once a second while the run trains; the live run joins the selector once built."""
    seen, last, announced = 0, 0.0, False
    while job.done is None:
        seen += len(job.wait(seen, timeout=UPDATE_EVERY_S / 2))
        if job.done is None and time.monotonic() - last >= UPDATE_EVERY_S:
            last = time.monotonic()
            outputs = training_outputs(registry, job, owner)
            if not announced and job.trainer.model is not None:
                outputs["model"], announced = gr.Dropdown(choices=registry.choices(owner)), True
            yield outputs


def _figures(records: list[dict]) -> Outputs:
    loss, accuracy, lr = plots.training_figures(records)
    return {"loss_plot": loss, "accuracy_plot": accuracy, "lr_plot": lr}


def training_outputs(registry: Registry, job: TrainingJob, owner: str | None, final: bool = False) -> Outputs:
    """Status, charts and probe of a run; when it has ended, its zip, the new run in the selector's list (the
    selector keeps showing what the visitor chose: switching every tab to a barely trained model confuses), and
    Stop greyed out again."""
    outputs = {"status": text.job_status(job), **_figures(job.records)}
    probe = next((r for r in reversed(job.records) if r.get("kind") == "probe"), None)
    if probe is not None and probe.get("error"):
        outputs["probe"] = gr.Label(value=None, label=f"Probe at step {probe['step']}: {probe['error']}")
    elif probe is not None:
        outputs["probe"] = gr.Label(value=dict(probe["predictions"]),
                                    label=f"Step {probe['step']}: guesses for “{probe['text']}”")
    readout = next((r for r in reversed(job.records) if r.get("kind") == "readout"), None)
    if readout is not None:
        outputs["readout"] = (text.memorising_note(job.records) + (text.nsp_chance_note(job.records) if final else "")
                              + text.readout_markdown(readout))
    if final:
        saved = job.done is not None and job.done.get("checkpoint")
        name = f"runs/{job.name}"
        outputs["checkpoint_file"] = gr.File(value=str(registry.zip_checkpoint(name, owner)), visible=True) \
            if saved else None
        outputs["model"] = outputs["compare_runs"] = gr.Dropdown(choices=registry.choices(owner))
        outputs["stop"] = STOP_IDLE
    return outputs


@friendly
def compare_runs(registry: Registry, names: list[str] | None, x_axis: str = "tokens", owner: str | None = None
                 ) -> Outputs:
    """Earlier runs' curves on one chart (from the app or the CLI: each folder keeps its history)."""
    names = list(names or [])
    if not names:
        raise ValueError("choose one or more runs to compare")
    if len(names) > MAX_COMPARED:
        raise ValueError(f"compare at most {MAX_COMPARED} runs at a time")
    if x_axis not in ("tokens", "time"):
        raise ValueError(f"the x axis is 'tokens' or 'time', not {x_axis!r}")
    runs = dict(registry.history(name, owner) for name in names)
    return {"compare_runs_plot": plots.compare_figure(runs, x_axis)}


def stop(registry: Registry, owner: str | None) -> Outputs:
    """Stop the visitor's own run, or take them out of the line; another visitor's run is left alone."""
    waiting = any(ticket.owner == owner for ticket in registry.line)
    if registry.stop_training(owner=owner):
        return {"status": "Leaving the line…" if waiting else
                "Stopping after the current step, then saving the checkpoint…"}
    if registry.job is not None and registry.job.running:
        gr.Warning("This run was started by someone else; only they can stop it, and it ends by itself.")
    return {"status": gr.skip()}
