"""A model card for users, written from what a checkpoint can be measured to do (`python -m bert_demo card`).

The card says what the model knows and does not (plain sentences, each with words that would fit), its held-out
metrics on every corpus it trained on and on text it never saw (through our code and `transformers`), how it was
trained (the one command, the hardware, the time) and its limitations; the learning curve is drawn beside it as an
SVG by `learning_curve_svg`. History stays in git, not in the card.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from safetensors import safe_open

from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.config import BERT_WORDS, trained_on, weights_files
from bert_demo.data.corpus import source_parts
from bert_demo.data.sources import MIX_ABOUT, MIXES, SOURCES
from bert_demo.inference import fill_mask
from bert_demo.training.evaluate import evaluate
from bert_demo.training.settings import TrainConfig

CURVE_NAME = "learning-curve.svg"
# Plain sentences and words that fit them: "knows" means one of them is among the top 3 guesses.
PLAIN_SENTENCES = [
    ("the [MASK] of france is paris.", {"capital"}),
    ("he went to the [MASK] to buy bread.", {"shop", "store", "bakery", "market", "supermarket", "baker"}),
    ("the war ended in [MASK].", {str(year) for year in range(1500, 2030)}),
    ("she drank a cup of [MASK] before work.", {"coffee", "tea", "water", "milk"}),
    ("the children played in the [MASK] after school.", {"park", "garden", "yard", "street", "playground"}),
    ("it was raining, so he took his [MASK].", {"umbrella", "coat", "hat", "car"}),
    ("the president of the united [MASK] spoke on tuesday.", {"states", "nations", "kingdom"}),
    ("the ship sailed across the [MASK].", {"sea", "ocean", "atlantic", "pacific", "river", "lake", "channel"}),
]


def knowledge(model, tokenizer) -> list[dict[str, Any]]:
    """Each plain sentence with the model's top 3 guesses and whether a fitting word is among them."""
    rows = []
    for text, fitting in PLAIN_SENTENCES:
        guesses = fill_mask(model, tokenizer, text, top_k=3)[0]
        rows.append({"text": text, "guesses": guesses, "knows": any(token in fitting for token, _ in guesses)})
    return rows


def learning_curve_svg(history: list[dict[str, Any]], title: str, width: int = 640, height: int = 320) -> str:
    """Validation masked-LM accuracy against tokens seen (log scale), as a self-contained SVG."""
    points = [(r["tokens"], r["mlm_acc"]) for r in history if r.get("kind") == "val" and r.get("tokens", 0) > 0]
    if not points:
        raise ValueError("the checkpoint's history has no validation records to draw")
    left, right, top, bottom = 60, 20, 40, 50
    low, high = math.floor(math.log10(points[0][0])), math.ceil(math.log10(points[-1][0]))
    high = max(high, low + 1)
    top_acc = max(0.1, math.ceil(max(acc for _, acc in points) * 10) / 10)

    def x(tokens: float) -> float:
        return left + (math.log10(tokens) - low) / (high - low) * (width - left - right)

    def y(acc: float) -> float:
        return height - bottom - acc / top_acc * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>']
    for power in range(low, high + 1):  # x ticks: 10^k tokens
        parts.append(f'<line x1="{x(10 ** power):.1f}" x2="{x(10 ** power):.1f}" y1="{top}" '
                     f'y2="{height - bottom}" stroke="#eee"/>')
        parts.append(f'<text x="{x(10 ** power):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f'{_tokens(10 ** power)}</text>')
    for tick in range(0, round(top_acc * 10) + 1):  # y ticks: every 0.1
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(tick / 10):.1f}" y2="{y(tick / 10):.1f}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{left - 8}" y="{y(tick / 10) + 4:.1f}" text-anchor="end">{tick / 10:.1f}</text>')
    path = " ".join(f"{x(t):.1f},{y(a):.1f}" for t, a in points)
    parts += [f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
              f'<text x="{(width + left - right) / 2}" y="{height - 12}" text-anchor="middle">tokens seen</text>',
              f'<text x="16" y="{(height - bottom + top) / 2}" text-anchor="middle" '
              f'transform="rotate(-90 16 {(height - bottom + top) / 2})">held-out MLM accuracy</text>', "</svg>"]
    return "\n".join(parts) + "\n"


def _tokens(n: float) -> str:
    return f"{n / 1e9:g}B" if n >= 1e9 else f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k" if n >= 1e3 else f"{n:g}"


def write_card(folder: str | Path, corpora: list[str] | None = None, outside: Sequence[str] = ("lee",),
               batches: int = 50) -> Path:
    """Measure the checkpoint in `folder` and write its README.md and learning curve; return the card's path.
    `corpora` defaults to those the run trained on; `outside` names texts reserved for evaluation, scored whole."""
    folder = Path(folder)
    model, tokenizer = load_pretrained(folder)
    metadata = read_metadata(folder)
    config = metadata.get("train_config", {})
    trained = source_parts(str(config.get("corpus", "")))
    corpora = corpora or trained
    metrics = {corpus: evaluate(folder, corpus, max_batches=batches, reference=True) for corpus in [*corpora, *outside]}
    (folder / CURVE_NAME).write_text(learning_curve_svg(metadata.get("history", []), curve_title(folder.name, config)))
    card = folder / "README.md"
    card.write_text(_card_text(folder.name, model, metadata, config, metrics, knowledge(model, tokenizer),
                               list(outside), len(trained), weights_dtype(folder)))
    return card


def weights_dtype(folder: Path) -> str:
    """How a checkpoint's weights are stored: "bf16" for a copy sent back from a GPU in half the bytes, else "fp32"
    (they load as fp32 either way)."""
    with safe_open(str(weights_files(folder)[0]), "pt") as weights:
        stored = weights.get_slice(next(iter(weights.keys()))).get_dtype()
    return {"BF16": "bf16", "F16": "fp16"}.get(stored, "fp32")


def curve_title(name: str, config: dict) -> str:
    """The learning curve's title: a continued run's curve starts where its start left off, and says so."""
    start = config.get("init_from")
    return (f"{name}: learning curve, continuing {Path(str(start)).name} (tokens seen since)" if start
            else f"{name}: learning curve")


def how_long(metadata: dict, weights: str = "fp32") -> str:
    """"N steps (T hours on H, computing in P; the weights are W)", from a run's records and its weights' dtype."""
    seconds = float(metadata.get("elapsed", 0.0))
    took = f"{seconds / 3600:.1f} hours" if seconds >= 3600 else f"{max(1, round(seconds / 60))} minutes"
    hardware = " and ".join(trained_on(metadata)) or "an unrecorded machine"
    # runs saved before runs recorded their precision computed in bf16 on a GPU and in fp32 on a CPU
    precision = metadata.get("precision") or ("bf16" if metadata.get("device") == "cuda" else "fp32")
    return (f"{metadata.get('step', 0):,} steps ({took} on {hardware}, computing in {precision}; "
            f"the weights are {weights})")


def continued_from(config: dict, depth: int = 5) -> list[str]:
    """For a run that continued another model: how that model was trained, and what it continued in turn (from
    their records, where the folders are still here), so the card accounts for all the compute. Each is named as
    its command's `--out` names it, `checkpoints/<name>`."""
    lines, start = [], config.get("init_from")
    while start and len(lines) < depth:
        if not (Path(start) / "config.json").is_file():
            lines.append(f"It continues `{start}` (its folder is no longer here: its own card says how it was "
                         "trained).")
            break
        earlier = read_metadata(start)
        stored = earlier.get("train_config") or {}
        planned, done = stored.get("steps", 0), earlier.get("step", 0)
        stopped = f", stopped at step {done:,} of {planned:,}" if done < planned else ""
        lines.append(f"It continues `checkpoints/{Path(start).name}`, trained by this project's code on "
                     f"`{stored.get('corpus', 'a corpus')}`"
                     f" for {how_long(earlier)}{stopped}: `{command(stored, Path(start).name)}`.")
        start = stored.get("init_from")
    return [" ".join(line if i == 0 else line.replace("It continues", "That continues", 1)
                     for i, line in enumerate(lines)), ""] if lines else []


# where and for how long it ran, not what it learned (a run on a time budget shows the steps its time held)
NOT_IN_COMMAND = {"out", "eval_every", "save_every", "log_every", "device", "minutes", "data_workers"}


def command(config: dict, name: str) -> str:
    """The one command that trains this model: its corpus, steps and shape, then every other setting the run
    changed from the defaults (a continued run's shape and vocabulary come from the model it continues). Each model
    is named as `checkpoints/<its name>`, so a chain of stages reads as one recipe."""
    defaults = asdict(TrainConfig())
    shown = ["corpus", "steps", "batch_size", "seq_len"]
    if not config.get("init_from"):
        shown = ["preset", *shown, "vocab_size"]
    shown += [key for key, value in config.items() if key not in {*shown, "preset", "vocab_size", *NOT_IN_COMMAND}
              and value is not None and value != defaults.get(key)]
    values = {**config, "init_from": f"checkpoints/{Path(str(config.get('init_from'))).name}"}  # as --out names it
    flags = " ".join(f"--{key.replace('_', '-')} {values[key]}" for key in shown if key in config)
    return f"python -m bert_demo train {flags} --out checkpoints/{name}"


def _card_text(name: str, model, metadata: dict, config: dict, metrics: dict, known: list[dict], outside: list[str],
               trained: int, weights: str = "fp32") -> str:
    lines = ["---", "language: en", "library_name: transformers", "tags: [bert, fill-mask, from-scratch, bert-demo]",
             "---", "", f"# {name}: a small BERT pre-trained from scratch", "",
             f"{model.config.num_hidden_layers} layers, hidden size {model.config.hidden_size}, "
             f"{model.config.num_attention_heads} heads, vocabulary {model.config.vocab_size:,}; "
             f"{model.num_parameters():,} parameters. Trained by this project's code with masked-language modelling "
             f"and next-sentence prediction for {how_long(metadata, weights)} with one command:", "",
             f"```bash\n{command(config, name)}\n```", "",
             *continued_from(config),
             "Stopped with Ctrl-C, such a run continues on the same schedule with `python -m bert_demo train "
             "--resume` and its folder; a shipped copy leaves out the optimizer state (`optimizer.safetensors`) that "
             "this needs.", "",
             "## What it knows, and what it does not", "",
             "| sentence | top 3 guesses | a fitting word among them |", "|---|---|---|"]
    lines += [f"| {row['text']} | {', '.join(token for token, _ in row['guesses'])} | "
              f"{'yes' if row['knows'] else 'no'} |" for row in known]
    held_out = [corpus for corpus in metrics if corpus not in outside]
    which = ("each corpus it trained on" if len(held_out) >= trained
             else f"{len(held_out)} of the {trained} corpora it trained on")
    never = "; ".join(f"`{text}` ({SOURCES[text].about})" for text in outside)
    lines += ["", "## Metrics", "",
              f"Held-out documents of {which}, and all of {never}, which it never saw. MLM: every target replaced by "
              "[MASK]. Our code and `transformers` give the same numbers:", "",
              "| text | MLM accuracy | perplexity | NSP accuracy | same through transformers |",
              "|---|---|---|---|---|"]
    for corpus, result in metrics.items():
        ours, theirs = result["ours"], result["transformers"]
        same = all(abs(ours[k] - theirs[k]) < 1e-4 for k in ("mlm_acc", "nsp_acc"))
        label = f"{corpus} (never seen)" if corpus in outside else f"{corpus} (held out)"
        lines.append(f"| {label} | {ours['mlm_acc']:.3f} | {ours['mlm_ppl']:.1f} | {ours['nsp_acc']:.3f} | "
                     f"{'yes' if same else 'NO'} |")
    lines += ["", f"![learning curve]({CURVE_NAME})", "", "## Data", ""]
    corpus = str(config.get("corpus", ""))
    mixes = [part for part in corpus.split(",") if part in MIXES]
    lines += [f"`{mix}` is a mix of named sources ({MIX_ABOUT[mix]}); each is listed below." for mix in mixes]
    lines += [""] if mixes else []
    lines += [f"- `{part}`: {SOURCES[part].about if part in SOURCES else 'a text file'}"
              for part in source_parts(corpus) if part]
    lines += ["", "The project's README lists each source's licence and attribution.", "",
              "## Limitations", "",
              f"A teaching model: small, trained on far less text than BERT read ({BERT_WORDS} words), "
              "lower-cased, English only. It repeats the "
              "topics and names of its training text, guesses frequent words when unsure, and has not been checked "
              "for bias or safety. Do not use its predictions for decisions.", ""]
    return "\n".join(lines)
