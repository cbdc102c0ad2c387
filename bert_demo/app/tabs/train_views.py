"""What the Train tab says: its line before a run and while it waits for the slot (or someone else's run has it),
the limits a visitor's run has here, the recipe chosen (how it differs from the paper's, and why the fast one is the
app's), the held-out readout, and what memorising and a next-sentence accuracy at chance mean. Times are
`estimates.py`'s words."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bert_demo.app.runs.estimates import minutes
from bert_demo.app.text import escape
from bert_demo.training.settings import label

if TYPE_CHECKING:
    from bert_demo.app.runs.slot import Busy, Place
    from bert_demo.app.state.forms import Caps


TRAIN_IDLE = ("Press **Start training** to pre-train a small BERT from scratch: what it is doing, the curves and its "
              "guesses appear here as it learns.")


CSS = """  /* this tab's rules of the page's style sheet (ui.CSS) */
#status { min-height: 2.2em; }
#status p { font-size: 1.05em; margin: 0.2em 0; }
#train-controls { align-items: center; }  /* the buttons keep their own height beside a long status */
#train-controls > #status { flex: 1 1 250px !important; min-width: min(250px, 100%) !important; }  /* or wraps */
@media (max-width: 640px) {  /* a phone: while the visitor's run is followed (Stop is red), its charts come first */
  #tab-train:has(#stop.stop) #train-charts { order: -1; } }
#probe .empty { min-height: 5rem !important; height: 5rem !important; }
#upload .upload-container { padding-top: 1.8em; }  /* below the label */
#readout table { display: block; overflow-x: auto; }  /* a phone scrolls it */
#readout td { overflow-wrap: normal; word-break: normal; }  /* words stay whole: a phone scrolls the table */
#readout th, #readout td:nth-child(2) { white-space: nowrap; }
#readout td:first-child { min-width: 13em; }
#readout td:nth-child(3) { min-width: 9em; }
@media (max-width: 640px) {  /* a phone: the table fits the screen, the guesses in view beside the sentence */
  #readout table { display: table; width: 100%; }
  #readout td:first-child, #readout td:nth-child(3) { min-width: 0; }
  #readout th { white-space: normal; }
  #readout th, #readout td { padding: 4px 6px !important; } }
"""


def busy_text(busy: Busy | None) -> str:
    """The line about someone else's run in the training slot ("" when the slot is free): how far it is, who waits,
    and how long a run started now would wait (or that the line takes none for a while)."""
    if busy is None:
        return ""
    what = "fine-tuning run" if busy.fine_tuning else "pre-training run"
    if busy.of_experiment:
        what += f" ({busy.of_experiment[0]} of the {busy.of_experiment[1]} of an experiment)"
    queue = (f", and {busy.waiting} more {'visitor waits' if busy.waiting == 1 else 'visitors wait'} in line"
             if busy.waiting else "")
    ahead = busy.seconds_ahead
    wait = (" A run you start now waits in line for it." if ahead is None else
            f" A run you start now waits about {minutes(ahead)} for the slot." if ahead <= busy.max_wait_s else
            f" The line takes no more runs for about {minutes(ahead - busy.max_wait_s)}: nobody is asked to wait "
            f"more than {minutes(busy.max_wait_s)}.")
    return (f"**Busy:** someone else's {what} has the training slot now (step {busy.step:,} of {busy.steps:,})"
            f"{queue}.{wait}")


def waiting_text(place: Place | None, starting: str) -> str:
    """Where a visitor's ticket stands in line, or `starting` once it has left the line for the slot."""
    if place is None:
        return starting
    where = "next in line" if place.number == 1 else f"number {place.number} in line"
    left = f" The runs ahead of yours have about {minutes(place.seconds_ahead)} left." if place.seconds_ahead else ""
    return (f"Waiting for the training slot: you are {where}{', after the run training now' if place.after_run else ''}"
            f".{left}")


def caps_text(caps: Caps, where: str) -> str:
    """The limits one visitor's run has on this machine (`where` its runs train), in a sentence: each setting the app
    caps here (`policy.CAPS`), and the largest upload."""
    limits = [f"{label(name)} {' or '.join(cap)}" if isinstance(cap, tuple) else f"{label(name)} at most {cap:,}"
              for name, cap in caps.limits.items()]
    return (f"Limits on this machine ({where}): {', '.join(limits)}; uploads up to {caps.max_upload_bytes // 2**20} "
            "MB. One run trains at a time for everyone.")


def readout_markdown(record: dict[str, Any] | None) -> str:
    """The held-out readout: a few sentences the run never trained on, the hidden word, and the model's guesses."""
    if not record or not record.get("items"):
        return ""
    lines = [f"**Held-out sentences at step {record['step']:,}** (never trained on). "
             + f"Always guessing “{record['baseline_token']}” would score {record['baseline_acc']:.0%} of held-out "
               "words.",
             "", "| sentence | word | the model's guesses |", "|---|---|---|"]
    for item in record["items"]:
        mark = "✓" if item["right"] else "✗"
        guesses = " · ".join(f"{escape(token)} {p:.0%}" for token, p in item["guesses"])
        lines.append(f"| {escape(item['text'])} | {escape(item['answer'])} | {mark} {guesses} |")
    return "\n".join(lines)


MEMORISING_GAP = 0.3  # training accuracy this far above held-out accuracy: the run is learning its text by heart


NSP_CHANCE_BAND = 0.05  # next-sentence accuracy this close to 50% is chance (one standard error on 256 pairs: 3%)


def memorising_note(records: list[dict[str, Any]]) -> str:
    """When training accuracy runs far ahead of held-out accuracy, say what that means (a small text learned by
    heart); otherwise nothing."""
    train = next((r for r in reversed(records) if r.get("kind") == "train"), None)
    val = next((r for r in reversed(records) if r.get("kind") == "val"), None)
    if train is None or val is None or train["mlm_acc"] - val["mlm_acc"] < MEMORISING_GAP:
        return ""
    return (f"**Learned by heart, not learned English.** It now guesses {train['mlm_acc']:.0%} of the masked words "
            f"of the text it trains on, but {val['mlm_acc']:.0%} in the paragraphs held out of it. That gap between "
            "the solid (training) and dashed (held-out) accuracy lines is memorising: the model has stored these "
            "sentences, not learned how English works. Try Fill-mask on one of the training sentences, then on a "
            "new one. More, and more varied, text closes the gap.\n\n")


# the pairs after which a run of each size was measured rising above chance (benchmarks/README.md): mini read 0.63 at
# 44,800 pairs and 0.77 at 76,800; tiny never did (None: 0.47-0.54 through 96,000); a size not measured, NSP_SLOW_PAIRS
NSP_RISES_AFTER: dict[str, int | None] = {"tiny": None, "mini": 44_800}
NSP_SLOW_PAIRS = 200_000


NSP_MEASURED = {  # held-out next-sentence accuracy measured here (benchmarks/README.md), in a few words
    "tiny": "0.47-0.54 through 96,000 pairs",
    "mini": "0.65 or more after 51,200-64,000 pairs, 0.68-0.77 after 76,800; the shipped mini-english 0.89 after "
            "about 1.2 M",
}


def nsp_expectation(preset: str, steps: Any, batch_size: Any) -> str:
    """What next-sentence prediction will do in the run the form describes, from measurement, and why the chart
    draws it twice (Lan et al. 2019, ALBERT, §4.6; Liu et al. 2019, RoBERTa, §4.2)."""
    try:
        pairs = int(steps) * int(batch_size)
    except (TypeError, ValueError):
        return ""
    measured = NSP_MEASURED.get(preset, "not measured at this size")
    rises = NSP_RISES_AFTER.get(preset, NSP_SLOW_PAIRS)
    expect = "a slow rise above chance" if rises is not None and pairs >= rises else "chance (0.5), or little above it"
    return (f"<small>**Next-sentence prediction: expect {expect}** in this run's {pairs:,} pairs ({preset}, measured "
            f"here: {measured}; BERT had seen {pairs:,} pairs after {max(1, pairs // 256):,} of its million steps). "
            "It is drawn twice: B from any other document, which the topic alone tells apart, and B from another "
            "document of A's source, which only coherence does. ALBERT found the paper's task learns mostly topic; "
            "the shipped small-english tells 97% of the first kind and 73% of the second.</small>")


def nsp_chance_note(records: list[dict[str, Any]]) -> str:
    """When a finished run's next-sentence accuracy is still at chance, say why that is no fault of the run: the
    app's short runs learn masked words long before they learn to compare two segments."""
    val = next((r for r in reversed(records) if r.get("kind") == "val" and "nsp_acc" in r), None)
    if val is None or abs(val["nsp_acc"] - 0.5) >= NSP_CHANCE_BAND:
        return ""
    return (f"**Next-sentence prediction stayed at chance ({val['nsp_acc']:.0%}).** Guessing masked words needs "
            "only the neighbours, and comes within a few hundred steps; telling a true next sentence from a random "
            "one needs the model to compare what two segments are about, and a run this short does not learn "
            "that. We tried: a 2-layer model stays at chance after 1,000 steps even with that loss weighted ten "
            "times, or with [CLS] reading the whole pair from the start (benchmarks/README.md). BERT reached 97-98% "
            "on it after a million steps of 256 pairs (Devlin et al. 2019, §3.1).\n\n")


# a recipe's settings as people read them (settings.recipe_changes), each value in words
RECIPE_WORDS: dict[str, tuple[str, Callable[[Any], str]]] = {  # in the order a recipe is told
    "mask_prob": ("masking rate", lambda v: f"{v:.0%}"),
    "mask_replace": ("of the picked, made [MASK]", lambda v: f"{v:.0%} (the rest half a random word, half kept)"),
    "random_b": ("a random B comes from", lambda v: "another document of A's source" if v == "same-source"
                 else "any other document"),
    "local_heads": ("heads started on the previous and the next token",
                    lambda v: f"{v} a layer" if v else "none: every head starts at random"),
    "position_scale": ("scale of the starting position code, in BERT's", lambda v: f"{v:g} ×"),
    "unigram_bias": ("masked-LM bias at the start", lambda v: "the words' log frequencies" if v else "0"),
    "qk_scale": ("query and key weights at the start, in BERT's", lambda v: f"{v:g} ×"),
    "mimetic": ("keys started equal to queries", lambda v: "yes" if v else "no"),
    "sinusoid_positions": ("positions started at sinusoids", lambda v: "yes" if v else "no"),
    "dropout": ("dropout", lambda v: "0.1 (the model size's)" if v is None else "none" if v == 0 else f"{v:g}"),
    "schedule": ("learning-rate schedule", lambda v: "one-cycle" if v == "triangle" else "warm-up, then linear decay"),
    "adam_eps": ("Adam's ε", lambda v: f"{v:g}"),
    "beta2": ("Adam's β₂", lambda v: f"{v:g}"),
    "nsp_weight": ("weight of the next-sentence loss", lambda v: f"{v:g}"),
    "short_seq_steps": ("steps on short sequences first", lambda v: f"{v:,}"),
}


RECIPE_NAMES = {"fast": "this app's fast recipe", "paper": "BERT's recipe (the paper's)", None: "its own recipe"}


FAST_RECIPE_WHY = ("The fast recipe starts the model where BERT's spends its first minutes: with its attention on "
                   "neighbouring words and its guesses at the words' frequencies, it leaves the frequent-token "
                   "plateau after about 1.2 M tokens, where BERT's recipe needed 41 M (benchmarks/README.md).")


def recipe_markdown(config: Any, lead: str = "") -> str:
    """How a pre-training config's recipe differs from the paper's, a setting a row (`settings.recipe_changes`);
    that it is the paper's, where nothing differs."""
    from bert_demo.training.settings import recipe_changes, recipe_of

    name = RECIPE_NAMES[recipe_of(config)]
    name = name if lead else name[0].upper() + name[1:]
    changes = sorted(recipe_changes(config), key=lambda change: list(RECIPE_WORDS).index(change[0]))
    if not changes:
        return f"{lead}**{name}**: every setting as in the paper (Devlin et al. 2019, Appendix A.2)."
    rows = [f"- {RECIPE_WORDS[setting][0]}: **{RECIPE_WORDS[setting][1](ours)}** (BERT's: "
            f"{RECIPE_WORDS[setting][1](paper)})" for setting, ours, paper in changes]  # a list: it fits a phone
    return "\n".join([f"{lead}**{name}**, where it differs from BERT's:", "", *rows])
