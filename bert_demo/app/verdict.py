"""What the Fine-tune tab's experiment says at its end: what pre-training bought, in words.

One paragraph (`verdict`) gives each start's test score in the task's own metric, the gap pre-training made in the
task's domain and outside it, how much faster it learned, what a model that read far more text reached, and what the
frozen encoder did; a gap within what another seed changes is said to be small.
"""
from __future__ import annotations

from bert_demo.app.policy import APP_FINETUNE
from bert_demo.inspection import curves
from bert_demo.training.records import Record

WELL_READ = "well-read"  # the start that read far more text than ours: Google's BERT of its shape, from the hub
SMALL_GAP = 0.02  # a gap under two points is within what seeds alone change: said plainly
METRICS = {"f1": "F1", "matthews": "Matthews correlation", "acc": "accuracy"}  # GLUE's MRPC, CoLA; the rest


def verdict(finished: dict[str, list[Record]], train_examples: int | None, outside: str | None,
            well_read: str | None = None) -> str:
    """One paragraph: each start's test score in the task's metric (accuracy, or GLUE's F1 or Matthews
    correlation, where always answering one class scores 0 however common it is), the gap pre-training made, and
    the gap outside the domain; a small gap said to be small. `well_read` names the well-read start, if it ran."""
    scores = {init: final_record(records) for init, records in finished.items()}
    scores = {init: score for init, score in scores.items() if "test_acc" in score}
    if "pretrained" not in scores:
        return ""
    key = metric_key(scores["pretrained"])
    labels = f"{train_examples:,} labelled sentences" if train_examples else "every labelled sentence"
    lines = [f"**With {labels}**, on test sentences none of the runs saw ({METRICS[key]}): " + ", ".join(
        f"{curves.START_NAMES[init]} **{score[f'test_{key}']:.3f}**" for init, score in scores.items()) + "."]
    if "random" in scores:
        lines.append(_gap("Pre-training", scores["pretrained"][f"test_{key}"] - scores["random"][f"test_{key}"],
                          "in this domain"))
        lines.append(_head_start(finished["pretrained"], finished["random"], key))
        if outside and "outside_acc" in scores["random"]:
            lines.append(_gap("Pre-training", scores["pretrained"]["outside_acc"] - scores["random"]["outside_acc"],
                              f"on {outside}, a domain neither run trained on"))
            lines.append(_below_majority(scores, outside))
    if WELL_READ in scores:
        lines.append(_well_read(scores, key, well_read or curves.START_NAMES[WELL_READ]))
    if "frozen" in scores:
        frozen = scores["frozen"][f"test_{key}"]
        lines.append(f"The frozen encoder (only the classifier learned) reached {frozen:.3f}: "
                     "fine-tuning the whole encoder is what makes its features fit the task.")
    return " ".join(line for line in lines if line)


def _well_read(scores: dict[str, Record], key: str, name: str) -> str:
    """What the model that read far more text (`name`) reached (in the task's metric `key`), beside the selected
    model and (if run) random weights: whether pre-training buys more the more a model read (Turc et al. 2019)."""
    well, selected = scores[WELL_READ][f"test_{key}"], scores["pretrained"][f"test_{key}"]
    line = f"{name}, pre-trained on {APP_FINETUNE['well_read_words']} words, reached **{well:.3f}**"
    if "random" in scores:
        random = scores["random"][f"test_{key}"]
        line += (f": {(well - random) * 100:+.1f} points over random weights, against "
                 f"{(selected - random) * 100:+.1f} for the selected model")
    if well - selected >= SMALL_GAP:
        return line + ". The more text a model read before, the more its pre-training buys."
    return line + ": here all that reading bought no more than the selected model's."


def _below_majority(scores: dict[str, Record], outside: str) -> str:
    """A warning when the outside scores are no better than always answering that domain's commonest class."""
    majority = scores["pretrained"].get("outside_majority")
    if majority is None or any(score.get("outside_acc", 1.0) > majority for score in scores.values()):
        return ""
    return (f"On {outside} no start beats always answering its commonest class ({majority:.3f}): with this many "
            "labels none of them carries its skill to another domain.")


def metric_key(record: Record) -> str:
    """The task's metric in a run's final record: "f1" or "matthews" where it has one (GLUE's MRPC, CoLA), else
    "acc"."""
    return next(k for k in METRICS if f"test_{k}" in record or k == "acc")


def _head_start(pretrained: list[Record], random: list[Record], key: str) -> str:
    """What the first validation says, in the task's metric `key`, of how fast each start learned ("" when the
    two were level there)."""
    first = [next((r for r in records if r.get("kind") == "val"), None) for records in (pretrained, random)]
    if None in first or first[0][key] - first[1][key] < SMALL_GAP:
        return ""
    return (f"It learned faster: at the first validation (step {first[0]['step']}) the pre-trained start had "
            f"{first[0][key]:.3f} against {first[1][key]:.3f}.")


def _gap(subject: str, gap: float, where: str) -> str:
    points = f"{abs(gap) * 100:.1f} points"
    if abs(gap) < SMALL_GAP:
        return (f"{subject} made little difference {where} ({'+' if gap >= 0 else '-'}{points}, within what "
                "another seed can change).")
    return f"{subject} bought **{points}** {where}." if gap > 0 else f"{subject} cost {points} {where}."


def final_record(records: list[Record]) -> Record:
    """The run's last validation record, which carries its test (and outside) scores."""
    return next((r for r in reversed(records) if r.get("kind") == "val"), {})
