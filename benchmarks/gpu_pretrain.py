"""Pre-training on a lent GPU in one prepared call: pack here, train there for set minutes, join the parts here.

Why: the lent machine reaches no package registry and runs one command of at most 10 minutes; what travels there is
the working tree and the carried files, 64 MiB in all, and what comes back is at most 8 files of 16 MiB, 64 MiB in
all. So:
- the corpus travels as its parsed caches, compressed (corpus v4: 12.8 M words in 18 MiB of xz), with the vocabulary
  trained here on the run's training documents, kept where the run there finds it (the cache's `prepared/`);
- the run's length is set there from its own pace, measured over its first steps (`bert_demo train --minutes`), so
  that its learning-rate schedule ends when the time does (a run cut short stops mid-schedule, its rate still
  high); a run given `--steps` instead keeps its schedule, trains until the time is up, and goes on in a later call
  (`pack --continue`, then `--resume`);
- the checkpoint comes back as one archive cut into parts, each with its SHA-256, joined and checked here; its weights
  in bf16 where fp32 would not fit (BERT-Small at 16,384 entries: 87 MB in fp32, 44 MB in bf16), its AdamW moments
  only where they fit too (a run resumed without them warms up again, `recipe.optimizer_and_schedule`).
A run that overstays its time is stopped as Ctrl-C stops it: the step finishes and it saves.

    python benchmarks/gpu_pretrain.py pack --corpus v4 --vocab-size 16384         # here: gpu-carry/
    python benchmarks/gpu_pretrain.py train --minutes 8 --out "$OUT/run" -- --preset small --corpus v4 \\
        --vocab-size 16384 --batch-size 256 --lr 7e-4 --warmup-steps 1000 --eval-every 2000  # there: gpu_call.sh
    python benchmarks/gpu_pretrain.py join FILES_AT/run runs/small-v4               # here, from what came back

A later call goes on from what came back: `pack --corpus v4 --vocab-size 16384 --continue runs/small-v4`, then
`train ... -- --resume gpu-carry/start --steps N` (the run's settings come from its checkpoint).

`train --minutes 3 ... --device cpu --batch-size 8` runs the same path at small scale on a CPU, as a proof of the
command before a GPU is lent (tests/benchmarks/test_gpu_pretrain.py runs pack, a small train, split and join).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)

from bert_demo.config import WEIGHTS_PATTERNS
from bert_demo.data.corpus import CACHE_VERSION, cache_folder, load_corpus, source_parts

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / "gpu-carry"
CORPUS = CARRY / "corpus.tar.xz"
START = CARRY / "start"  # the checkpoint a later call continues, weights in bf16
HOME = ROOT / "gpu-home"  # the shipped weights, kept out of the working tree while a continuation travels
MiB = 2**20
TRAVEL_BYTES = 64 * MiB  # the working tree and the carried files, in all
RETURN_FILES, RETURN_FILE_BYTES, RETURN_BYTES = 8, 16 * MiB, 64 * MiB  # what may come back
PART_BYTES = 15 * MiB
SHIPPED_SHARD_BYTES = 20 * MiB  # a shipped model's weights files: each under the 25 MB the repository takes in one file
BUNDLE_BYTES = 4 * PART_BYTES  # the returned archive: 4 parts and the manifest, within every limit above
MANIFEST = "parts.json"
WEIGHTS, OPTIMIZER = "model.safetensors", "optimizer.safetensors"
KEPT = (WEIGHTS, OPTIMIZER, "config.json", "bert_demo.json", "tokenizer.json", "tokenizer_config.json",
        "vocab.txt")  # what --resume and the card need; the timeline stays there
# What `bert_demo train` imports. The lent machine has torch and transformers (with tokenizers and safetensors), and no
# registry: the pure-Python ones travel as wheels, the others must be there.
CARRIED_WHEELS = ("einops", "tqdm")
NEEDED_THERE = ("torch", "transformers", "tokenizers", "safetensors")


# ---------------------------------------------------------------------------------------------------------------
# here, before the call


def pack(corpus: str, archive: Path = CORPUS, vocab_size: int | None = None) -> Path:
    """The parsed caches of `corpus`'s sources in one xz archive (each source fetched and parsed first if needed),
    with the run's vocabulary of `vocab_size` trained here on its training documents, as the trainer keeps it."""
    folder = cache_folder()
    files = []
    for part in source_parts(corpus):
        load_corpus(part)  # fetched and parsed into the cache once
        files.append(folder / f"{part}-v{CACHE_VERSION}.json")
    if vocab_size:
        files.append(_vocabulary_file(corpus, vocab_size))
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz") as tar:
        for file in files:
            tar.add(file, arcname=file.relative_to(folder).as_posix())
    return archive


def _vocabulary_file(corpus: str, vocab_size: int) -> Path:
    """Train (or read back) the vocabulary a run on `corpus` trains first, and return the cache file it is kept in."""
    from bert_demo.data.pairs import split_documents
    from bert_demo.data.token_cache import vocabulary_file
    from bert_demo.training.pretraining import corpus_tokenizer, vocabulary_key
    from bert_demo.training.settings import TrainConfig

    config = TrainConfig(corpus=corpus, vocab_size=vocab_size)
    corpus_tokenizer(config, split_documents(load_corpus(corpus), config.val_fraction, config.seed)[0])
    return vocabulary_file(vocabulary_key(config))


def pack_wheels(folder: Path = CARRY / "wheels") -> None:
    """The pure-Python packages `bert_demo train` needs that the lent machine may lack, as wheels from PyPI, at the
    versions requirements.txt pins."""
    pins = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.split("==")[0].strip() in CARRIED_WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(folder), *pins], check=True)


def pack_start(run: Path, folder: Path = START) -> Path:
    """A checkpoint to go on from in a later call: its weights in bf16 (half the bytes), its AdamW moments left here
    (they would not fit), the rest as it is."""
    return copy_checkpoint(run, folder)


def ship(run: Path, folder: Path) -> Path:
    """A run that came back, as a shipped model: its weights in bf16, in shards of at most SHIPPED_SHARD_BYTES, and
    no optimizer. A card, learning curve and examples already in `folder` stay until `python -m bert_demo card` and
    `choose_examples.py` write the new model's."""
    return copy_checkpoint(run, folder, SHIPPED_SHARD_BYTES, keep_others=True)


def copy_checkpoint(run: Path, folder: Path, shard_bytes: int | None = None, keep_others: bool = False) -> Path:
    """`run`'s checkpoint as `folder`, which appears whole or not at all: the weights in bf16 (a bf16 weight loads as
    the same fp32 one), in one file or in shards of at most `shard_bytes`; the AdamW moments left behind; the other
    files of KEPT as they are, and with `keep_others`, `folder`'s own other files (not its weights) too, so that a
    folder can be re-sharded in place (`ship F F`)."""
    from bert_demo.checkpoint import new_folder, stored_weights, write_weights

    with new_folder(folder) as tmp:
        if keep_others and folder.is_dir():
            for file in folder.iterdir():
                if file.is_file() and not any(file.match(pattern) for pattern in WEIGHTS_PATTERNS):
                    shutil.copy2(file, tmp / file.name)
        for name in KEPT:
            if name not in (WEIGHTS, OPTIMIZER) and (run / name).is_file():
                shutil.copy2(run / name, tmp / name)
        weights = stored_weights(run)
        write_weights({k: v.bfloat16() if v.is_floating_point() else v for k, v in weights.items()}, tmp, shard_bytes)
    return folder


def leave_home(root: Path = ROOT, home: Path = HOME) -> list[Path]:
    """Move the shipped models' weights out of the working tree (into git-ignored `home`), so that a call can carry
    a checkpoint to go on from beside the corpus; `come_back` returns them. What stays home is listed."""
    moved = []
    for weights in sorted(f for pattern in WEIGHTS_PATTERNS for f in (root / "checkpoints").glob(f"*/{pattern}")):
        target = home / weights.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(weights, target)
        moved.append(weights.relative_to(root))
    return moved


def come_back(root: Path = ROOT, home: Path = HOME) -> list[Path]:
    """Return the weights `leave_home` moved, each to where it was."""
    returned = []
    for weights in sorted(f for pattern in WEIGHTS_PATTERNS for f in home.glob(f"checkpoints/*/{pattern}")):
        os.replace(weights, root / weights.relative_to(home))
        returned.append(weights.relative_to(home))
    return returned


def travel_bytes(root: Path = ROOT, carry: str = CARRY.name) -> int:
    """What a call sends: the tracked files and the untracked ones git does not ignore, and the carried folder."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = [root / name for name in listed if name and (root / name).is_file()]
    carried = [f for f in (root / carry).rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files + carried)


# ---------------------------------------------------------------------------------------------------------------
# there


def install_missing(folder: Path = CARRY / "wheels") -> None:
    """Install the carried wheels the machine lacks; stop at once, before any work, if something else is missing."""
    absent = [name for name in NEEDED_THERE if importlib.util.find_spec(name) is None]
    if absent:
        raise SystemExit(f"this machine lacks {', '.join(absent)}, which cannot travel as a pure-Python wheel")
    missing = [name for name in CARRIED_WHEELS if importlib.util.find_spec(name) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(folder),
                        *missing], check=True)


def unpack(archive: Path, folder: Path) -> None:
    """The caches back into `folder`: plain files, at the top or in `prepared/`, never a path outside it."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            plain = len(parts) == 1 or (len(parts) == 2 and parts[0] == "prepared")
            if not member.isfile() or not plain or parts[-1].startswith("."):
                raise SystemExit(f"{archive}: {member.name!r} is not a cache file")
            (folder / member.name).parent.mkdir(exist_ok=True)
            (folder / member.name).write_bytes(tar.extractfile(member).read())


def _train(args: list[str], out: Path, deadline: float) -> None:
    """`python -m bert_demo train`, stopped as Ctrl-C stops it (finish the step, save) if it is still running at
    `deadline`."""
    command = [sys.executable, "-m", "bert_demo", "train", *args, "--out", str(out)]
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        process.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        process.wait()
    if process.returncode:
        raise SystemExit(f"training ended with exit status {process.returncode}")


def train(args: list[str], out: Path, minutes: float, margin_s: float = 45.0) -> None:
    """Train on a time budget: the run sets its own steps from its measured pace (`--minutes`, less `margin_s` for
    the final save), so that its schedule ends with the time; or, where `args` give --steps, towards them until the
    time is up, to go on in a later call. Then print what it did and cut it into parts."""
    deadline = time.time() + 60 * minutes
    if "--steps" not in args:
        args = [*args, "--minutes", f"{minutes - margin_s / 60:.3f}"]
    _train(args, out, deadline)
    if not (out / "bert_demo.json").is_file():
        raise SystemExit(f"the run saved no checkpoint in {out}: its {minutes:g} minutes were up before its first "
                         "step (its preparation took them); give it more --minutes")
    print(summary(out, _resumed_step(args)), flush=True)
    split(out)


def _resumed_step(args: list[str]) -> int:
    """The step the checkpoint named by `--resume` in `args` had reached, else 0."""
    if "--resume" not in args:
        return 0
    return int(json.loads((Path(args[args.index("--resume") + 1]) / "bert_demo.json").read_text())["step"])


def summary(run: Path, since: int = 0) -> str:
    """One line on what the run did: its steps and tokens, its speed (the median of its training records after step
    `since`, where a resumed run began, the first one left out: the history also holds the earlier calls') and its
    last validation."""
    metadata = json.loads((run / "bert_demo.json").read_text())
    history = metadata["history"]
    speeds = [r["tokens_per_s"] for r in history if r["kind"] == "train" and r["step"] > since][1:]
    val = next((r for r in reversed(history) if r["kind"] == "val"), {})
    tokens = history[-1]["tokens"] if history else 0
    return (f"run: step {metadata['step']:,}, {tokens / 1e6:,.1f} M tokens, "
            f"{statistics.median(speeds) if speeds else 0:,.0f} real tokens/s (median of its records), "
            f"{metadata['elapsed']:.0f} s; last validation: MLM {val.get('mlm_acc', float('nan')):.3f}, "
            f"NSP {val.get('nsp_acc', float('nan')):.3f}")


def split(run: Path, part_bytes: int = PART_BYTES, budget: int = BUNDLE_BYTES) -> dict:
    """Pack the files a checkpoint needs into one archive within `budget` (weights in bf16 if fp32 would not fit,
    the AdamW moments only if they fit too), cut it into parts of at most `part_bytes`, and write a manifest of
    their SHA-256; the originals and the timeline go."""
    from safetensors.torch import load_file, save_file

    present = [name for name in KEPT if (run / name).is_file()]
    weights_in = "fp32"
    if len(_archive(run, [n for n in present if n != OPTIMIZER])) > budget:
        weights = load_file(str(run / WEIGHTS))
        save_file({k: v.bfloat16() if v.is_floating_point() else v for k, v in weights.items()}, str(run / WEIGHTS))
        weights_in = "bf16"
    data = _archive(run, present)
    if len(data) > budget and OPTIMIZER in present:
        present.remove(OPTIMIZER)
        data = _archive(run, present)
    if len(data) > budget:
        raise SystemExit(f"the checkpoint needs {len(data) / MiB:.1f} MiB even in bf16: more than the "
                         f"{budget / MiB:.0f} MiB that may come back")
    parts = []
    for i in range(0, len(data), part_bytes):
        parts.append(f"checkpoint.tar.part{len(parts):02d}")
        (run / parts[-1]).write_bytes(data[i:i + part_bytes])
    manifest = {"parts": parts, "sha256": hashlib.sha256(data).hexdigest(), "files": present,
                "weights": weights_in, "optimizer": OPTIMIZER in present}
    for name in KEPT:
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "timeline", ignore_errors=True)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def _archive(run: Path, names: list[str]) -> bytes:
    """The named files of `run` as one uncompressed tar archive (bf16 and fp32 weights barely compress)."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name in names:
            tar.add(run / name, arcname=name)
    return archive.getvalue()


# ---------------------------------------------------------------------------------------------------------------
# here, after the call


def join(parts_folder: Path, out: Path) -> Path:
    """Rebuild the checkpoint from its parts into `out`, checked against its SHA-256, its weights back in fp32
    (a bf16 weight is exactly a fp32 one); `out` appears whole or not at all."""
    from safetensors.torch import load_file, save_file

    if out.exists():
        raise SystemExit(f"{out} exists already: name a new folder")
    manifest = json.loads((parts_folder / MANIFEST).read_text())
    data = b"".join((parts_folder / part).read_bytes() for part in manifest["parts"])
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise SystemExit(f"{parts_folder}: its parts do not make the archive that was sent (SHA-256 differs)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.name not in KEPT:
                    raise SystemExit(f"{parts_folder}: {member.name!r} is not a checkpoint file")
                (tmp / member.name).write_bytes(tar.extractfile(member).read())
        if manifest["weights"] != "fp32":
            weights = load_file(str(tmp / WEIGHTS))
            save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()}, str(tmp / WEIGHTS))
    except BaseException:
        shutil.rmtree(tmp)
        raise
    os.replace(tmp, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="here: the corpus's caches, its vocabulary and the wheels into "
                                               "gpu-carry/, and a checkpoint to go on from")
    packing.add_argument("--corpus", default="v4")
    packing.add_argument("--vocab-size", type=int, help="train the run's vocabulary of this size here")
    packing.add_argument("--continue", dest="start", type=Path, help="a checkpoint the next call goes on from")
    commands.add_parser("leave-home", help="here, before a call that carries a checkpoint: the shipped models' "
                                           "weights out of the working tree, into gpu-home/")
    commands.add_parser("come-back", help="here, after that call: the shipped models' weights back")
    shipping = commands.add_parser("ship", help="here: a joined run as a shipped model (bf16 weights in shards of at "
                                                f"most {SHIPPED_SHARD_BYTES // MiB} MiB, no optimizer)")
    shipping.add_argument("run", type=Path)
    shipping.add_argument("out", type=Path)
    training = commands.add_parser("train", help="there: unpack, measure a step, train for --minutes, split")
    training.add_argument("--minutes", type=float, default=8.0)
    training.add_argument("--out", type=Path, required=True)
    training.add_argument("--cache", type=Path, help="unpack the corpus here (default: a new temporary folder), so "
                                                     "that later commands of the call read it too")
    training.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: the arguments of bert_demo train")
    joining = commands.add_parser("join", help="here: the parts that came back into a checkpoint folder")
    joining.add_argument("parts", type=Path)
    joining.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        archive = pack(args.corpus, vocab_size=args.vocab_size)
        pack_wheels()
        if args.start:
            pack_start(args.start)
        total = travel_bytes()
        print(f"{archive}: {archive.stat().st_size / MiB:.1f} MiB; a call sends {total / MiB:.1f} MiB of the "
              f"{TRAVEL_BYTES / MiB:.0f} MiB that may travel")
        if total > TRAVEL_BYTES:
            raise SystemExit("too much to travel: leave the shipped weights at home for the call (`leave-home`, "
                             "then `come-back` after it), or carry a smaller corpus")
    elif args.command == "leave-home":
        print("\n".join(f"left home: {path}" for path in leave_home()) or "nothing to leave home")
        print(f"a call sends {travel_bytes() / MiB:.1f} MiB of the {TRAVEL_BYTES / MiB:.0f} MiB that may travel")
    elif args.command == "come-back":
        print("\n".join(f"back: {path}" for path in come_back()) or "nothing was at home")
    elif args.command == "ship":
        print(ship(args.run, args.out))
    elif args.command == "train":
        install_missing()
        cache = args.cache or Path(tempfile.mkdtemp(prefix="bert-demo-cache-"))
        unpack(CORPUS, cache)
        os.environ["BERT_DEMO_CACHE"] = str(cache)
        train([a for a in args.train_args if a != "--"], args.out, args.minutes)
    else:
        print(join(args.parts, args.out))


if __name__ == "__main__":
    main()
