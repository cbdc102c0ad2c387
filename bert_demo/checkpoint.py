"""Checkpoints in Hugging Face format: config.json, model.safetensors (or its shards and their index) and the
tokenizer files.

A folder we write loads unchanged in `transformers` (`BertForPreTraining.from_pretrained`, `pipeline("fill-mask")`),
and folders written by `transformers` (BertForPreTraining, BertForMaskedLM or BertModel) load here.
Only JSON and safetensors are ever read: never pickle, so a checkpoint cannot run code on this machine.
Writes go to a temporary folder that is renamed into place, so a crash never leaves half a model.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import BertTokenizerFast

from bert_demo.config import (  # noqa: F401
    CONFIG_NAME,
    INDEX_NAME,
    METADATA_NAME,
    SHARD_GLOB,
    WEIGHTS_NAME,
    WEIGHTS_PATTERNS,
    BertConfig,
    has_weights,
    hub_cache,
    hub_reachable,
    read_config,
    read_index,
    read_metadata,
    weights_files,
)
from bert_demo.model import BertForPreTraining, BertForSequenceClassification
from bert_demo.processes import alive
from bert_demo.tokenizer import load_tokenizer, vocabulary

TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")  # stored once, under their owners
MAX_HUB_BYTES = 1_000_000_000  # the files of one hub model; BERT-large's safetensors are 1.3 GB, BERT-base 440 MB
MAX_HUB_MODELS = 5  # hub models kept in a cache folder of ours (`config.hub_cache`)
HUB_TIMEOUT_S = 10.0  # the hub's first answer: a network that drops packets must not hold a visitor for minutes
HUB_FILES = ["config.json", *WEIGHTS_PATTERNS, "tokenizer.json", "tokenizer_config.json", "vocab.txt",
             "special_tokens_map.json"]


class MissingWeightsWarning(UserWarning):
    """A checkpoint lacked some of our weights (e.g. a BertModel has no MLM/NSP heads): those stay random."""


def save_pretrained(
    model: BertForPreTraining,
    tokenizer: BertTokenizerFast,
    path: str | Path,
    metadata: dict | None = None,
    extra_files: dict[str, dict[str, torch.Tensor]] | None = None,
    keep: tuple[str, ...] = (),
) -> Path:
    """Write the model, its tokenizer, optional JSON metadata and optional extra safetensors files (such as the
    optimizer state; a name may hold a subfolder) to `path`, atomically; return the path. The subfolders named in
    `keep` (a run's timeline) are carried over from the folder being replaced, as hard links where possible."""
    path = Path(path)
    try:
        with new_folder(path) as tmp:
            _write_folder(model, tokenizer, tmp, metadata)
            for name, tensors in (extra_files or {}).items():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                save_file(tensors, str(tmp / name))
            for folder in keep:  # after the new files: a link is never written through to the old folder's file
                _carry_over(path / folder, tmp / folder)
    except SafetensorError as exc:  # safetensors reports a full disk this way, not as an OSError
        raise OSError(f"could not write the weights to {path}: {exc}") from exc
    return path


@contextmanager
def new_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside `path` to write a checkpoint into: on leaving the block it is flushed to disk and
    replaces `path` whole; on an error it is removed. So a crash never leaves half a model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(path)
    tmp = _temp_folder(path)
    try:
        yield tmp
        _seal_files(tmp)
        _replace_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _carry_over(source: Path, target: Path) -> None:
    """Hard-link (else copy) the files of `source` into `target`: no data is copied, and the old folder stays
    whole until the new one replaces it."""
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and not file.is_symlink() and not (target / file.name).exists():  # the new one wins
            try:
                os.link(file, target / file.name)
            except OSError:  # a file system without hard links
                shutil.copy2(file, target / file.name)


def _write_folder(model: BertForPreTraining, tokenizer: BertTokenizerFast, folder: Path, metadata: dict | None) -> None:
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()
             if k not in TIED_KEYS}
    write_weights(state, folder)
    config = {**model.config.to_hf_dict(model.config.architecture), "tie_word_embeddings": True}
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save_pretrained(str(folder))
    (folder / "vocab.txt").write_text("".join(token + "\n" for token in vocabulary(tokenizer)), encoding="utf-8")
    if metadata is not None:
        (folder / METADATA_NAME).write_text(json.dumps(metadata, indent=2, default=str) + "\n")


# what follows ".{name}" in the names of `_replace_folder`'s set-aside folder (".{name}.{pid}.old") and of
# `_temp_folder` (".{name}.{pid}.{random}.tmp", random without dots): read from the right, so the name and the
# pid are never ambiguous (".run.5.123.old" is run.5's, written by process 123, never run's by process 5)
_LEFTOVER = r"\.(\d+)(?:\.old|\.[a-z0-9_]+\.tmp)"


def check_writable(path: str | Path) -> None:
    """Raise ValueError now, not after hours of training, if checkpoints cannot be written to `path`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"cannot write checkpoints to {path}: it is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(_temp_folder(path))
    except OSError as exc:
        raise ValueError(f"cannot write checkpoints to {path}: {exc.strerror or exc}") from None


def recover_folder(path: str | Path) -> None:
    """Repair what a killed writer left beside `path`: if it died between the two renames of `_replace_folder`,
    put its set-aside (complete) checkpoint back; delete its half-written temporary folders. Folders of writers
    that are still running are left alone."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    ours = re.compile(rf"\.{re.escape(path.name)}{_LEFTOVER}")
    dead = [p for p in path.parent.iterdir() if (match := ours.fullmatch(p.name)) and not alive(int(match[1]))]
    complete = [p for p in dead if p.suffix == ".old" and (p / CONFIG_NAME).is_file() and has_weights(p)]
    if complete and not path.exists():
        newest = max(complete, key=lambda p: p.stat().st_mtime)
        os.replace(newest, path)
        dead.remove(newest)
    for leftover in dead:
        shutil.rmtree(leftover, ignore_errors=True)


def recover_leftovers(root: str | Path) -> None:
    """`recover_folder` for every checkpoint in `root` that has leftovers: those of a writer killed mid-save
    (the app stopped by a crash or `kill`) would otherwise stay until the next save to the same name."""
    root = Path(root)
    if not root.is_dir():
        return
    names = {match[1] for p in root.iterdir() if (match := re.fullmatch(rf"\.(.+){_LEFTOVER}", p.name))}
    for name in sorted(names):
        recover_folder(root / name)


def _temp_folder(path: Path) -> Path:
    """A new private folder beside `path`, named after it and this process (see `recover_folder`)."""
    return Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent))


def _seal_files(folder: Path) -> None:
    """Give the folder the usual permissions (mkdtemp makes it private) and flush every file to disk before the
    folder is renamed into place."""
    folder.chmod(0o755)
    for file in folder.iterdir():
        if file.is_dir():  # a subfolder such as the timeline
            _seal_files(file)
            continue
        file.chmod(0o644)
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def _replace_folder(new: Path, target: Path) -> None:
    """Move `new` to `target`; an existing target is set aside first and deleted only once `new` is in place."""
    if not target.exists():
        os.replace(new, target)
        return
    old = target.with_name(f".{target.name}.{os.getpid()}.old")
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


class Pretrained(NamedTuple):
    """A loaded checkpoint: the model in eval mode, its tokenizer, and the weights the folder did not have."""

    model: BertForPreTraining
    tokenizer: BertTokenizerFast
    missing_keys: list[str]


def load_checkpoint(path_or_hub_id: str | Path, device: str | torch.device | None = None) -> Pretrained:
    """Load a Hugging Face-format BERT folder (or hub id, where the hub is reachable) in eval mode, and say which
    of our weights it lacked (a BertModel has no pre-training heads: those stay random, with a warning)."""
    folder = resolve_folder(path_or_hub_id)
    config = read_config(folder)
    if config.labels:
        raise ValueError(f"{path_or_hub_id} is a fine-tuned classifier ({', '.join(config.labels)}): it has no "
                         "masked-LM or next-sentence head to answer with; classify with it instead")
    tokenizer = _tokenizer_for(folder, config)
    model = BertForPreTraining(config)
    missing = load_weights(model, read_weights(folder))
    if missing:
        warnings.warn(f"{folder} has no weights for {_summarise(missing)}: they are randomly initialised",
                      MissingWeightsWarning, stacklevel=2)
    return Pretrained(model=model.to(device or "cpu").eval(), tokenizer=tokenizer, missing_keys=missing)


def load_pretrained(path_or_hub_id: str | Path, device: str | torch.device | None = None
                    ) -> tuple[BertForPreTraining, BertTokenizerFast]:
    """The model and tokenizer of `load_checkpoint`, for callers that need nothing else."""
    model, tokenizer, _ = load_checkpoint(path_or_hub_id, device)
    return model, tokenizer


def _tokenizer_for(folder: Path, config: BertConfig) -> BertTokenizerFast:
    """A checkpoint's tokenizer, refused where it has more tokens than the model has rows for."""
    tokenizer = load_tokenizer(folder)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model only {config.vocab_size}")
    return tokenizer


class Classifier(NamedTuple):
    model: BertForSequenceClassification
    tokenizer: BertTokenizerFast
    dropped: list[str]  # the checkpoint's weights a classifier does not use: the pre-training heads
    new: list[str]  # the classifier's weights that start random: its output layer when its classes are new


def load_classifier(path_or_hub_id: str | Path, labels: Sequence[str] | None = None,
                    device: str | torch.device | None = None) -> Classifier:
    """A sentence(-pair) classifier from a Hugging Face-format BERT folder, in eval mode.

    Without `labels`, the folder must hold a fine-tuned classifier, loaded with its own classes. With `labels`, the
    encoder and pooler of any BERT checkpoint (a pre-trained one, say) start a classifier over those classes: the
    masked-LM and next-sentence heads are dropped (`dropped`) and the output layer starts new (`new`), as
    fine-tuning begins in the paper (§4)."""
    folder = resolve_folder(path_or_hub_id)
    saved = read_config(folder)
    if labels is None and not saved.labels:
        raise ValueError(f"{path_or_hub_id} has no classifier: fine-tune it on a task first")
    config = saved if labels is None else replace(saved, labels=tuple(labels))
    tokenizer = _tokenizer_for(folder, config)
    model = BertForSequenceClassification(config)
    state = read_weights(folder)
    unused = ("cls.",) if config.labels == saved.labels else ("cls.", "classifier.")  # new classes: a new layer
    dropped = sorted(key for key in state if key.startswith(unused))
    new = load_weights(model, {k: v for k, v in state.items() if k not in dropped})
    if set(new) - {"classifier.weight", "classifier.bias"}:
        warnings.warn(f"{folder} has no weights for {_summarise(new)}: they are randomly initialised",
                      MissingWeightsWarning, stacklevel=2)
    return Classifier(model=model.to(device or "cpu").eval(), tokenizer=tokenizer, dropped=dropped, new=new)


def resolve_folder(path_or_hub_id: str | Path) -> Path:
    """A local folder as is; anything else is taken as a hub id and downloaded (see `download`).

    Reading never repairs: what a writer killed mid-save left behind is put right by the next save to that folder
    (`save_pretrained`), or by `recover_folder` / `recover_leftovers`, which the app runs when a run starts.
    """
    folder = Path(path_or_hub_id).expanduser()
    if folder.is_dir():
        return folder
    name = str(path_or_hub_id)
    if folder.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1 or not name.strip():
        raise ValueError(f"{name!r} is not a checkpoint folder")
    return download(name)


def download(hub_id: str, max_bytes: int = MAX_HUB_BYTES, cache_dir: str | Path | None = None,
             check: Callable[[BertConfig], None] | None = None) -> Path:
    """A hub model's files (safetensors and JSON only), after checking its size and config before the weights.

    The repository's listing gives the weights' size, refused past `max_bytes`; config.json comes first and must
    describe a BERT within our limits (`read_config`), and pass `check` (which raises to refuse it). Only then are
    the weights fetched. `cache_dir` (default: `config.hub_cache()`) keeps at most MAX_HUB_MODELS models, the least
    recently used removed first (the hub's own cache is left as the hub keeps it).
    """
    if not hub_reachable():
        raise ValueError(f"could not download {hub_id!r}: the Hugging Face Hub is not reachable from this machine. "
                         "Use a local checkpoint folder instead.")
    try:
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download

        cache = str(cache_dir or hub_cache() or "") or None
        info = HfApi().model_info(hub_id, files_metadata=True, timeout=HUB_TIMEOUT_S)
        sizes = {f.rfilename: f.size or 0 for f in info.siblings or []}
        config_dir = Path(hf_hub_download(hub_id, CONFIG_NAME, cache_dir=cache)).parent
    except Exception as exc:  # the hub client raises many types: offline, unknown repo, gated, ...
        raise ValueError(
            f"could not download {hub_id!r} from the Hugging Face Hub ({type(exc).__name__}). "
            "The hub may be unreachable from this machine: use a local checkpoint folder instead."
        ) from None
    if WEIGHTS_NAME not in sizes and INDEX_NAME not in sizes:
        raise ValueError(f"{hub_id!r} has no {WEIGHTS_NAME} on the hub (only safetensors weights are loaded)")
    total = sum(size for name, size in sizes.items() if any(fnmatch(name, pattern) for pattern in HUB_FILES))
    if total > max_bytes:
        raise ValueError(f"{hub_id!r} is {total / 2**20:,.0f} MB; at most {max_bytes / 2**20:,.0f} MB are downloaded")
    config = read_config(config_dir)  # a hostile or foreign config is refused before the weights are fetched
    if check is not None:
        check(config)
    try:
        folder = Path(snapshot_download(hub_id, allow_patterns=HUB_FILES, cache_dir=cache))
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"could not download {hub_id!r} from the Hugging Face Hub ({type(exc).__name__})") from None
    if cache:
        os.utime(folder.parents[1])  # models--owner--name: used now, so pruned last
        _prune_hub_cache(Path(cache), keep=MAX_HUB_MODELS)
    return folder


def _prune_hub_cache(cache: Path, keep: int) -> None:
    """Delete the least recently used models beyond the newest `keep` from a hub cache folder (`download` marks a
    model used each time it is asked for, cached or not)."""
    models = sorted(cache.glob("models--*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in models[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A checkpoint folder's weights (safetensors only) under our key names."""
    return normalise_state_dict(stored_weights(folder))


def stored_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every weight of a folder under the names it was stored with, from model.safetensors or from the shards its
    index names (each weight exactly where the index says)."""
    files = weights_files(folder)
    if not files:
        pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" ({', '.join(pickled)} is a pickle, which we never load: convert it to safetensors)" if pickled else ""
        raise ValueError(f"{folder} has no {WEIGHTS_NAME}{hint}")
    state = {}
    for file in files:
        if not file.is_file():
            raise ValueError(f"{folder}'s {INDEX_NAME} names {file.name}, which is not there")
        try:
            state |= {(name, file.name): tensor for name, tensor in load_file(str(file)).items()}
        except (SafetensorError, OSError, ValueError) as exc:
            raise ValueError(f"{file} is not a readable safetensors file: {exc}") from None
    if len(files) > 1 or files[0].name != WEIGHTS_NAME:
        _check_index(folder, set(state))
    return {name: tensor for (name, _), tensor in state.items()}


def _check_index(folder: Path, found: set[tuple[str, str]]) -> None:
    """Each weight in the shards is where the index says, once: a shard that holds more or less than its index
    says is a damaged or mixed-up checkpoint, not one to guess from."""
    indexed = set(read_index(folder).items())
    if found != indexed:
        odd = sorted(f"{name} in {file}" for name, file in found ^ indexed)
        raise ValueError(f"{folder}'s shards do not hold what {INDEX_NAME} says: {_summarise(odd)}")


def write_weights(state: dict[str, torch.Tensor], folder: Path, max_shard_bytes: int | None = None) -> list[Path]:
    """Write `state` as model.safetensors, or where it is larger than `max_shard_bytes`, as shards of at most that
    size (a single tensor larger than it gets a shard of its own) with their index, in Hugging Face's layout; any
    weights files the folder held before are removed. Returns the files written."""
    sizes = {name: tensor.numel() * tensor.element_size() for name, tensor in state.items()}
    shards: list[list[str]] = [[]]
    filled = 0  # bytes in the last shard
    for name in state:
        if shards[-1] and max_shard_bytes and filled + sizes[name] > max_shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(name)
        filled += sizes[name]
    for old in [file for pattern in WEIGHTS_PATTERNS for file in folder.glob(pattern)]:
        old.unlink()
    if len(shards) == 1:
        save_file(state, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
        return [folder / WEIGHTS_NAME]
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    for name, keys in zip(names, shards):
        save_file({k: state[k] for k in keys}, str(folder / name), metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(sizes.values())},
             "weight_map": {key: name for name, keys in zip(names, shards) for key in keys}}
    (folder / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return [folder / name for name in names] + [folder / INDEX_NAME]


def normalise_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map the key spellings of BertModel, BertForMaskedLM and old TF-converted checkpoints onto ours."""
    out = {}
    for key, tensor in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if key.startswith(("embeddings.", "encoder.", "pooler.")):
            key = "bert." + key  # a bare BertModel
        if key.endswith("position_ids") or key in TIED_KEYS:
            continue  # a buffer, or copies of tensors stored elsewhere
        out[key] = tensor
    return out


def load_weights(model: BertForPreTraining, state: dict[str, torch.Tensor]) -> list[str]:
    """Copy `state` into `model` after checking every shape; return our keys the checkpoint did not have."""
    expected = {k: v for k, v in model.state_dict().items() if k not in TIED_KEYS}
    for key, tensor in state.items():
        if key in expected and tensor.shape != expected[key].shape:
            raise ValueError(f"weight {key} has shape {tuple(tensor.shape)}, the config implies "
                             f"{tuple(expected[key].shape)}")
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        warnings.warn(f"ignoring weights this model does not use: {_summarise(unexpected)}", stacklevel=3)
    usable = {k: v.float() for k, v in state.items() if k in expected}
    model.load_state_dict(usable, strict=False)
    return sorted(set(expected) - set(usable))


def _summarise(keys: list[str], limit: int = 6) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
