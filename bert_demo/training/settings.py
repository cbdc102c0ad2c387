"""Every setting of a pre-training or fine-tuning run, defined once: default, help text, concern and bounds.

`TrainConfig` is read by the trainer, the command line (whose flags are generated from it: `add_flags`), the app's
Train form (built from the settings it names, `app.policy.FORM`: each input's kind, label, default and bounds come
from here, an app's tighter caps from its policy) and the tests. Like cramming's configs, a recipe is
a set of values, not a code edit. This module imports neither torch nor the data pipeline (only the names of the
corpora), so the app's first page can read it at once.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bert_demo.config import PRESETS
from bert_demo.data.masking import MASK_PROB, REPLACE_MASK
from bert_demo.data.sources import MIXES, TRAINING_SOURCES

SCHEDULES = ("linear", "triangle")
OPTIMIZERS = ("adamw", "lamb")
BETA1 = 0.9  # the optimizers' first-moment decay: the paper's (A.2), in every recipe, so not a setting
PRECISIONS = ("auto", "fp32", "bf16")
INITS = ("pretrained", "random", "frozen")  # how a fine-tuning run starts
RANDOM_B = ("same-source", "any")  # where next-sentence prediction's random B comes from
VAL_BATCH_SIZE = 32  # sequences in each of a pre-training run's validation batches (`eval_batches` of them)
MAX_SEED = 2**31 - 1  # a run's seed, and the seed a pre-training example is drawn with
EXAMPLE_STEPS = 20  # training steps a request may take on one example (inspection.training_step): it is memorised
LESSON_BATCH = 6  # examples a request may put in one batch (inspection.batch_step): 5.4 s for 6 on BERT-Small
LESSON_RUN_STEPS, LESSON_RUN_BATCH = 20, 8  # a request's short run (inspection.over_time): steps, examples a batch,
LESSON_RUN_EXAMPLES = 40  # and examples in all (steps x batch): about 4 s for 40 on BERT-Small, on 2 cores


GROUPS = {"model": "the model", "data": "the text it reads", "objectives": "what it is asked (the pre-training tasks)",
          "start": "how it starts", "length": "how long it trains", "optimizer": "the optimizer and its schedule",
          "records": "what it records and where", "machine": "where it computes"}  # a setting's concern, in order


def setting(default: Any, help: str, *, group: str, label: str | None = None, low: float | None = None,
            high: float | None = None, choices: tuple | None = None) -> Any:
    """A config's field, of one concern (`group`, one of GROUPS). `low`/`high` bound it everywhere; `choices` lists
    its allowed values (what an app allows one visitor is its own policy: `bert_demo.app.policy.CAPS`)."""
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r} of a setting: use {', '.join(GROUPS)}")
    return field(default=default, metadata={"help": help, "group": group, "label": label, "low": low, "high": high,
                                            "choices": choices})




@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What every run has, pre-training or fine-tuning: its length, its optimizer and schedule, where and in what
    precision it computes, and how often it reports and saves."""

    # the model
    dropout: float | None = setting(0.0, "hidden and attention dropout (BERT: 0.1; None: the preset's)", low=0.0,
                                    high=0.9, group="model")

    # how long it trains
    steps: int = setting(200, "optimizer steps in total (a resumed run continues up to this number)", low=1,
                         high=10_000_000, group="length")
    batch_size: int = setting(32, "sequences per optimizer step on each process", label="batch size", low=1,
                              high=65_536, group="length")
    grad_accum: int = setting(1, "micro-batches per step (gradient accumulation)", low=1, high=1024, group="length")
    minutes: float | None = setting(None, "train for this long, preparation included, instead of a set number of "
                                          "steps: the run measures its pace over its first steps, then sets --steps "
                                          "so that its schedule ends with the time (cramming's budget); a run that "
                                          "falls behind stops at the time and saves", low=0.05, high=10_080.0,
                                    group="length")

    # the optimizer and its schedule
    lr: float = setting(1e-3, "peak learning rate (AdamW's runs leave the plateau up to about 3e-3; LAMB's need more)",
                        label="learning rate", low=1e-6, high=1e-1, group="optimizer")
    warmup_steps: int | None = setting(None, "warm-up steps (default: 10% of steps)", label="warm-up steps", low=0,
                                       group="optimizer")
    schedule: str = setting("linear", "learning-rate shape: linear (BERT: warm-up, then linear decay) or triangle "
                                      "(one-cycle: from 25% of the peak up to it at warm-up's end, then down to 0)",
                            choices=SCHEDULES, group="optimizer")
    optimizer: str = setting("adamw", "adamw (BERT's Adam, its weight decay decoupled) or lamb (You et al. 2020: "
                                      "each matrix's step scaled to the matrix's norm; GPT-BERT's, at lr 1.4e-2)",
                             choices=OPTIMIZERS, group="optimizer")
    weight_decay: float = setting(0.01, "AdamW weight decay on matrices", label="weight decay", low=0.0, high=1.0,
                                  group="optimizer")
    beta2: float = setting(0.98, "AdamW's second-moment decay", low=0.5, high=0.99999, group="optimizer")
    adam_eps: float = setting(1e-12, "AdamW's epsilon (BERT: 1e-6, which damps the tiny early query/key updates)",
                              label="Adam epsilon", low=1e-20, high=1e-3, group="optimizer")
    grad_clip: float = setting(1.0, "clip the gradient norm to this", label="gradient clipping", low=1e-3,
                               high=1000.0, group="optimizer")

    # what it records and where
    out: str = setting("checkpoints/run", "checkpoint folder to write", group="records")
    eval_every: int = setting(50, "validate every N steps", low=1, group="records")
    save_every: int = setting(500, "write a checkpoint every N steps", low=1, group="records")
    save_optimizer: bool = setting(True, "write AdamW's moments beside each checkpoint, so that --resume continues "
                                         "the run as it was (two thirds of the checkpoint's bytes)",
                                   label="save the optimizer", group="records")
    log_every: int = setting(5, "report training metrics every N steps", low=1, group="records")
    seed: int = setting(0, "random seed", low=0, high=MAX_SEED, group="records")

    # where it computes
    device: str | None = setting(None, "cpu, cuda or cuda:N (default: CUDA when present)", group="machine")
    precision: str = setting("auto", "compute precision of the forward pass: bf16 autocast or fp32 (auto: bf16 where "
                                     "the device computes it natively, a GPU of compute capability 8.0+ or a CPU with "
                                     "AVX-512 BF16 or AMX; fp32 elsewhere); weights, optimizer and checkpoints stay "
                                     "fp32",
                             choices=PRECISIONS, group="machine")
    compile: bool = setting(False, "torch.compile the model (off by default: Spaces' ZeroGPU forbids it)",
                            group="machine")

    def __post_init__(self) -> None:
        self.validate()  # checked once, when it is made, and frozen: a run never holds one no run can use

    def validate(self) -> None:
        """Raise ValueError naming the first setting no run can use (the app's tighter caps:
        `app.policy.check_limits`)."""
        for f in fields(self):
            _check(f, getattr(self, f.name), None, on_machine=False)
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch size {self.batch_size} must be a multiple of grad_accum {self.grad_accum}")
        if self.warmup_steps is not None and self.steps is not None and self.warmup_steps > self.steps \
                and self.minutes is None:  # on a time budget the steps are set later, by the pace
            raise ValueError("warm-up steps must be between 0 and steps")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(RunConfig):
    """Everything that defines a pre-training run; stored beside its checkpoint so the run can be repeated or
    resumed."""

    # the model
    preset: str = setting("tiny", "model size", choices=tuple(PRESETS), group="model")
    vocab_size: int = setting(8192, "WordPiece vocabulary size to train", label="vocabulary size", low=128,
                              high=65_536, group="model")
    tokenizer: str | None = setting(None, "reuse the tokenizer of this checkpoint folder", group="model")
    init_from: str | None = setting(None, "start from this checkpoint folder's weights and tokenizer instead of "
                                          "random ones: continued pre-training on a new corpus (domain adaptation); "
                                          "its size replaces --preset and --vocab-size", label="start from",
                                    group="model")

    # the text it reads
    corpus: str = setting("wiki", f"a named corpus ({', '.join(TRAINING_SOURCES)}), a mix of them "
                                  f"({', '.join(MIXES)}: docs/data.md) or a text file; combine with commas (news,wiki)",
                          group="data")
    seq_len: int = setting(128, "tokens per example", label="sequence length", low=16, high=512,
                           group="data")
    short_seq_len: int = setting(32, "sequence length of the first --short-seq-steps steps",
                                 label="short sequence length", low=16, high=512, group="data")
    short_seq_steps: int = setting(0, "train this many steps on short examples first (a length curriculum)",
                                   label="short-sequence steps", low=0, group="data")
    val_fraction: float = setting(0.05, "share of documents held out for validation", label="validation share",
                                  low=0.01, high=0.49, group="data")
    eval_batches: int = setting(8, f"validation batches of {VAL_BATCH_SIZE}", low=1, high=10_000, group="data")

    # what it is asked (the pre-training tasks)
    mask_prob: float = setting(0.25, f"share of tokens masked in training (BERT: {MASK_PROB:.0%}; validation always "
                                     f"masks {MASK_PROB:.0%})", label="masking rate", low=0.01, high=0.9,
                               group="objectives")
    mask_prob_start: float | None = setting(None, "masking rate at the first step, falling linearly to the masking "
                                                  "rate by the last (GPT-BERT 2024: 30% to 15%; default: the masking "
                                                  "rate throughout)", label="first masking rate", low=0.01, high=0.9,
                                            group="objectives")
    mask_replace: float = setting(REPLACE_MASK, "share of the picked tokens made [MASK]; of the rest, half become a "
                                                "random word and half stay (BERT: 0.8, so 80/10/10; 1.0: every picked "
                                                "token [MASK], as validation asks)", label="[MASK] share", low=0.0,
                                  high=1.0, group="objectives")
    mask_span: int = setting(1, "mask runs of 1 to N consecutive tokens (SpanBERT; GPT-BERT masks 1-3); 1: BERT's "
                                "single tokens", label="longest masked run", low=1, high=10, group="objectives")
    max_predictions: int | None = setting(None, "at most this many masked tokens per example (default: "
                                                "masking rate x length, plus one)", low=1, high=512, group="objectives")
    nsp_weight: float = setting(1.0, "weight of the next-sentence loss beside the masked-LM loss",
                                label="NSP loss weight", low=0.0, high=10.0, group="objectives")
    random_b: str = setting("same-source", "where next-sentence prediction's random B comes from: same-source, "
                                           "another document of A's source (in a mix of sources, B's style then "
                                           "says nothing about whether it follows A; a source without another "
                                           "document draws from any), or any, another document of the whole corpus "
                                           "(the paper's draw; on one source the two are the same)",
                            label="random B from", choices=RANDOM_B, group="objectives")

    # how it starts
    qk_scale: float = setting(1.0, "std of the query and key weights at the start, in multiples of 0.02",
                              label="query/key init scale", low=0.1, high=20.0, group="start")
    mimetic: bool = setting(False, "start each layer's key weights equal to its query weights (mimetic init)",
                            group="start")
    sinusoid_positions: bool = setting(False, "start the position table at Vaswani et al.'s sinusoids", group="start")
    position_scale: float = setting(4.0, "size of the starting position code (sinusoids, local heads), in "
                                         "multiples of 0.02", label="position scale", low=0.1, high=50.0, group="start")
    local_heads: int = setting(2, "start this many heads of every layer as previous- and next-token heads "
                                  "(0: BERT's random init)", label="local heads", low=0, high=64, group="start")
    global_cls: bool = setting(False, "start [CLS] reading the whole pair in the local heads (the next-sentence "
                                      "head reads [CLS]; a local head would show it its neighbour only)",
                               label="global [CLS]", group="start")
    unigram_bias: bool = setting(True, "start the masked-LM bias at the log frequencies of the training tokens",
                                 group="start")

    # what it records and where
    probe: str = setting("the [MASK] of the united states is the head of state.",
                         "a sentence with [MASK] whose guesses are shown at every validation", group="records")

    # where it computes
    data_workers: int | None = setting(None, "processes that build batches ahead of the training step (default: "
                                             "none on a CPU, whose cores the step needs; up to 8 on a GPU)",
                                       label="data workers", low=0, high=64, group="machine")
    def validate(self) -> None:
        super().validate()
        if self.init_from and self.tokenizer:
            raise ValueError("a run that starts from a checkpoint uses that checkpoint's tokenizer: leave tokenizer "
                             "out")
        heads = PRESETS[self.preset].num_attention_heads
        if self.local_heads > heads and not self.init_from:
            raise ValueError(f"local heads must be at most the {heads} heads of a {self.preset} layer")
        if self.local_heads and self.sinusoid_positions:
            raise ValueError("local heads bring their own position code: turn sinusoid_positions off")
        if self.global_cls and not self.local_heads:
            raise ValueError("global [CLS] changes how local heads start: it needs local_heads of at least 1")
        if self.short_seq_len > self.seq_len:
            raise ValueError(f"short sequence length {self.short_seq_len} must not exceed the sequence length "
                             f"{self.seq_len}")
        if self.mask_prob_start is not None and self.minutes is not None:
            raise ValueError("a falling masking rate needs the run's steps to fall over: give steps, not minutes")

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> "TrainConfig":
        """The config stored beside a checkpoint; settings it lacks were BERT's (it predates them), not today's
        defaults: a resumed run goes on with the recipe it was trained with."""
        return cls.from_dict({**BERT_RECIPE, **data})



@dataclass(frozen=True, kw_only=True)
class FinetuneConfig(RunConfig):
    """Everything that defines a fine-tuning run (Devlin et al. 2019, §4): a checkpoint's encoder and a new
    classifier trained on labelled sentences, with the small-model recipe of Turc et al. 2019 (a few epochs, AdamW,
    warm-up then linear decay, learning rates of 3e-4 to 3e-5)."""

    # the model
    model: str = setting("checkpoints/mini-english", "the pre-trained checkpoint folder (or hub id) whose encoder "
                                                    "starts the run; a random start copies its architecture and "
                                                    "vocabulary", group="model")
    dropout: float | None = setting(0.1, "dropout on the hidden states, the attention and the classifier's input "
                                         "(BERT: 0.1)", low=0.0, high=0.9, group="model")

    # the text it reads
    task: str = setting("movie-reviews", "movie-reviews (offline; amazon-reviews, nyt-editorials and tweets too), a "
                                         "GLUE task where the hub is reachable (sst2, cola, mrpc, rte), or a "
                                         "labelled .csv, .tsv or .jsonl file (text, text_b, label)", group="data")
    train_examples: int | None = setting(None, "train on the first N labelled examples of the fixed shuffle "
                                               "(default: all)", label="labelled examples", low=1,
                                         high=1_000_000, group="data")
    max_seq_len: int = setting(128, "tokens per example; longer examples are cut", label="sequence length", low=8,
                               high=512, group="data")
    outside: str | None = setting("amazon-reviews", "a task from another domain, scored at the end (the classes "
                                                    "must match)", label="outside task", group="data")

    # how it starts
    init: str = setting("pretrained", "pretrained: the checkpoint's weights, all fine-tuned; random: the same "
                                      "architecture from random weights (the baseline); frozen: the checkpoint's "
                                      "encoder kept fixed, only the classifier learns (feature-based, §5.3)",
                        choices=INITS, group="start")
    reinit_pooler: bool = setting(False, "start the pooler's dense layer from random weights instead of the "
                                         "checkpoint's, which pre-training shaped for next-sentence prediction "
                                         "(Zhang et al. 2021, \"Revisiting Few-sample BERT Fine-tuning\")",
                                  label="re-initialise the pooler", group="start")

    # how long it trains
    epochs: float = setting(3.0, "passes over the training examples (sets the steps unless --steps is given)",
                            low=0.01, high=100.0, group="length")
    steps: int | None = setting(None, "optimizer steps in total (default: --epochs over the training examples)",
                                low=1, high=10_000_000, group="length")

    # the optimizer and its schedule
    lr: float = setting(3e-4, "peak learning rate (3e-4: both starts' best on the movie-review validation split "
                              "with all labels, see benchmarks/README.md)", label="learning rate", low=1e-6,
                        high=1e-2, group="optimizer")
    beta2: float = setting(0.999, "AdamW's second-moment decay", low=0.5, high=0.99999, group="optimizer")
    adam_eps: float = setting(1e-6, "AdamW's epsilon", label="Adam epsilon", low=1e-20, high=1e-3, group="optimizer")
    layer_decay: float = setting(1.0, "layer-wise learning-rate decay: the classifier and pooler learn at the "
                                      "learning rate, encoder layer l of L (0 the lowest) at lr x decay^(L-l), the "
                                      "embeddings at lr x decay^(L+1) (ELECTRA, Clark et al. 2020; 1: off)",
                                 label="layer-wise lr decay", low=0.05, high=1.0, group="optimizer")

    # what it records and where
    out: str = setting("checkpoints/finetuned", "checkpoint folder to write", group="records")
    eval_every: int = setting(50, "validate every N steps", low=1, group="records")
    log_every: int = setting(10, "report training metrics every N steps", low=1, group="records")
    save_every: int = setting(10**9, "write a checkpoint every N steps (default: at the end only)", low=1,
                              group="records")

    @property
    def outside_task(self) -> str | None:
        """The task from another domain the run is scored on at its end, if any ("none", or the run's own task:
        none)."""
        name = self.outside
        return None if not name or name.lower() == "none" or name == self.task else name

    def validate(self) -> None:
        super().validate()
        if self.reinit_pooler and self.init == "frozen":
            raise ValueError("a frozen encoder keeps its pooler fixed: re-initialising it would leave it random")


# BERT's recipe, which every run used before the plateau levers (and the same-source random B) existed: a stored
# config without these settings was trained with these values, so a resumed old run keeps them (`from_stored`).
BERT_RECIPE: dict[str, Any] = {"schedule": "linear", "mask_prob": MASK_PROB, "dropout": None, "adam_eps": 1e-6,
                               "qk_scale": 1.0, "mimetic": False, "sinusoid_positions": False, "position_scale": 1.0,
                               "local_heads": 0, "unigram_bias": False, "nsp_weight": 1.0, "short_seq_steps": 0,
                               "random_b": "any", "mask_replace": REPLACE_MASK}
# The paper's pre-training recipe (Devlin et al. 2019, §3.1 and Appendix A.2): BERT_RECIPE, and Adam's beta2 of 0.999.
# Its learning rate and length (PAPER_SCALE) were BERT-Base's: a run's own settings choose those.
PAPER_RECIPE: dict[str, Any] = {**BERT_RECIPE, "beta2": 0.999}
PAPER_SCALE: dict[str, Any] = {"lr": 1e-4, "steps": 1_000_000, "batch_size": 256, "warmup_steps": 10_000}
# A run's recipe by name: what it changes of TrainConfig's defaults. "fast" is TrainConfig's own (the plateau levers,
# measured in benchmarks/README.md, "Learning speed"); "paper" is BERT's.
RECIPES: dict[str, dict[str, Any]] = {"fast": {}, "paper": PAPER_RECIPE}


def recipe_changes(config: TrainConfig) -> list[tuple[str, Any, Any]]:
    """How a pre-training config's recipe differs from the paper's: (setting, its value, the paper's value), for each
    setting of PAPER_RECIPE it changes; the position scale only where it shapes a starting position code."""
    paper = TrainConfig.from_dict({**asdict(config), **PAPER_RECIPE})
    changes = [(name, getattr(config, name), getattr(paper, name)) for name in PAPER_RECIPE
               if getattr(config, name) != getattr(paper, name)]
    if not (config.local_heads or config.sinusoid_positions):
        changes = [change for change in changes if change[0] != "position_scale"]
    return changes


def recipe_of(config: TrainConfig) -> str | None:
    """The name of the recipe (RECIPES) whose settings a config has, or None where its settings mix them."""
    return next((name for name, values in RECIPES.items()
                 if all(getattr(config, key) == value for key, value in {**_recipe_defaults(), **values}.items())),
                None)


def _recipe_defaults() -> dict[str, Any]:
    """TrainConfig's defaults of the settings any recipe changes."""
    return {name: default(name) for name in PAPER_RECIPE}

def label(name: str, config: type[RunConfig] | None = None) -> str:
    """How a setting of `config` (default: TrainConfig) is named to people: its label, else its field name."""
    return _field(name, config).metadata["label"] or name


def bounds(name: str, config: type[RunConfig] | None = None) -> tuple[Any, Any]:
    """(low, high) of a numeric setting of `config` (default: TrainConfig); None where it has no such bound."""
    meta = _field(name, config).metadata
    return meta["low"], meta["high"]


def choices(name: str, config: type[RunConfig] | None = None) -> tuple | None:
    """The allowed values of a setting with choices, or None where any value of its type within bounds is."""
    meta = _field(name, config).metadata
    return None if meta["choices"] is None else tuple(meta["choices"])


def kind(name: str, config: type[RunConfig] | None = None) -> type:
    """A setting's type: int, float, bool or str."""
    return _kind(_field(name, config))


def default(name: str, config: type[RunConfig] | None = None) -> Any:
    """A setting's default in `config` (default: TrainConfig)."""
    return _field(name, config).default


def check_setting(name: str, value: Any, cap: Any = None) -> None:
    """Raise ValueError where a value of the setting `name` of TrainConfig is one no run can use, or past `cap` (an
    app's tighter bound or fewer choices, which the message says hold "on this machine")."""
    _check(_field(name), value, cap, on_machine=cap is not None)


def add_flags(parser: argparse.ArgumentParser, config: type[RunConfig] = TrainConfig) -> None:
    """One --flag per field of `config`, with its help text and type, listed by concern (GROUPS) in --help; flat
    flags all the same; absent flags parse as None ("not given")."""
    sections = {group: parser.add_argument_group(title) for group, title in GROUPS.items()
                if any(f.metadata["group"] == group for f in fields(config))}
    for f in fields(config):
        flag, kind = "--" + f.name.replace("_", "-"), _kind(f)
        text, section = f.metadata["help"].replace("%", "%%"), sections[f.metadata["group"]]  # argparse formats %
        if kind is bool:
            section.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            section.add_argument(flag, type=kind, default=None, help=text, choices=f.metadata["choices"],
                                 metavar=f.name.upper() if not f.metadata["choices"] else None)


def given_flags(args: argparse.Namespace, config: type[RunConfig] = TrainConfig) -> dict[str, Any]:
    """The `config` values given on the command line (flags left out are not overrides)."""
    return {f.name: getattr(args, f.name) for f in fields(config) if getattr(args, f.name, None) is not None}


def _field(name: str, config: type[RunConfig] | None = None):
    config = config or TrainConfig
    try:
        return next(f for f in fields(config) if f.name == name)
    except StopIteration:
        raise KeyError(f"{config.__name__} has no setting {name!r}") from None


def _kind(f) -> type:
    """The Python type of a field, from its annotation ("int | None" -> int)."""
    return {"int": int, "float": float, "bool": bool, "str": str}[str(f.type).split("|")[0].strip()]


def _check(f, value: Any, tighter: Any, on_machine: bool) -> None:
    meta, kind, name = f.metadata, _kind(f), f.metadata["label"] or f.name
    if value is None and "None" in str(f.type):  # optional: None means "not set" (the default, or the preset's)
        return
    where = " on this machine" if on_machine and tighter is not None else ""
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if kind in (bool, str) and not isinstance(value, kind):
        raise ValueError(f"{name} must be {'true or false' if kind is bool else 'text'}, got {value!r}")
    if meta["choices"] is not None:
        allowed = tuple(tighter) if tighter is not None else meta["choices"]
        if value not in meta["choices"]:
            raise ValueError(f"unknown {name} {value!r}: choose one of {', '.join(meta['choices'])}")
        if value not in allowed:
            raise ValueError(f"{name} {value!r} is not available{where}: choose {', '.join(allowed)}")
    if kind in (int, float):
        low, high = meta["low"], tighter if tighter is not None else meta["high"]
        if (low is not None and value < low) or (high is not None and value > high):
            shown = f"between {_number(low)} and {_number(high)}" if high is not None else f"at least {_number(low)}"
            raise ValueError(f"{name} must be {shown}{where}, got {_number(value)}")


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"
