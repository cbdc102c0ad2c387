"""Model folders on disk, as the app reads them: which folders are models, whom a run trained here is private to,
the zip a visitor downloads, the card the Model tab shows, and the examples the app shows for a shipped model.

A folder name from a visitor is never used as a path unchecked: `FOLDER` is what a model folder may be called.
A run's training record (`bert_demo.json`) keeps, for the app, whom the run is private to and the paths it was
trained from (an upload's temporary copy, its own folder); its zip carries the record without them
(`public_record`): nothing a visitor downloads names a place on the server or another visitor.
"""
from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bert_demo.config import CONFIG_NAME, METADATA_NAME, OPTIMIZER_NAME, read_config, read_metadata, weights_files
from bert_demo.inspection.curves import START_NAMES

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints"  # the models this project ships, beside the package
FOLDER = re.compile(r"[A-Za-z0-9][\w.-]{0,99}", re.ASCII)  # no "/", no leading "."
MODEL_CARD = "README.md"
EXAMPLES_NAME = "examples.json"  # the examples the app shows for a model, with the claims their labels make
MAX_EXAMPLES_BYTES = 100_000
MAX_CARD_CHARS = 50_000  # longer cards are cut in the Model tab, and say so
MAX_PICTURE_BYTES = 200_000  # an SVG inlined into the Model tab
MAX_ZIPS = 10  # checkpoint zips kept in the temp folder for download; older ones are deleted
NOT_ZIPPED = (OPTIMIZER_NAME,)  # needed to resume, not to use the model
PRIVATE_KEYS = ("visible_to",)  # what a run's record keeps for the app alone: the visitor it is private to
_CARD_PICTURE = re.compile(r"!\[([^\]\n]*)\]\(([A-Za-z0-9_-][\w.-]*\.svg)\)")  # a bare file name, no path
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)  # a Hugging Face card's YAML metadata


def model_folders(root: Path) -> list[Path]:
    """The checkpoint folders directly inside `root` (names we accept, no links out of it)."""
    if not root.is_dir():
        return []
    inside = root.resolve()
    return sorted(f for f in root.iterdir() if f.is_dir() and FOLDER.fullmatch(f.name)
                  and (f / CONFIG_NAME).is_file() and f.resolve().parent == inside)


def visible_to(folder: Path) -> str | None:
    """The browser session a run trained here is private to (None: everyone). Asked on every request that names a
    run, so the answer is kept while the run's training record is unchanged: it holds the whole metrics history."""
    record = folder / METADATA_NAME
    return _visible_to(str(record), record.stat().st_mtime_ns if record.is_file() else 0)


@functools.lru_cache(maxsize=256)
def _visible_to(record: str, mtime_ns: int) -> str | None:
    return read_metadata(Path(record).parent).get("visible_to") if mtime_ns else None


def training_words(folder: Path) -> int | None:
    """The words of the training documents a model folder's pre-training run read, as its record counted them (that
    run's own: a model continued from another read that one's too); None where it counted none (a run from before
    the count, a fine-tuned classifier, no record)."""
    words = read_metadata(folder).get("training_words") if (folder / METADATA_NAME).is_file() else None
    return words if isinstance(words, int) and not isinstance(words, bool) and words > 0 else None


def describe(folder: Path) -> str | None:
    """A fine-tuned run's label in the model lists, what tells its runs apart (the folder name, cut to fit a list,
    hid that): "mini-english → movie-reviews · 1,000 labels · pre-trained · 11-26 04:56"; None for other models."""
    record = folder / METADATA_NAME
    return _description(str(record), record.stat().st_mtime_ns if record.is_file() else 0)


@functools.lru_cache(maxsize=256)
def _description(record: str, mtime_ns: int) -> str | None:
    config = (read_metadata(Path(record).parent).get("train_config") or {}) if mtime_ns else {}
    if "task" not in config:
        return None
    start = short_name(config["model"])
    task = config["task"] if "/" not in str(config["task"]) else "your labelled file"
    labels = f"{config['train_examples']:,} labels" if config.get("train_examples") else "all labels"
    init = START_NAMES.get(config.get("init"), config.get("init"))
    day, clock = Path(record).parent.name.rsplit("-", 2)[-2:] if "-" in Path(record).parent.name else ("", "")
    when = f" · {day[4:6]}-{day[6:8]} {clock[:2]}:{clock[2:4]}" if day.isdigit() and clock.isdigit() else ""
    return f"{start} → {task} · {labels} · {init}{when}"


def sees(viewer: str | None, private_to: str | None) -> bool:
    """Whether a visitor may see a run: runs are public unless private to one browser session."""
    return private_to is None or private_to == viewer


def has_classifier(folder: Path) -> bool:
    try:
        return bool(read_config(folder).labels)
    except ValueError:  # a broken folder is no classifier (the selector says why when it is chosen)
        return False


def hub_id_of(folder: str | Path) -> str | None:
    """The hub id of a folder in the hub's cache (models--owner--name/snapshots/<commit>), else None."""
    cached = next((part for part in Path(folder).parts if part.startswith("models--")), None)
    return cached.removeprefix("models--").replace("--", "/") if cached else None


def short_name(model: str | Path) -> str:
    """A model as people know it: its hub id where it is in the hub's cache, else its folder's name."""
    return hub_id_of(model) or Path(str(model)).name


def weights_time(folder: Path | None) -> float:
    """When a model's weights last changed (0 without a folder): a loaded model or a zip is stale after that."""
    if folder is None:
        return 0.0
    try:
        present = [file for file in weights_files(folder) if file.is_file()] or [folder]
    except ValueError:  # a damaged index: the folder's own time
        present = [folder]
    return max(file.stat().st_mtime for file in present)


def zip_folder(name: str, folder: Path) -> Path:
    """A zip of a saved model folder in Hugging Face format (unzip, then `from_pretrained` the folder), made once
    per version of its weights; `name` is the model's name in the selector."""
    version = f"{name.replace('/', '--')}-{weights_time(folder):.0f}"  # a new zip when the weights change
    out_dir = downloads_dir() / version
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{folder.name}.zip"
    if not target.is_file():  # each caller writes its own temporary file: two downloads may race here
        handle, tmp = tempfile.mkstemp(prefix=f".{folder.name}.", suffix=".zip.tmp", dir=out_dir)
        with os.fdopen(handle, "wb") as raw, \
                zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for file in sorted(folder.iterdir()):
                if file.name == METADATA_NAME:
                    archive.writestr(f"{folder.name}/{file.name}", json.dumps(public_record(folder), indent=2) + "\n")
                elif file.is_file() and not file.name.startswith(".") and file.name not in NOT_ZIPPED:
                    archive.write(file, f"{folder.name}/{file.name}")
        os.replace(tmp, target)
        prune_downloads(keep=MAX_ZIPS)
    return target


def public_record(folder: Path) -> dict:
    """A run's training record as it may leave the server: without `PRIVATE_KEYS`, and with every absolute path in
    its settings (a corpus list's upload, its `out`, the model it started from) cut to the name at its end."""
    record = {key: value for key, value in read_metadata(folder).items() if key not in PRIVATE_KEYS}
    if isinstance(record.get("train_config"), dict):
        record["train_config"] = {key: _without_paths(value) for key, value in record["train_config"].items()}
    return record


def _without_paths(value: object) -> object:
    """A setting with each absolute path in it (a comma-separated list may hold several) cut to its model's name
    (`short_name`): a folder's name, or a hub id."""
    if not isinstance(value, str):
        return value
    return ",".join(short_name(part) if Path(part).is_absolute() else part for part in value.split(","))


def downloads_dir() -> Path:
    """Where checkpoint zips are written for visitors to download."""
    return Path(tempfile.gettempdir()) / "bert-demo-downloads"


def prune_downloads(keep: int = MAX_ZIPS, name: str | None = None) -> None:
    """Delete old checkpoint zips: all those of model `name` (a run that was deleted), else all but the newest
    `keep` (a zip is made again when asked for)."""
    folders = sorted((p for p in downloads_dir().glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime,
                     reverse=True)
    if name is not None:
        prefix = f"{name.replace('/', '--')}-"
        doomed = [p for p in folders if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    else:
        doomed = folders[keep:]
    for folder in doomed:
        shutil.rmtree(folder, ignore_errors=True)


def card_text(path: Path) -> str:
    """A model card as people read it: without the YAML metadata block a Hugging Face card opens with (Markdown
    would show it as a heading), at most MAX_CARD_CHARS long, and with its SVG pictures inlined."""
    with path.open(encoding="utf-8", errors="replace") as file:
        text = _FRONT_MATTER.sub("", file.read(2 * MAX_CARD_CHARS), count=1)
    if len(text) > MAX_CARD_CHARS:
        text = text[:MAX_CARD_CHARS] + f"\n\n*(The card is cut here: it is longer than {MAX_CARD_CHARS:,} characters.)*"
    return _CARD_PICTURE.sub(lambda match: _inline_picture(match, path.parent), text)


def _inline_picture(match: re.Match, folder: Path) -> str:
    """`![alt](name.svg)` beside the card as a data URI (the page cannot fetch files from the model folder); an
    image that is missing or over MAX_PICTURE_BYTES is left as written. Only a bare file name in the folder is
    read, and an SVG in an <img> runs no script."""
    picture = folder / match[2]
    if not picture.is_file() or picture.stat().st_size > MAX_PICTURE_BYTES:
        return match[0]
    return f"![{match[1]}](data:image/svg+xml;base64,{base64.b64encode(picture.read_bytes()).decode()})"


@dataclass(frozen=True)
class Examples:
    """The examples the app shows for one model, from `examples.json` beside its weights, each with its label."""

    fill_mask: list[str]
    next_sentence: list[tuple[str, str, str]]  # (A, B, label)
    attention: list[tuple[str, str, int, int, str, bool, str]]  # (A, B, layer, head, view, hide [CLS]/[SEP], label)
    model: str = ""  # the checkpoint folder's name: the examples were chosen for it and are shown only with it


def read_examples(folder: Path | None) -> Examples | None:
    """A model's examples, or None when it has none (a run trained here) or its file is not what we write."""
    file = folder / EXAMPLES_NAME if folder else None
    if file is None or not file.is_file() or file.stat().st_size > MAX_EXAMPLES_BYTES:
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        return Examples(
            fill_mask=[str(e["text"]) for e in data["fill_mask"]],
            next_sentence=[(str(e["a"]), str(e["b"]), str(e["label"])) for e in data["next_sentence"]],
            attention=[(str(e["a"]), str(e["b"]), int(e["layer"]), int(e["head"]), str(e["view"]),
                        bool(e["hide_special"]), str(e["label"])) for e in data["attention"]],
            model=folder.name)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring %s: %s", file, exc)
        return None
