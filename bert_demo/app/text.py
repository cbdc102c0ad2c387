"""What the app's pages say: the introduction, the explainer, the Model tab's facts, the words around the
look-inside views (captions, the per-layer table, clickable words, attributions) and around a pre-training run
(its limits, the held-out readout, what memorising and a next-sentence accuracy at chance mean). Times are
`estimates.py`'s words; the fine-tuning verdict is `verdict.py`'s."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bert_demo.app.runs.estimates import duration, minutes
from bert_demo.app.state.folders import short_name
from bert_demo.data.sources import MIX_ABOUT

if TYPE_CHECKING:
    from bert_demo.app.runs.slot import Busy, Place
    from bert_demo.app.state.forms import Caps
    from bert_demo.config import BertConfig

WORDS_READ = {"small-english": "12.8 million", "mini-english": "5.6 million"}  # the shipped models' text, in words
INTRO = f"""# BERT, from scratch
A small BERT, built and pre-trained by this project on {WORDS_READ["small-english"]} words of English (corpus v4:
modern prose and conversation). Below, it already fills in the `[MASK]` of a sentence: change the sentence and press
Enter. Then look inside it, train your own, and fine-tune it to see what pre-training bought.
"""

START_HERE = (("fill", "① Its guesses"), ("attention", "② Where it looks"), ("steps", "③ Step by step"),
              ("train", "④ Train your own"), ("finetune", "⑤ What pre-training buys"))  # (tab, words): the buttons

EXPLAINER = """### How BERT is built (Devlin et al. 2019)
1. **Embeddings.** Text is split into WordPiece tokens; `[CLS]` starts the input and `[SEP]` ends each sentence.
   Each token's vector is the sum of a *token* embedding, a *position* embedding and a *segment* (sentence A or B)
   embedding.
2. **Encoder.** A stack of identical layers. In each, **multi-head self-attention** lets every token mix in
   information from every other token (each head with its own pattern), then a **feed-forward** network transforms
   each token on its own; both parts have a residual connection and LayerNorm.
3. **Masked-LM head.** Some of the tokens are hidden during pre-training (15% in the paper; this model's own rate
   is in its recipe, with its facts) and the model must guess them from both sides of the context.
4. **Next-sentence head.** The final `[CLS]` vector (through the *pooler*) predicts whether sentence B really
   followed sentence A, or is a random sentence.

5. **Fine-tuning.** The heads are dropped and a small *classifier* on the pooled `[CLS]` vector is trained, with
   the whole encoder, on labelled sentences: the pre-trained encoder is the starting point (§3.2, §4).

Pre-training teaches both tasks at once: watch the two losses fall in the Train tab. The Fine-tune tab then trains
the same classifier from the pre-trained encoder and from random weights, so you see what pre-training bought.
"""

TRAIN_IDLE = ("Press **Start training** to pre-train a small BERT from scratch: what it is doing, the curves and its "
              "guesses appear here as it learns.")
FINETUNE_IDLE = "Press **Fine-tune and compare**."
NO_MODEL = ("⚠️ There is no model yet: train one in the **Train** tab (a few minutes with the defaults). "
            "It then appears in the model selector.")


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
    """The limits one visitor's run has on this machine (`where` its runs train), in a sentence."""
    steps, batch = caps.bounds("steps")[1], caps.bounds("batch_size")[1]
    seq_len, vocab = caps.bounds("seq_len")[1], caps.bounds("vocab_size")[1]
    return (f"Limits on this machine ({where}): at most {steps:,} steps, batch {batch}, sequence length "
            f"{seq_len}, vocabulary {vocab:,}, presets {', '.join(caps.choices('preset'))}, uploads up to "
            f"{caps.max_upload_bytes // 2**20} MB. One run trains at a time for everyone.")


def model_summary(name: str, config: BertConfig, device: str) -> str:
    """The header's line: which model, how big, where it runs."""
    return (f"{name}: {config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
            f"{config.num_attention_heads} heads, vocabulary {config.vocab_size:,}; runs on {device}")


def model_markdown(info: dict[str, Any]) -> str:
    """The Model tab's facts: configuration, size, device, training data and last metrics."""
    c = info["config"]
    lines = [f"### {info['name']}",
             f"**{info['parameters']:,} parameters** · runs on **{info['device']}** · "
             f"vocabulary {info['vocab_size']:,} WordPiece tokens",
             "",
             "| size | |",  # one setting a row: six columns were cut off beside the explainer, and on a phone
             "|---|---|",
             f"| layers (L) | {c['num_hidden_layers']} |", f"| hidden size (H) | {c['hidden_size']} |",
             f"| heads (A) | {c['num_attention_heads']} |", f"| feed-forward | {c['intermediate_size']} |",
             f"| max positions | {c['max_position_embeddings']} |", f"| dropout | {c['hidden_dropout_prob']} |"]
    if info.get("missing_weights"):
        lines += ["", f"⚠️ The checkpoint had no weights for {len(info['missing_weights'])} tensors (e.g. "
                      f"`{info['missing_weights'][0]}`): those parts are random."]
    lines += ["", *_training_lines(info), *_metric_lines(info)]
    return "\n".join(lines)


def _training_lines(info: dict[str, Any]) -> list[str]:
    train = info.get("train_config")
    if not train:
        return ["No training record (`bert_demo.json`) beside this checkpoint: it was not trained here."]
    spent = (f", {duration(info['elapsed'])} of training on {info.get('trained_on') or '?'}"
             if info.get("elapsed") else "")
    if "task" in train:  # a fine-tuning run
        start = {"pretrained": "the weights of", "frozen": "the frozen encoder of",
                 "random": "random weights, in the shape of"}.get(train.get("init"), "")
        labels = f"{train['train_examples']:,}" if train.get("train_examples") else "all"
        task = "an uploaded labelled file" if any(c in str(train["task"]) for c in "/\\.") else train["task"]
        model = short_name(str(train.get("model")))
        return ["#### Fine-tuning",
                f"Task **{task}**, from {start} **{model}**, {labels} labelled sentences, "
                f"{info.get('step') or 0:,} of {_planned(info):,} steps, batch {train.get('batch_size')}, "
                f"peak learning rate {train.get('lr'):g}{spent}."]
    start = train.get("init_from")  # a continued run has its start's shape, whatever preset its config names
    shape = (f"continued from **{short_name(str(start))}**" if start
             else f"preset **{train.get('preset')}**")
    corpus = train.get("corpus", "?")
    about = f" ({MIX_ABOUT[corpus]}; the card below lists them)" if corpus in MIX_ABOUT else ""
    return ["#### Training",
            f"Corpus **{corpus_name(corpus)}**{about}, {shape}, "
            f"{info.get('step') or 0:,} of {_planned(info):,} steps, batch {train.get('batch_size')}, "
            f"sequence length {train.get('seq_len')}, peak learning rate {train.get('lr'):g}{spent}.",
            "", _trained_recipe(train)]


def _planned(info: dict[str, Any]) -> int:
    """The steps a run planned: saved with it (a fine-tune whose epochs decide has no `steps` setting), else its
    setting, else the steps it took."""
    return info.get("planned_steps") or info["train_config"].get("steps") or info.get("step") or 0


def _trained_recipe(train: dict[str, Any]) -> str:
    """The recipe a pre-training run's stored settings say it was trained with (settings it predates were BERT's:
    `TrainConfig.from_stored`), told by how it differs from the paper's."""
    from bert_demo.training.settings import TrainConfig

    try:
        config = TrainConfig.from_stored(train)
    except (TypeError, ValueError):
        return "Its recipe could not be read from its training record."
    return recipe_markdown(config, lead="Trained with ")


def _metric_lines(info: dict[str, Any]) -> list[str]:
    """The last training and validation metrics as a table of one metric a row (its columns: where each was
    measured), so that a phone shows it whole: six columns a metric were cut off at 390 px, with no hint."""
    val = info.get("last_val") or {}
    records = [(name, r) for name, r in [("train", info.get("last_train")),
                                         ("held out" if "mlm_loss" in val else "validation", val)] if r]
    if not records:
        return []
    if "mlm_loss" not in records[-1][1]:  # a classifier's run: its loss and accuracy, and its test score
        said = "Measured as it trained: on its last training batches and on the task's validation sentences"
        if records[-1][1].get("test_acc") is not None:
            last = records[-1][1]
            records.append(("test", {"loss": last.get("test_loss"), "acc": last["test_acc"]}))
            said += ", and at the end on its test sentences"
        metrics = [("step", "step", "{}"), ("loss", "loss", "{:.3f}"), ("accuracy", "acc", "{:.1%}")]
    else:
        said = _held_out_text(info.get("train_config") or {})
        metrics = [("step", "step", "{}"), ("MLM loss", "mlm_loss", "{:.3f}"), ("MLM accuracy", "mlm_acc", "{:.1%}"),
                   ("NSP loss", "nsp_loss", "{:.3f}"), ("NSP accuracy", "nsp_acc", "{:.1%}")]
    return ["", f"{said}:", "", "| | " + " | ".join(name for name, _ in records) + " |",
            "|---|" + "---|" * len(records),
            *[f"| {label} | " + " | ".join(_cell(r.get(key), shape) for _, r in records) + " |"
              for label, key, shape in metrics]]


def _held_out_text(train: dict[str, Any]) -> str:
    """Which text a pre-training run's own metrics were measured on, and how: not the card's way."""
    held = f"{train['val_fraction']:.0%} of" if train.get("val_fraction") else "some of"
    masked = f"{train['mask_prob']:.0%}" if train.get("mask_prob") else "some"
    return (f"Measured as it trained: on its last training batches, and on {held} the documents of "
            f"{corpus_name(train.get('corpus', '?'))} that it never trained on, {masked} of their word pieces masked "
            "as in training, next-sentence pairs from the same text. Its card (below, where it has one) scores each "
            "corpus apart, every masked word replaced by [MASK], so its figures differ")


def _cell(value: Any, shape: str) -> str:
    """A metric in its table's cell; blank where it was not measured (a test score has no step)."""
    return "" if value is None else shape.format(value)


def corpus_name(corpus: str) -> str:
    return " + ".join("your upload" if "/" in part or "\\" in part else part for part in str(corpus).split(","))


def attention_caption(rows: int, cols: int, layers: int, heads: int, rollout: bool, source: str | None) -> str:
    """What the attention map shows: how many tokens, and how to read a row (`source`: "A" or "B" when the map
    keeps only one sentence's attention to the other)."""
    shown = f"{rows} tokens shown" if source is None else f"{rows} × {cols} tokens shown"
    reading = (f"Each row is one token of sentence {source} and shows how much of its attention goes to each token "
               "of the other sentence; rows no longer sum to 1: the rest went to its own sentence."
               if source else
               "Each row is one token (the query) and shows how it spreads its attention over the tokens (keys); "
               "rows sum to 1.")
    text = f"{shown}; the model has {layers} layers × {heads} heads. {reading}"
    if rollout:
        text += (" Rollout multiplies the head-averaged maps of layers 1 to this one, adding the residual "
                 "connection (Abnar & Zuidema 2020): how much each input token flows into each position.")
    return text + " The colour scale runs from 0 to the map's largest weight."


def layer_table(lens: list[list[list[tuple[str, float]]]]) -> str:
    """The logit lens as a Markdown table: a row per layer, a column per [MASK] with its top guesses, one a line
    (side by side, a [MASK]'s three guesses ran past a phone's right edge)."""
    layers = len(lens[0]) if lens else 0
    lines = ["| layer | " + " | ".join(f"[MASK] {i + 1}" for i in range(len(lens))) + " |",
             "|---|" + "---|" * len(lens)]
    for layer in range(layers):
        name = f"{layer + 1}" + (" (last)" if layer == layers - 1 else "")
        cells = ["<br>".join(f"{_escape(token)} {p:.0%}" for token, p in mask[layer]) for mask in lens]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _escape(token: str) -> str:
    """Text as literal Markdown inside a table cell: "|" must not end the cell, nor "*" or "_" start emphasis, nor
    "<" a tag. ("[MASK]" is no link without a "(" after it, and "##s" is no heading inside a cell.)"""
    return re.sub(r"([\\`*_{}|<>])", r"\\\1", token)


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
        guesses = " · ".join(f"{_escape(token)} {p:.0%}" for token, p in item["guesses"])
        lines.append(f"| {_escape(item['text'])} | {_escape(item['answer'])} | {mark} {guesses} |")
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


NSP_SLOW_PAIRS = 200_000  # pairs below which no run measured here left chance by much (mini: 0.59 at 38,400)
NSP_MEASURED = {  # held-out next-sentence accuracy measured here (benchmarks/README.md), in a few words
    "tiny": "0.47-0.54 through 96,000 pairs",
    "mini": "0.56-0.59 after 38,400 pairs, under either draw; the shipped mini-english 0.89 after about 1.2 M",
}


def nsp_expectation(preset: str, steps: Any, batch_size: Any) -> str:
    """What next-sentence prediction will do in the run the form describes, from measurement, and why the chart
    draws it twice (Lan et al. 2019, ALBERT, §4.6; Liu et al. 2019, RoBERTa, §4.2)."""
    try:
        pairs = int(steps) * int(batch_size)
    except (TypeError, ValueError):
        return ""
    measured = NSP_MEASURED.get(preset, "not measured at this size")
    expect = "chance (0.5), or little above it" if pairs < NSP_SLOW_PAIRS else "a slow rise above chance"
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


NEURON_VIEW = ("A head's weight from token *i* to token *j* is made from two vectors the layer computes from each "
               "token: *i*'s **query** and *j*'s **key**. Multiplied dimension by dimension and summed, divided by "
               "√(head size), they give a score; the softmax of the scores over all *j* gives the weights "
               "(Vaswani et al. 2017, §3.2.1). Red is positive, blue negative. A stripe down the middle panel, a "
               "dimension large for every key, adds the same to every score, and so changes no weight. On a phone, "
               "swipe the chart sideways.")

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


# a recipe's settings as people read them (settings.recipe_changes), each value in words
RECIPE_WORDS: dict[str, tuple[str, Callable[[Any], str]]] = {  # in the order a recipe is told
    "mask_prob": ("masking rate", lambda v: f"{v:.0%}"),
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
