"""What the Fill-mask tab says around its answers: the sentence as clickable words (and a click's word masked), the
logit lens's table, and the coloured words of an attribution, with their key and caption (the Fine-tune tab's
classifier colours its words the same way)."""
from __future__ import annotations

import re
from typing import Any

from bert_demo.app.text import escape


def layer_table(lens: list[list[list[tuple[str, float]]]]) -> str:
    """The logit lens as a Markdown table: a row per layer, a column per [MASK] with its top guesses, one a line
    (side by side, a [MASK]'s three guesses ran past a phone's right edge)."""
    layers = len(lens[0]) if lens else 0
    lines = ["| layer | " + " | ".join(f"[MASK] {i + 1}" for i in range(len(lens))) + " |",
             "|---|" + "---|" * len(lens)]
    for layer in range(layers):
        name = f"{layer + 1}" + (" (last)" if layer == layers - 1 else "")
        cells = ["<br>".join(f"{escape(token)} {p:.0%}" for token, p in mask[layer]) for mask in lens]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_WORD = re.compile(r"\S+")


_EDGES = re.compile(r"^(\W*)(.*?)(\W*)$", re.DOTALL)  # a word's leading and trailing punctuation


def word_spans(sentence: str) -> list[tuple[str, str | None]]:
    """The sentence as clickable words with the spaces between them (HighlightedText draws no spaces itself)."""
    spans: list[tuple[str, str | None]] = []
    for match in _WORD.finditer(sentence or ""):
        if spans:
            spans.append((" ", None))
        spans.append((match.group(), "word"))
    return spans


def mask_word(sentence: str, index: int) -> str:
    """`sentence` with the word at `index` of `word_spans` replaced by [MASK], its punctuation kept ("mat." ->
    "[MASK]."). A space or an index out of range leaves the sentence as it was."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or index % 2:
        return sentence
    matches = list(_WORD.finditer(sentence or ""))
    if index // 2 >= len(matches):
        return sentence
    match = matches[index // 2]
    if "[mask]" in match.group().lower():  # already masked
        return sentence
    lead, core, trail = _EDGES.match(match.group()).groups()
    if not core:  # punctuation alone ("—"): mask all of it
        lead, trail = "", ""
    return sentence[:match.start()] + lead + "[MASK]" + trail + sentence[match.end():]


def attribution_spans(tokens: list[str], scores: list[float]) -> list[tuple[str, float | None]]:
    """Whole words with their summed WordPiece attributions, scaled so that the strongest is ±1 (HighlightedText
    colours a number from purple, -1, to red, +1), with spaces between them and a bar between the two sentences."""
    words: list[list] = []
    for token, score in zip(tokens, scores):
        if token == "[SEP]":
            words.append(["|", None])
        elif token.startswith("##") and words and words[-1][1] is not None:
            words[-1][0] += token[2:]
            words[-1][1] += score
        elif token not in ("[CLS]", "[PAD]"):
            words.append([token, score])
    if words and words[-1][0] == "|":
        words.pop()
    largest = max((abs(s) for _, s in words if s is not None), default=0.0) or 1.0
    spans: list[tuple[str, float | None]] = []
    for word, score in words:
        spans += [(word, None if score is None else round(score / largest, 3)), (" ", None)]
    return spans[:-1]


# gradio's HighlightedText draws a score s > 0 in rgba(239, 68, 60, s) and s < 0 in rgba(128, 90, 213, -s)
ATTRIBUTION_KEY = ('<small>Key: <span style="background: rgba(239, 68, 60, 0.7); padding: 0 0.4em">raised it</span> '
                   '<span style="background: rgba(239, 68, 60, 0.25); padding: 0 0.4em">a little</span> '
                   '<span style="padding: 0 0.4em">no effect</span> '
                   '<span style="background: rgba(128, 90, 213, 0.25); padding: 0 0.4em">lowered it a little</span> '
                   '<span style="background: rgba(128, 90, 213, 0.7); padding: 0 0.4em">lowered it</span></small>')


def attribution_caption(lead: str, result: Any) -> str:
    """What an attribution's coloured words mean, with the probability it explains and its completeness gap."""
    return (f"{lead}: the model gives it {result.output:.2f}, and {result.baseline:.2f} with every word blanked out. "
            f"Red words raised it, purple ones lowered it; the colours add up to the difference within "
            f"{result.gap:.1%}.")
