"""BERT's hyper-parameters, the size presets, and the limits every loaded config must respect; and the checks of a
value given from outside (`whole_number`, and `echo`, how a message repeats it), which import no torch.

The field names are Hugging Face's `BertConfig` names, so `config.json` reads and writes without a mapping
(Devlin et al. 2019, §3: L layers, hidden size H, A attention heads, feed-forward size 4H).
"""
from __future__ import annotations

import json
import math
import os
import re
import socket
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Upper bounds for any config we build or load: generous enough for BERT-large, small enough that a
# hostile config.json cannot make us allocate terabytes.
LIMITS = {
    "vocab_size": 250_000,
    "hidden_size": 4096,
    "num_hidden_layers": 48,
    "num_attention_heads": 64,
    "intermediate_size": 16384,
    "max_position_embeddings": 4096,
    "type_vocab_size": 16,
}
# The files of a checkpoint folder (Hugging Face's names, plus our training record), and the largest config.json read.
CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
# Weights split into shards (Hugging Face's format, which `from_pretrained` reads): model-00001-of-00003.safetensors
# and so on, and an index naming the shard that holds each weight. Shipped models are kept so, each file small.
INDEX_NAME = "model.safetensors.index.json"
SHARD_GLOB = "model-*-of-*.safetensors"
WEIGHTS_PATTERNS = (WEIGHTS_NAME, INDEX_NAME, SHARD_GLOB)  # every file that holds a folder's weights, in either layout
MASK_PATTERN = re.compile(r"\[\s*mask\s*\]", re.IGNORECASE)  # every way a visitor writes [MASK]: "[mask]", "[ MASK ]"
METADATA_NAME = "bert_demo.json"  # our training config and metrics, beside the Hugging Face files
OPTIMIZER_NAME = "optimizer.safetensors"  # AdamW's state, which a resumed run carries on with
HUB_CACHE_ENV = "BERT_DEMO_HUB_CACHE"  # where hub models are downloaded (see `hub_cache`)
MAX_CONFIG_BYTES = 1_000_000
MAX_PARAMETERS = 500_000_000  # all sizes at their limits would be ~11 B parameters (43 GB); BERT-large is 335 M
BERT_WORDS = "3.3 billion"  # the text the paper's BERT read: BooksCorpus (800 M words) and Wikipedia (2,500 M)
MAX_LABELS, MAX_LABEL_CHARS = 20, 100  # classes of a fine-tuned classifier, and the length of a class name
CLASSIFIER = "BertForSequenceClassification"  # the architecture named in a fine-tuned model's config.json

IS_NEXT, NOT_NEXT = 0, 1  # the next-sentence head's classes by index (its labels), in Hugging Face's order
NSP_CLASSES = ("IsNext", "NotNext")  # each class's name, by its index

@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """Sizes and regularisation of one BERT model (defaults are BERT-base)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    labels: tuple[str, ...] = ()  # a classifier's classes in index order (config.json: id2label); none before
    # fine-tuning

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_parameters(self) -> int:
        """Parameters of `BertForPreTraining` with this config (decoder tied to the word embeddings), known before
        any memory is allocated."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        embeddings = (v + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h
        layer = 4 * h * h + 2 * h * i + 9 * h + i  # Q, K, V, output; feed-forward; two LayerNorms
        heads = (h * h + h) + (h * h + 3 * h + v) + (2 * h + 2)  # pooler; MLM transform, LayerNorm, bias; NSP
        return embeddings + self.num_hidden_layers * layer + heads

    def validate(self) -> None:
        """Raise ValueError when a size is not a positive integer, exceeds LIMITS, or heads do not divide H."""
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ValueError(f"config {name}={value!r} must be an integer between 1 and {limit}")
        if self.num_parameters > MAX_PARAMETERS:
            raise ValueError(f"config describes a model of {self.num_parameters / 1e6:,.0f} M parameters; at most "
                             f"{MAX_PARAMETERS / 1e6:,.0f} M are allowed")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"config {name} must be in [0, 1)")
        if not 0.0 < self.initializer_range <= 1.0 or not 0.0 < self.layer_norm_eps < 1.0:
            raise ValueError("config initializer_range and layer_norm_eps must be small positive numbers")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"config pad_token_id {self.pad_token_id} is outside the vocabulary")
        self._validate_labels()

    def _validate_labels(self) -> None:
        labels = self.labels
        if not isinstance(labels, tuple) or not all(isinstance(label, str) for label in labels):
            raise ValueError("config labels must be a tuple of class names")
        if labels and not 2 <= len(labels) <= MAX_LABELS:
            raise ValueError(f"a classifier needs between 2 and {MAX_LABELS} classes, got {len(labels)}")
        if len(set(labels)) != len(labels) or not all(0 < len(label) <= MAX_LABEL_CHARS for label in labels):
            raise ValueError(f"class names must be different and 1 to {MAX_LABEL_CHARS} characters long")

    def to_hf_dict(self, architecture: str = "BertForPreTraining") -> dict[str, Any]:
        """The `config.json` that `transformers`' class `architecture` expects; a classifier's classes are written
        as Hugging Face's id2label and label2id, which `pipeline("text-classification")` reads."""
        values = {key: value for key, value in asdict(self).items() if key != "labels"}
        classes = {"id2label": dict(enumerate(self.labels)),
                   "label2id": {label: i for i, label in enumerate(self.labels)}} if self.labels else {}
        return {"architectures": [architecture], "model_type": "bert", "hidden_act": "gelu",
                "position_embedding_type": "absolute", **values, **classes,
                "dtype": "float32"}  # what it computes in: transformers would keep weights saved in bf16 in bf16

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> "BertConfig":
        """Read a Hugging Face BERT `config.json`; refuse other architectures instead of guessing."""
        if not isinstance(data, dict):
            raise ValueError("config.json must hold a JSON object")
        if data.get("model_type", "bert") != "bert":
            raise ValueError(f"config.json describes a {data.get('model_type')!r} model, not BERT")
        if data.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"only the GELU activation is supported, not {data.get('hidden_act')!r}")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        known = {f.name for f in fields(cls)} - {"labels"}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        if CLASSIFIER in (data.get("architectures") or []):  # other BERTs carry transformers' default LABEL_0, ...
            values["labels"] = _labels(data.get("id2label"))
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"config.json has a value of the wrong type: {exc}") from None

    @property
    def architecture(self) -> str:
        """The `transformers` class this config's model is: a classifier when it has classes."""
        return CLASSIFIER if self.labels else "BertForPreTraining"

    def with_vocab(self, vocab_size: int) -> "BertConfig":
        """A copy of this config sized for a tokenizer's vocabulary."""
        return replace(self, vocab_size=vocab_size)


def _labels(id2label: Any) -> tuple[str, ...]:
    """A classifier's class names in index order, from config.json's id2label ({"0": "negative", ...})."""
    if not isinstance(id2label, dict) or not id2label or len(id2label) > MAX_LABELS:
        raise ValueError(f"config.json's id2label must name between 2 and {MAX_LABELS} classes")
    try:
        by_index = {int(key): str(label) for key, label in id2label.items()}
    except (TypeError, ValueError):
        by_index = {}
    if sorted(by_index) != list(range(len(id2label))):
        raise ValueError("config.json's id2label must be keyed by the class indices 0, 1, ...")
    return tuple(by_index[i] for i in range(len(by_index)))


# Turc et al. 2019 ("Well-Read Students Learn Better") sizes, plus the paper's BERT-base.
# The vocabulary size is a placeholder: it comes from the tokenizer (`with_vocab`).
PRESETS: dict[str, BertConfig] = {
    "tiny": BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
    "mini": BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "small": BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048),
    "base": BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


def read_config(folder: Path) -> BertConfig:
    """Parse and validate config.json (JSON only, size-capped)."""
    file = folder / CONFIG_NAME
    if not file.is_file():
        raise ValueError(f"{folder} has no {CONFIG_NAME}: not a Hugging Face checkpoint folder")
    if file.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{file} is too large to be a model config")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file} is not valid JSON: {exc}") from None
    return BertConfig.from_hf_dict(data)


def weights_files(folder: Path) -> list[Path]:
    """The safetensors files that hold a checkpoint folder's weights: model.safetensors, else the shards its index
    names, present or not ([] when it has neither). An index is JSON only and size-capped, and must name plain
    `.safetensors` files in the folder itself: a hostile one cannot point the loader anywhere else."""
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    if (folder / INDEX_NAME).is_file():
        return [folder / name for name in sorted(set(read_index(folder).values()))]
    return []


def read_index(folder: Path) -> dict[str, str]:
    """A sharded checkpoint's map from each weight's name to the file that holds it, checked (see `weights_files`)."""
    file = folder / INDEX_NAME
    if file.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{file} is too large to be a weights index")
    try:
        weight_map = json.loads(file.read_text(encoding="utf-8")).get("weight_map")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise ValueError(f"{file} is not a weights index: {exc}") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{file} has no weight_map")
    for name in set(weight_map.values()):
        if not isinstance(name, str) or Path(name).name != name or name.startswith(".") \
                or not name.endswith(".safetensors"):
            raise ValueError(f"{file} names {name!r}: a weights file must be a .safetensors file in the folder itself")
    return weight_map


def has_weights(folder: Path) -> bool:
    """Whether a checkpoint folder holds all its weights files (a folder whose weights were moved away has not)."""
    try:
        files = weights_files(folder)
    except (OSError, ValueError):
        return False
    return bool(files) and all(file.is_file() for file in files)


def read_metadata(folder: str | Path) -> dict[str, Any]:
    """Our training metadata beside a checkpoint, or {} when there is none (e.g. an official BERT)."""
    file = Path(folder) / METADATA_NAME
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def trained_on(metadata: dict[str, Any]) -> list[str]:
    """The machines a run's metadata says it trained on, in order; a run saved before runs recorded their hardware
    names only its device type ("cpu", "cuda")."""
    hardware = metadata.get("hardware")
    if isinstance(hardware, str):
        return [hardware]
    if isinstance(hardware, list):
        return [str(machine) for machine in hardware]
    return [str(metadata["device"])] if metadata.get("step") and isinstance(metadata.get("device"), str) else []


def hub_cache(app: bool = False) -> Path | None:
    """Where hub models are downloaded: $BERT_DEMO_HUB_CACHE, else for the app a folder in the temp dir (it keeps
    the newest few: a public page must not fill a disk), else (None) the hub's own cache, as any script's."""
    chosen = os.environ.get(HUB_CACHE_ENV)
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / "bert-demo-hub" if app else None


HUB_PROBE_S, HUB_ANSWER_KEPT_S = 1.0, 60.0  # one connection tried, for a second, at most once a minute
_hub_answers: dict[tuple[str, int], tuple[float, bool]] = {}  # by the hub's address: when it was tried, and whether
_hub_lock = threading.Lock()  # it answered


def hub_reachable() -> bool:
    """Whether the Hugging Face Hub answers from here: a TCP connection to the address its clients use (huggingface.co,
    or $HF_ENDPOINT's) within HUB_PROBE_S, tried at most once a HUB_ANSWER_KEPT_S; never under $HF_HUB_OFFLINE. The
    hub's own clients retry for half a minute before they give up, logging each retry: a loader asks this first, and
    fails at once where they would."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    address = _hub_address()
    with _hub_lock:
        asked, answered = _hub_answers.get(address, (-math.inf, False))
        if time.monotonic() - asked < HUB_ANSWER_KEPT_S:
            return answered
        try:
            socket.create_connection(address, timeout=HUB_PROBE_S).close()
            answered = True
        except OSError:  # no route, no name, refused, or too slow
            answered = False
        _hub_answers[address] = (time.monotonic(), answered)
        return answered


def _hub_address() -> tuple[str, int]:
    """The host and port the hub's clients ask (huggingface_hub's endpoint, which $HF_ENDPOINT sets)."""
    try:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    except ImportError:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlsplit(endpoint)
    return url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)


ECHO_CHARS = 40  # the most of a visitor's input a message repeats: a message says what is wrong, not the input


def echo(value: object) -> str:
    """A visitor's input as a message repeats it: quoted, and cut short."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS - 1]}…"


def whole_number(value: object, name: str, low: int | None = None, high: int | None = None) -> int:
    """`value` as the whole number it is, from `low` to `high` where given, else a ValueError that names it (and the
    range). A whole float is its number (2.0 is 2: sliders and JSON callers send floats); 1.5, True, text, inf and
    nan are refused, never rounded or parsed. The one such check for the app's inputs and the example's seed."""
    span = "" if low is None else f" from {low:,} to {high:,}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and not low <= value <= high):
        raise ValueError(f"{name} must be a whole number{span}, got {echo(value)}")
    return value
