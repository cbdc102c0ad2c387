"""What the app offers: the settings a visitor chooses on the Train form (`FORM`), its default pre-training run on each
kind of machine, its fine-tuning experiment and the well-read start it compares with (Google's compact BERTs); and
what one visitor may ask of a shared machine (`CAPS`, `check_limits`, `check_batch_tokens`). Policy of the app, not of
BERT: the settings themselves, their defaults and their bounds, are `bert_demo.training.settings`'s."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bert_demo.config import BERT_WORDS
from bert_demo.training.settings import RECIPES, FinetuneConfig, check_setting, default

MACHINES = ("cpu", "gpu")  # the kinds of machine the app tells apart

# The settings of TrainConfig a visitor chooses on the Train form, in the order of its inputs and of /train's
# parameters (after the corpus and the upload). A name added here is an input of the form (its kind, label and bounds
# read from the setting), a parameter of /train and of the handlers, and a value of the run's config; its cap on a
# shared machine, if it needs one, goes in CAPS.
FORM = ("preset", "steps", "batch_size", "lr", "seq_len", "vocab_size")

# The app's default run's length on a CPU (APP_RUN), and the most steps one visitor's run may take there (CAPS).
CPU_STEPS = 1400

# The places in the training line (the slot included) that the runs from one address may hold (runs/slot.py), and
# the events of gradio's queue its runs may hold besides its open questions (guards/queue_door.py).
ADDRESS_PLACES = 2

# What one visitor's run may ask for on a shared machine of each kind: an upper bound tighter than the setting's own,
# or fewer choices. A CPU's keep a default-sized run within minutes; a GPU's fit a 24 GB card (GPU_BATCH_TOKENS).
# Above 1e-2, the rate of LAMB only, AdamW's runs return to the plateau or diverge.
CAPS: dict[str, dict[str, Any]] = {
    "cpu": {"preset": ("tiny", "mini"), "steps": CPU_STEPS, "batch_size": 64, "lr": 1e-2, "seq_len": 128,
            "vocab_size": 16_384},
    "gpu": {"steps": 20_000, "batch_size": 256, "lr": 1e-2, "seq_len": 512, "vocab_size": 32_768}}

# The app's default run: a from-scratch run a visitor starts with one click. The recipe is TrainConfig's own
# defaults; only the size, length and peak learning rate of the run differ, chosen to finish within 3 minutes on 2
# quiet CPU cores, corpus preparation included, past the frequent-token plateau (benchmarks/README.md, "Learning
# speed"). Its peak rate is the best measured for tiny: after 1,000 steps it reads held-out news at 0.200, against
# 0.175 at 1e-3 and 0.192 at 2e-3; 4e-3 and 5e-3 do worse by step 500, and 5e-3 stays on the plateau. At its end
# (CPU_STEPS) it reads 0.223, 156 s from the click.
APP_RUN: dict[str, Any] = {"corpus": "news,wiki", "preset": "tiny", "steps": CPU_STEPS, "batch_size": 32,
                           "lr": 3e-3, "seq_len": 128, "vocab_size": 8192}
# The default run where a GPU trains it (a dedicated GPU, or a call on ZeroGPU): sized by tokens, not by one card's
# seconds, so that its call fits a minute on ZeroGPU's half card at the pace app/runs/gpu_call.py assumes there:
# BERT-Mini reading 20 M tokens, 600 steps of BERT's 256 x 128 (30 M would ask for 82 s).
APP_GPU_RUN: dict[str, Any] = {**APP_RUN, "preset": "mini", "steps": 600, "batch_size": 256, "lr": 1e-3}  # as measured
APP_RUNS = {"cpu": APP_RUN, "gpu": APP_GPU_RUN}  # by machine kind (MACHINES)


def form_default(name: str, machine: str, recipe: str = "fast") -> Any:
    """Where a visitor leaves a setting of the form out (and where the form starts): the machine's default run's
    value, else the recipe's (RECIPES), else TrainConfig's."""
    return APP_RUNS[machine].get(name, RECIPES[recipe].get(name, default(name)))


# The app's fine-tuning experiment (the Fine-tune tab): each start (pre-trained, random weights, frozen encoder)
# trains on the first N labelled sentences of the task for `epochs` passes, at most `max_steps` steps, validating
# `validations` times (eight points draw a curve, four are too few); FinetuneConfig's recipe otherwise. The default
# label count is the largest at which the pre-trained start's lead on validation is more than twice its spread over
# three seeds, so that the lesson shows on one click: 300 labels, +5.7 ± 2.2 points (at 1,000: +2.2 ± 1.2; the grid, run
# with this budget, is in benchmarks/README.md, "The Fine-tune tab's default label count"); the pair then takes under
# 2 minutes on 2 CPU cores, from the click to the verdict. `outside` scores each run on another domain with the same
# classes.
# A visitor's labelled file may hold `max_upload_examples` (its validation split, 10%, is scored five times a run).
# The third start, where the hub is reachable, is the model of GOOGLE_BERTS of the selected model's shape.
APP_FINETUNE: dict[str, Any] = {"task": "movie-reviews", "train_examples": 300,
                                "label_counts": (100, 300, 1000, None), "epochs": 10, "max_steps": 200,
                                "validations": 8, "max_upload_examples": 12_000, "well_read_words": BERT_WORDS,
                                "outside": {"movie-reviews": "amazon-reviews", "amazon-reviews": "movie-reviews",
                                            "nyt-editorials": "movie-reviews", "tweets": "movie-reviews",
                                            "sst2": "movie-reviews"}}


# The Fine-tune tab's well-read start: Google's compact BERTs (Turc et al. 2019), pre-trained on BookCorpus and English
# Wikipedia (3.3 billion words) with BERT's 30,522-piece vocabulary, by (layers, hidden size), the shapes of our tiny,
# mini and small; each in a safetensors conversion (Google's own hub repositories hold pickles only, never loaded).
GOOGLE_BERTS = {(2, 128): ("gaunernst/bert-tiny-uncased", "Google's BERT-Tiny"),
                (4, 256): ("gaunernst/bert-mini-uncased", "Google's BERT-Mini"),
                (4, 512): ("gaunernst/bert-small-uncased", "Google's BERT-Small")}
WELL_READ_VOCAB = 30_522


def well_read_model(layers: int, hidden_size: int) -> tuple[str, str] | None:
    """The hub id and name of Google's BERT of this shape, the well-read start to compare with, or None where
    Google published none."""
    return GOOGLE_BERTS.get((layers, hidden_size))


def well_read_name(hub_id: str | None) -> str | None:
    """The name of a well-read start by its hub id ("Google's BERT-Mini"), or None for any other model."""
    return next((name for id_, name in GOOGLE_BERTS.values() if id_ == hub_id), None)


def app_finetune_steps(examples: int) -> int:
    """The Fine-tune tab's budget for a run on `examples` labelled sentences: APP_FINETUNE's passes over them in
    batches of FinetuneConfig's size, at most its `max_steps`."""
    return min(math.ceil(APP_FINETUNE["epochs"] * examples / FinetuneConfig.batch_size), APP_FINETUNE["max_steps"])


# The app's GPU caps (CAPS["gpu"]) fit a 24 GB card (A10G, L4, RTX 4090) at their
# worst corner, base x batch 64 x 512 tokens x a 32,768-token vocabulary, in bf16 autocast with fused attention (no
# tokens x tokens matrix is kept):
#   weights, gradients and AdamW's two moments in fp32: 110 M parameters x 16 bytes              =  1.8 GB
#   activations: about 34 x hidden bytes per token and layer (Korthikanti et al. 2022, no dropout masks)
#                64 x 512 tokens x 12 layers x 34 x 768                                              = 10.3 GB
#   masked-LM logits at up to 129 positions a sequence (25% masked, plus one), bf16 + fp32 copy + its gradient:
#                64 x 129 x 32,768 x 10 bytes                                                        =  2.7 GB
# about 15 GB. Measured on an H100 by benchmarks/gpu_check.py: 18.8 GB reserved at the peak of a training step (the
# allocator's cache and the attention kernels' workspace come on top of the estimate). Batch 256 at 512 tokens needs
# four times the activations: on a GPU a batch may hold 256 sequences, but at most GPU_BATCH_TOKENS tokens in all, so
# that BERT's 256 x 128 fits beside 64 x 512.
GPU_BATCH_TOKENS = 64 * 512


def check_limits(values: Mapping[str, Any], limits: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first of a visitor's `values` past the app's tighter cap (`shared_limits`), said
    to be "on this machine"; checked before the config is made, whose own check names the wider bounds."""
    for name, value in values.items():
        if name in limits:
            check_setting(name, value, limits[name])


def check_batch_tokens(batch_size: int, seq_len: int, machine: str) -> None:
    """Refuse a batch of more tokens than a machine of this kind allows one visitor (GPU_BATCH_TOKENS on a GPU; a
    CPU's caps on batch size and length keep its batches small)."""
    if machine == "gpu" and batch_size * seq_len > GPU_BATCH_TOKENS:
        raise ValueError(f"a batch of {batch_size} sequences of {seq_len} tokens is {batch_size * seq_len:,} tokens; "
                         f"at most {GPU_BATCH_TOKENS:,} are allowed on this machine: lower the batch size or the "
                         "sequence length")


def shared_limits(machine: str) -> dict[str, Any]:
    """The app's caps on a shared machine of this kind, keyed by setting: an upper bound or the allowed choices."""
    if machine not in MACHINES:
        raise ValueError(f"unknown machine kind {machine!r}: use {', '.join(MACHINES)}")
    return dict(CAPS[machine])
