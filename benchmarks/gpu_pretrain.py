"""Pre-training on a lent GPU in one prepared call: pack here, train there for set minutes, join the parts here.

Why: the lent machine reaches no package registry and runs one command of at most 10 minutes; what travels there is
the working tree and the carried files, 64 MiB in all, and what comes back is at most 16 MiB a file. So the corpus
travels as its parsed caches, compressed (the everyday mix: 57 MB of JSON, 13 MiB as xz); the run's length is set
there from a step time measured there, so that its learning-rate schedule ends when the time does (a run cut short
stops mid-schedule, its rate still high); and the checkpoint comes back in parts, each with its SHA-256, joined and
checked here. A run that overstays its time is stopped as Ctrl-C stops it: the step finishes and it saves.

    python benchmarks/gpu_pretrain.py pack --corpus everyday                      # here: gpu-carry/ (corpus, wheels)
    python benchmarks/gpu_pretrain.py train --minutes 7 --out "$OUT/run" -- --init-from checkpoints/mini-english \\
        --corpus everyday --batch-size 256 --lr 5e-4 --warmup-steps 300          # there, with carry ["gpu-carry"]
    python benchmarks/gpu_pretrain.py join FILES_AT/run runs/mini-english-gpu     # here, from what came back

`train --minutes 2 ... --device cpu --batch-size 8` runs the same path at small scale on a CPU, as a proof of the
command before a GPU is lent (tests/test_gpu_pretrain.py runs pack, split and join).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)

from bert_demo.corpus import CACHE_VERSION, cache_folder, load_corpus, source_parts

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / "gpu-carry" / "corpus.tar.xz"
PART_BYTES = 15 * 2**20  # under the 16 MiB a returned file may hold
MANIFEST = "parts.json"
KEPT = ("model.safetensors", "optimizer.safetensors", "config.json", "bert_demo.json", "tokenizer.json",
        "tokenizer_config.json", "vocab.txt")  # what --resume and the card need; the timeline stays there
CALIBRATION_STEPS = 60
# What `bert_demo train` imports. The lent machine has torch and transformers (with tokenizers and safetensors), and no
# registry: the pure-Python ones travel as wheels, the others must be there.
CARRIED_WHEELS = ("einops", "tqdm")
NEEDED_THERE = ("torch", "transformers", "tokenizers", "safetensors")


def pack(corpus: str, archive: Path = CARRY) -> Path:
    """The parsed caches of `corpus`'s sources in one xz archive (each source fetched and parsed first if needed)."""
    folder = cache_folder()
    files = []
    for part in source_parts(corpus):
        load_corpus(part)  # fetched and parsed into the cache once
        files.append(folder / f"{part}-v{CACHE_VERSION}.json")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz") as tar:
        for file in files:
            tar.add(file, arcname=file.name)
    return archive


def pack_wheels(folder: Path = CARRY.parent / "wheels") -> None:
    """The pure-Python packages `bert_demo train` needs that the lent machine may lack, as wheels from PyPI, at the
    versions requirements.txt pins."""
    pins = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.split("==")[0].strip() in CARRIED_WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(folder), *pins], check=True)


def install_missing(folder: Path = CARRY.parent / "wheels") -> None:
    """Install the carried wheels the machine lacks; stop at once, before any work, if something else is missing."""
    absent = [name for name in NEEDED_THERE if importlib.util.find_spec(name) is None]
    if absent:
        raise SystemExit(f"this machine lacks {', '.join(absent)}, which cannot travel as a pure-Python wheel")
    missing = [name for name in CARRIED_WHEELS if importlib.util.find_spec(name) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(folder),
                        *missing], check=True)


def unpack(archive: Path, folder: Path) -> None:
    """The caches back into `folder`: plain files with plain names only, never a path outside it."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or Path(member.name).name != member.name or member.name.startswith("."):
                raise SystemExit(f"{archive}: {member.name!r} is not a cache file")
            (folder / member.name).write_bytes(tar.extractfile(member).read())


def _train(args: list[str], out: Path, steps: int, deadline: float) -> None:
    """`python -m bert_demo train` for `steps`, stopped as Ctrl-C stops it (finish the step, save) at `deadline`."""
    command = [sys.executable, "-m", "bert_demo", "train", *args, "--steps", str(steps), "--out", str(out)]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        process.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        process.wait()
    if process.returncode:
        raise SystemExit(f"training ended with exit status {process.returncode}")


def step_seconds(run: Path) -> float:
    """Seconds per step between the first and last training records of a run (preparation and the first step's
    warm-up excluded)."""
    records = [r for r in json.loads((run / "bert_demo.json").read_text())["history"] if r["kind"] == "train"]
    first, last = records[0], records[-1]
    return (last["elapsed"] - first["elapsed"]) / (last["step"] - first["step"])


def train(args: list[str], out: Path, minutes: float, margin: float = 0.1) -> int:
    """Measure a step, then train for as many steps as `minutes` hold (less `margin` for validation and saving);
    return the steps planned."""
    deadline = time.time() + 60 * minutes
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "probe"
        _train([*args, "--log-every", "20", "--eval-every", "1000000", "--save-every", "1000000"], probe,
               CALIBRATION_STEPS, deadline)
        seconds = step_seconds(probe)
    steps = int((deadline - time.time()) * (1 - margin) / seconds)
    if steps < 1:
        raise SystemExit(f"no time left to train: a step takes {seconds:.3f} s")
    print(f"a step takes {seconds * 1000:.1f} ms: training {steps:,} steps", flush=True)
    _train([*args, "--eval-every", str(max(1, steps // 5)), "--save-every", str(steps)], out, steps, deadline)
    split(out)
    return steps


def split(run: Path, part_bytes: int = PART_BYTES) -> dict:
    """Cut each file a checkpoint needs into parts of at most `part_bytes`, beside a manifest of their SHA-256."""
    manifest = {}
    for name in KEPT:
        file = run / name
        if not file.is_file():
            continue
        data, parts = file.read_bytes(), []
        for i in range(0, max(1, len(data)), part_bytes):
            parts.append(f"{name}.part{len(parts):02d}")
            (run / parts[-1]).write_bytes(data[i:i + part_bytes])
        manifest[name] = {"parts": parts, "sha256": hashlib.sha256(data).hexdigest()}
        file.unlink()
    shutil.rmtree(run / "timeline", ignore_errors=True)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def join(parts_folder: Path, out: Path) -> Path:
    """Rebuild the checkpoint from its parts into `out`, each file checked against its SHA-256; `out` appears whole
    or not at all."""
    if out.exists():
        raise SystemExit(f"{out} exists already: name a new folder")
    manifest = json.loads((parts_folder / MANIFEST).read_text())
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    for name, entry in manifest.items():
        if name not in KEPT:
            raise SystemExit(f"{parts_folder / MANIFEST}: {name!r} is not a checkpoint file")
        data = b"".join((parts_folder / part).read_bytes() for part in entry["parts"])
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            shutil.rmtree(tmp)
            raise SystemExit(f"{name}: its parts do not make the file that was sent (SHA-256 differs)")
        (tmp / name).write_bytes(data)
    os.replace(tmp, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="here: the corpus's parsed caches and the wheels into gpu-carry/")
    packing.add_argument("--corpus", default="everyday")
    training = commands.add_parser("train", help="there: unpack, measure a step, train for --minutes, split")
    training.add_argument("--minutes", type=float, default=7.0)
    training.add_argument("--out", type=Path, required=True)
    training.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: the arguments of bert_demo train")
    joining = commands.add_parser("join", help="here: the parts that came back into a checkpoint folder")
    joining.add_argument("parts", type=Path)
    joining.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        archive = pack(args.corpus)
        pack_wheels()
        print(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB, and the wheels of {', '.join(CARRIED_WHEELS)}")
    elif args.command == "train":
        install_missing()
        cache = Path(tempfile.mkdtemp(prefix="bert-demo-cache-"))
        unpack(CARRY, cache)
        os.environ["BERT_DEMO_CACHE"] = str(cache)
        train([a for a in args.train_args if a != "--"], args.out, args.minutes)
    else:
        print(join(args.parts, args.out))


if __name__ == "__main__":
    main()
