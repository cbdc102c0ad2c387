"""What the Step by step tab shows, in words and pictures: a pre-training example (its sentences and where they came
from, its input position by position, the shares of each choice over many draws, its loss), and one step of the
forward pass (its equation, shape, values and line of model.py). Facts in, Markdown and HTML out."""
from __future__ import annotations

from typing import Any

from bert_demo.app.tabs.train_views import FAST_RECIPE_WHY, RECIPE_NAMES, recipe_markdown
from bert_demo.app.text import escape
from bert_demo.data.masking import FATES, IS_NEXT_SHARE, PICKED, Fate, fate_shares
from bert_demo.config import IS_NEXT, NOT_NEXT, NSP_CLASSES

MODEL_PY = "bert_demo/model.py"
FATE_WORDS = {Fate.MASK: "", Fate.RANDOM: "random · ", Fate.KEPT: "kept · "}  # before a picked position's label
SEGMENTS = "AB"


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
.ex-legend { display: flex; flex-wrap: wrap; gap: 0.4em; align-items: center; margin-bottom: 0.5em; }
.ex-tokens { display: flex; flex-wrap: wrap; gap: 4px; }  /* one box a position, wrapping: a phone reads it too */
.ex-tok, .ex-key { border: 1px solid #cbd5e1; border-radius: 4px; padding: 2px 5px; font-size: 0.85em;
  line-height: 1.25; }
.ex-tok { display: flex; flex-direction: column; align-items: center; min-width: 2.6em; }
.ex-tok.seg-a, .ex-key.seg-a { background: #e0ecff; }
.ex-tok.seg-b, .ex-key.seg-b { background: #e3f5e1; }
.ex-tok.fate-mask, .ex-key.fate-mask { border: 2px solid #d62728; }
.ex-tok.fate-random, .ex-key.fate-random { border: 2px solid #ff7f0e; }
.ex-tok.fate-kept, .ex-key.fate-kept { border: 2px solid #9467bd; }
.ex-pos, .ex-id { color: #64748b; font-size: 0.8em; }
.ex-piece { font-weight: 600; color: #0f172a; }
.ex-fate { font-size: 0.8em; color: #7f1d1d; }
#ex-shares table, #ex-loss-table table { display: block; overflow-x: auto; }  /* a phone scrolls them */
#ex-shares th, #ex-shares td, #ex-loss-table th, #ex-loss-table td { white-space: nowrap; word-break: normal; }
#ex-shares td:first-child { white-space: normal; min-width: 10em; }  /* what a row counts may wrap */
@media (max-width: 640px) { .ex-tok { font-size: 0.75em; padding: 1px 3px; } }  /* more positions a screen */
#ex-draw, #ex-another { white-space: nowrap; }  /* on a phone both stay one line high, side by side */
#fw-text pre, #fw-text pre code { white-space: pre-wrap !important; overflow-wrap: anywhere; }  /* model.py's
   long lines wrap on a phone */
"""


def pair_markdown(example: Any, recipe: str, recorded: bool) -> str:
    """Sentence A, sentence B and where each came from, the NSP label, what was cut, and the recipe that drew it
    ("model": the one the model was trained with, where `recorded`; "paper")."""
    a, b = example.a, example.b
    if example.is_next:
        b_from = f"what follows A in its document, {_place(b)}: **{NSP_CLASSES[IS_NEXT]}** (label {IS_NEXT})"
    else:
        b_from = f"a random passage, {_place(b)}: **{NSP_CLASSES[NOT_NEXT]}** (label {NOT_NEXT})"
    b_from += (". The paper's B is what follows A half the time; here a little less often, as the shares below "
               "count: an A that ends its document has no next sentences, so its B can only be random")
    recipe = ("BERT's recipe (the paper's)" if recipe == "paper" else "the recipe this model was trained with"
              if recorded else "the app's fast recipe (this model kept no record of how it was trained)")
    return "\n".join([
        f"Seed **{example.seed}**, drawn by the training pipeline itself, under {recipe}.", "",
        f"**Sentence A**, {_place(a)}:", "", _quote(a.sentences), "",
        f"**Sentence B**, {b_from}:", "", _quote(b.sentences), "",
        _cut_text(example.cut, len(example.pieces)),
    ])


def _place(segment: Any) -> str:
    sentences = len(segment.sentences)
    span = (f"sentence {segment.first + 1}" if sentences == 1
            else f"sentences {segment.first + 1}-{segment.first + sentences}")
    return f"{segment.source}, document {segment.document + 1}, {span}"


def _quote(sentences: list[str]) -> str:
    return "> " + escape(" ".join(sentences))


def _cut_text(cut: tuple[int, int, int, int], length: int) -> str:
    """What truncation removed, one word piece at a time from the longer side's front or back at random."""
    parts = [f"{n} from {where}" for n, where in zip(cut, ("A's start", "A's end", "B's start", "B's end")) if n]
    if not parts:
        return f"Nothing was cut: with `[CLS]` and two `[SEP]`, the pair is {length} word pieces."
    cuts = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return (f"**Cut to fit** {length} word pieces with `[CLS]` and two `[SEP]`: {sum(cut)} word pieces went, {cuts}, "
            "one at a time from the longer side, at its start or its end at random.")


def tokens_html(example: Any) -> str:
    """The input position by position, as the model reads it: each box a position, its word piece, its id, its
    segment; a picked position framed by its fate, with the label the loss scores it against."""
    boxes = []
    for position, (piece, shown, id_, segment, fate) in enumerate(zip(example.pieces, example.shown,
                                                                      example.input_ids, example.token_type_ids,
                                                                      example.fates)):
        classes = f"ex-tok seg-{SEGMENTS[segment].lower()}" + (f" fate-{Fate(fate).name.lower()}" if fate else "")
        lines = [f'<span class="ex-pos">{position} · {SEGMENTS[segment]}</span>',
                 f'<span class="ex-piece">{escape(shown)}</span>', f'<span class="ex-id">{id_}</span>']
        if fate:
            lines.append(f'<span class="ex-fate">{FATE_WORDS[fate]}label {escape(piece)}</span>')
        boxes.append(f'<div class="{classes}">{"".join(lines)}</div>')
    return f'{LEGEND}<div class="ex-tokens">{"".join(boxes)}</div>'


LEGEND = ('<div class="ex-legend"><span class="ex-key seg-a">segment A (0)</span>'
          '<span class="ex-key seg-b">segment B (1)</span><span class="ex-key fate-mask">picked → [MASK]</span>'
          '<span class="ex-key fate-random">picked → a random word</span>'
          '<span class="ex-key fate-kept">picked, kept</span>'
          '<small>Each box: position · segment, the word piece the model reads, its id; a picked one also says '
          'what became of it and the label it is scored against.</small></div>')


def shares_markdown(ours: Any, paper: Any, ours_name: str | None) -> str:
    """The shares of each choice over many draws, beside what each recipe sets: the model's and the paper's."""
    rows = [("positions picked, of those not [CLS], [SEP] or [PAD]", ours.mask_prob, ours.picked, paper.mask_prob,
             paper.picked)]
    ours_sets, paper_sets = fate_shares(ours.mask_replace), fate_shares(paper.mask_replace)
    for code in PICKED:
        fate = FATES[code]
        rows.append((f"… of those picked: {fate}", ours_sets[code], ours.fates[fate], paper_sets[code],
                     paper.fates[fate]))
    rows.append((f"B is what follows A ({NSP_CLASSES[IS_NEXT]})", IS_NEXT_SHARE, ours.is_next, IS_NEXT_SHARE,
                 paper.is_next))
    name = "this model's" if ours_name is None else RECIPE_NAMES[ours_name].replace("this app's", "the app's")
    lines = [f"Over **{ours.draws:,} draws** each (the same passages, new seeds), what each recipe sets and what "
             "came up:", "", f"| | {name}: sets | drawn | the paper's: sets | drawn |", "|---|---|---|---|---|"]
    lines += [f"| {what} | {a:.0%} | {b:.1%} | {c:.0%} | {d:.1%} |" for what, a, b, c, d in rows]
    lines += ["", "<small>Why the drawn shares sit near the settings, not on them: each example's picks are its "
                  "share of its word pieces rounded to a whole number, and a passage of one sentence can only take a "
                  "random B (a true B is owed to the next passage instead, to keep the labels even).</small>"]
    return "\n".join(lines)


def loss_markdown(loss: Any, example: Any, model: str) -> str:
    """The example's loss under `model` (its name, and its training step where not the final weights): the masked-LM
    loss (the mean over the picked positions), the NSP loss, and the sum training minimises."""
    label = NSP_CLASSES[IS_NEXT if example.is_next else NOT_NEXT]
    p_label = loss.is_next_prob if example.is_next else 1 - loss.is_next_prob
    weight = "" if loss.nsp_weight == 1 else f"{loss.nsp_weight:g} × "
    worst = max(range(len(loss.losses)), key=loss.losses.__getitem__)
    return "\n".join([
        f"Under **{model}**, in eval mode (no dropout):", "",
        f"**Masked-LM loss**: the mean of −log p over the {len(loss.positions)} picked positions, p being the "
        f"model's probability of each one's label = **{loss.mlm_loss:.4f}**. Only the picked positions are scored: "
        f"the model is never asked about the others. The hardest here: position {loss.positions[worst]}, label "
        f"{as_code(loss.targets[worst])}, p = {loss.target_probs[worst]:.3g}.", "",
        f"**Next-sentence loss**: the label is {label}, to which the model gives {p_label:.4f}: "
        f"−log {p_label:.4f} = **{loss.nsp_loss:.4f}**.", "",
        f"**The loss training minimises**: {loss.mlm_loss:.4f} + {weight}{loss.nsp_loss:.4f} = **{loss.loss:.4f}**.",
    ])


def loss_table(loss: Any, example: Any) -> str:
    """Each picked position's cross-entropy: what the model read there, its label, the model's probability of the
    label and its own top guess."""
    lines = ["| position | the model reads | label | p(label) | top guess | −log p |", "|---|---|---|---|---|---|"]
    for position, target, p, guess, value in zip(loss.positions, loss.targets, loss.target_probs, loss.top_guesses,
                                                 loss.losses):
        lines.append(f"| {position} | {as_code(example.shown[position])} | {as_code(target)} | {p:.3f} | "
                     f"{as_code(guess)} | {value:.3f} |")
    return "\n".join(lines)


def _whole(step: Any) -> str:
    """Where a step shows part of what it computes: the shape of the whole."""
    if step.whole is None:
        return ""
    rows, columns = step.whole
    return f", the top ones of the whole ({rows}, {columns:,}): a score for each of the {columns:,} word pieces"


def as_code(piece: str) -> str:
    """A word piece as Markdown code (a backquote in it shown as a look-alike, so that it cannot end the span)."""
    return f"`{piece.replace('`', 'ˋ')}`"


def recipe_note(config: Any) -> str:
    """The recipe an example was drawn under, and why the app's own differs from the paper's."""
    return recipe_markdown(config) + "\n\n" + FAST_RECIPE_WHY


def step_markdown(step: Any, index: int, count: int, line: tuple[int, str]) -> str:
    """One step of the forward pass: where it is, its equation, what it does, its shape and its line of model.py."""
    where = f" ({step.where})" if step.where else ""
    rows, columns = step.shape
    across = step.columns if isinstance(step.columns, str) else "columns"
    number, code = line
    return "\n".join([
        f"### {index + 1} of {count} · {step.part}: {step.title}{where}", "",
        f"$$ {step.equation} $$", "", step.about, "",
        f"**Shape** ({rows}, {columns}): {rows} row{'s' if rows != 1 else ''} × {columns} {across}"
        f"{'s' if columns != 1 and across == 'dimension' else ''}{_whole(step)}. Hover or tap a cell for its value.",
        "",
        f"`{MODEL_PY}`, line {number}:", "", "```python", code, "```",
    ])


def gradient_note(step: Any) -> str:
    """What a step's gradient is, above the step itself; at the decoder, what its label column is."""
    note = ("**The gradient of the loss here**, ∂loss/∂(this step's output), from one training step's backward pass "
            "on the example drawn above (no dropout): what `loss.backward()` computes at this point, in the same "
            "shape as the values. Red: raising a value would raise the loss, so training lowers it; blue: the "
            "reverse.")
    if step.label_first:
        rows = len(step.rows)
        note += (f" **The first column is each picked position's label**: its gradient, (p − 1) / {rows} (the "
                 f"mean over {rows} positions), is the only negative one, the one score a step raises; the other "
                 f"columns are the top guesses beside it, each p / {rows}, lowered in proportion to their "
                 "probability. A row marked “kept” reads the label itself, so the model already gives it a high p "
                 "and its gradient is small; one marked “random” reads another word in its place.")
    return note + "\n\n"


def no_gradient_markdown(spec: Any, index: int, count: int) -> str:
    """A step where the loss has no gradient, and why."""
    return (f"### {index + 1} of {count} · {spec.part}: {spec.title}\n\n"
            f"$$ {spec.equation} $$\n\nThe loss has no gradient at this step: {spec.no_gradient}")


def path_markdown(path: list[Any], position: int, token: str) -> str:
    """One token's path up through the layers: its vector's size, what the masked-LM head would guess from it there
    (the logit lens), and how widely its attention reads."""
    lines = [f"**Token {position}, {as_code(token)}, layer after layer.** Its vector's size; the words the masked-LM "
             "head would guess from it there (the logit lens: the head reads only the last layer in training, so "
             "early guesses show what the vector already holds); how many tokens its attention reads, in effect "
             "(1: one token; all of them alike: their number), and the one its heads read most.", "",
             "| after | size | the head would guess | attention reads | most |", "|---|---|---|---|---|"]
    for depth in path:
        where = "the embeddings" if depth.layer == 0 else f"layer {depth.layer}"
        guesses = ", ".join(f"{as_code(word)} {p:.2f}" for word, p in depth.guesses)
        spread = "" if depth.spread is None else f"{depth.spread:.1f} tokens"
        most = "" if depth.most is None else f"{as_code(depth.most[0])} {depth.most[1]:.2f}"
        lines.append(f"| {where} | {depth.size:.1f} | {guesses} | {spread} | {most} |")
    return "\n".join(lines)


def grid_note(step: Any, shows_gradient: bool, count: int, per_head: bool) -> str:
    """What the grid of every layer (and head) shows, or why there is none."""
    if not count:
        return (f"“{step.title}” is computed once, outside the encoder's layers: choose a step of the attention or "
                "the feed-forward network to see it in every layer.")
    what = "its gradient" if shows_gradient else "its values"
    each = "layer and head" if per_head else "layer"
    return (f"**{step.title}** in every {each} ({count} pictures), {what} on one colour scale: a darker picture holds "
            "larger numbers. Rows and columns as in the picture above.")
