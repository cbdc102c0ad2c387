"""Choose the examples the app shows beside a shipped model from what the model does, and write its examples.json.

Why: each example's label makes a claim ("she opened the [MASK]" → "door" first; "continuation" for a pair it judges
to follow; "layer 2, head 1: the previous token"), and tests/test_shipped_model.py checks every claim against the
model. Written by hand for one model, the claims break with the next; here candidates are tried through the app's own
handlers (as the test reads them) and only what the model does is written, including where it is wrong.

    python benchmarks/choose_examples.py checkpoints/small-english
"""
from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)
import torch

from bert_demo.app.folders import EXAMPLES_NAME
from bert_demo.app.registry import Registry
from bert_demo.app.tabs import attention, fill, nsp
from bert_demo.app.tabs.attention import VIEWS

# (sentence, the word it is about): everyday first, then news and books, as a visitor's first tries would be
FILL_MASK = [
    ("she opened the [MASK] and walked in.", "door"),
    ("she wrote a [MASK] to her mother.", "letter"),
    ("there are seven days in a [MASK].", "week"),
    ("the doctor told him to stay in [MASK].", "bed"),
    ("he brushed his [MASK] before going to bed.", "teeth"),
    ("i keep the milk in the [MASK].", "fridge"),
    ("we had breakfast in the [MASK].", "kitchen"),
    ("it was raining, so she took her [MASK].", "umbrella"),
    ("they watched a [MASK] at the cinema.", "movie"),
    ("he drove his [MASK] to work.", "car"),
    ("please turn off the [MASK] when you leave.", "lights"),
    ("the sun rises in the [MASK].", "east"),
    ("she drank a glass of [MASK] with her breakfast.", "milk"),
    ("he was late because he missed the [MASK].", "bus"),
    ("the president of the united [MASK] spoke on tuesday.", "states"),
    ("the [MASK] of france is paris.", "capital"),
    ("he scored two [MASK] in the second half.", "goals"),
    ("the ship sailed across the [MASK].", "sea"),
    ("can i have a cup of [MASK], please?", "tea"),
    ("my fellow [MASK], tonight i speak to you.", "americans"),
]
NEXT_SENTENCE = [  # (A, B, B really follows A, what the pair is)
    ("The president signed the executive order on Friday.", "The order bans travel from seven countries.", True,
     "executive order → travel ban"),
    ("He lost his keys on the way home.", "So he had to climb in through the kitchen window.", True,
     "lost keys → window"),
    ("Can you book me a table for two tonight?", "Sure, what time would you like?", True, "booking → time"),
    ("It started to rain heavily.", "We ran inside to stay dry.", True, "rain → inside"),
    ("The president signed the executive order on Friday.", "The striker scored in the 90th minute.", False,
     "executive order → football"),
    ("He lost his keys on the way home.", "Congress passed the budget in March.", False, "keys → budget"),
    ("Can you book me a table for two tonight?", "The whale rose out of the sea.", False, "booking → whale"),
    ("It started to rain heavily.", "Shares in the bank fell by ten percent.", False, "rain → shares"),
]
ATTENTION_PAIRS = [
    ("north korea fired a ballistic missile on sunday.", "the united states and japan condemned the test."),
    ("the whale rose out of the sea.", "the sailors shouted and ran to the boats."),
    ("the city was founded by the romans.", "it became an important trading centre in the middle ages."),
]


def fill_mask_examples(registry: Registry, model: str) -> list[dict]:
    """Up to six sentences the model answers first, then two it has in its top 5 but not first, then one with
    two [MASK]s (no single answer)."""
    right, close = [], []
    for text, answer in FILL_MASK:
        guesses = fill.fill_mask(registry, model, sentence=text, top_k=5)["mask_label_0"]
        if guesses and next(iter(guesses)) == answer:
            right.append({"text": text, "answer": answer, "first": True})
        elif answer in guesses:
            close.append({"text": text, "answer": answer, "first": False})
    return right[:6] + close[:2] + [{"text": "the [MASK] sat on the [MASK]."}]


def next_sentence_examples(registry: Registry, model: str) -> list[dict]:
    """Every candidate pair the model judges rightly, and at most one continuation it misses (said so)."""
    chosen, missed = [], []
    for a, b, follows, what in NEXT_SENTENCE:
        judged = nsp.next_sentence(registry, model, text_a=a, text_b=b)["nsp_result"]["B follows A"] > 0.5
        kind = "continuation" if follows else "random"
        if judged == follows:
            chosen.append({"a": a, "b": b, "label": f"{kind}: {what}", "follows": follows})
        elif follows:
            missed.append({"a": a, "b": b, "label": f"continuation the model misses: {what}", "follows": False})
    return chosen + missed[:1]


def _map(registry: Registry, model: str, a: str, b: str, layer: int, head: int, view: str, hide: bool):
    """The map the Attention tab draws: its row tokens, column tokens and weights."""
    shown = attention.attention(registry, model, text_a=a, text_b=b, layer=layer, head=head, view=VIEWS[view],
                                hide=hide)["att_plot"]
    return list(shown.layout.yaxis.ticktext), list(shown.layout.xaxis.ticktext), torch.tensor(shown.data[0].z)


def attention_examples(registry: Registry, model: str, layers: int, heads: int) -> list[dict]:
    """The head that most looks at the previous token, and the next one (share > 0.6, as the test requires), the head
    whose words most look at [SEP], and the rollout, where every word draws most on its own sentence."""
    best: dict[str, tuple[float, dict]] = {}
    a, b = ATTENTION_PAIRS[0]
    for layer in range(1, layers + 1):
        for head in range(1, heads + 1):
            rows, cols, matrix = _map(registry, model, a, b, layer, head, "head", False)
            words = [i for i, t in enumerate(rows) if t not in ("[CLS]", "[SEP]")]
            for name, offset in (("previous", -1), ("next", 1)):
                share = float(torch.stack([matrix[i, i + offset] for i in words]).mean())
                if share > 0.6 and share > best.get(name, (0.0, {}))[0]:
                    best[name] = (share, _example(a, b, layer, head, "head", False, f"the {name} token"))
            sep = sum(cols[int(matrix[i].argmax())] == "[SEP]" for i in words) / len(words)
            if sep > 0.5 and sep > best.get("sep", (0.0, {}))[0]:
                best["sep"] = (sep, _example(a, b, layer, head, "head", False, "most words look at “[SEP]”"))
    chosen = [best[name][1] for name in ("previous", "next", "sep") if name in best]
    for a, b in ATTENTION_PAIRS:
        rows, _, matrix = _map(registry, model, a, b, layers, 1, "rollout", True)
        first = len(registry.catalog.load(model).tokenizer.tokenize(a))
        own = [matrix[i, :first].sum() if i < first else matrix[i, first:].sum() for i in range(len(rows))]
        if min(own) > 0.5:
            chosen.append({"a": a, "b": b, "layer": layers, "head": 1, "view": "rollout", "hide_special": True,
                           "label": f"rollout: after {layers} layers, every word draws most on its own sentence"})
            break
    return chosen


def _example(a: str, b: str, layer: int, head: int, view: str, hide: bool, what: str) -> dict:
    return {"a": a, "b": b, "layer": layer, "head": head, "view": view, "hide_special": hide,
            "label": f"layer {layer}, head {head}: {what}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    folder = args.folder.resolve()
    model = f"checkpoints/{folder.name}"
    with tempfile.TemporaryDirectory() as runs:
        registry = Registry(checkpoints_dir=folder.parent, runs_dir=runs, allow_hub=False)
        config = registry.catalog.load(model).model.config
        examples = {"about": "Examples the app shows for this model, each with the claim its label makes, chosen "
                             "from what the model does by benchmarks/choose_examples.py; "
                             "tests/test_shipped_model.py checks every claim against the model.",
                    "fill_mask": fill_mask_examples(registry, model),
                    "next_sentence": next_sentence_examples(registry, model),
                    "attention": attention_examples(registry, model, config.num_hidden_layers,
                                                    config.num_attention_heads)}
    (folder / EXAMPLES_NAME).write_text(json.dumps(examples, indent=1, ensure_ascii=False) + "\n")
    for kind in ("fill_mask", "next_sentence", "attention"):
        print(f"{kind}: " + "; ".join(re.sub(r"\s+", " ", e.get("label", e.get("text", ""))) + (
            f" → {e['answer']} ({'first' if e['first'] else 'in the top 5'})" if "answer" in e else "")
            for e in examples[kind]))


if __name__ == "__main__":
    main()
