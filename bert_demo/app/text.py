"""What the app's pages say: the introduction, the explainer, the Model tab's facts, the training status line, the
words around the look-inside views (captions, the per-layer table, clickable words), and the fine-tuning verdict."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bert_demo import plots
from bert_demo.app.folders import short_name
from bert_demo.records import Record
from bert_demo.train_config import APP_FINETUNE

if TYPE_CHECKING:
    from bert_demo.app.forms import Caps
    from bert_demo.app.job import TrainingJob
    from bert_demo.app.pace import Pace

INTRO = """# BERT, from scratch
A small BERT, built and pre-trained by this project on 13 million words of English. Below, it already fills in
the `[MASK]` of a sentence: change the sentence and press Enter. Then look inside it, train your own, and fine-tune
it to see what pre-training bought.
"""

START_HERE = (("fill", "① Its guesses"), ("attention", "② Where it looks"), ("train", "③ Train your own"),
              ("finetune", "④ What pre-training buys"))  # (tab, words): the start-here row's buttons

EXPLAINER = """### How BERT is built (Devlin et al. 2019)
1. **Embeddings.** Text is split into WordPiece tokens; `[CLS]` starts the input and `[SEP]` ends each sentence.
   Each token's vector is the sum of a *token* embedding, a *position* embedding and a *segment* (sentence A or B)
   embedding.
2. **Encoder.** A stack of identical layers. In each, **multi-head self-attention** lets every token mix in
   information from every other token (each head with its own pattern), then a **feed-forward** network transforms
   each token on its own; both parts have a residual connection and LayerNorm.
3. **Masked-LM head.** 15% of the tokens are hidden during pre-training and the model must guess them from both
   sides of the context.
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
PHASES = {  # what a run's preparation is doing, by how its status begins: said beside the status
    "loading corpus": "reading the text (a named corpus is fetched once, then read from the cache)",
    "preparing the tokenizer": "learning a vocabulary of word pieces from the text: a few seconds, kept for the "
                               "next run on the same corpus",
    "building pre-training examples": "cutting the text into word pieces and sentence pairs to mask: a few seconds",
    "training on": "building the model; the first steps come next",
    "loading the labelled examples": "reading the labelled sentences",
    "starting the classifier": "building the classifier on the encoder",
}

NO_MODEL = ("⚠️ There is no model yet: train one in the **Train** tab (a few minutes with the defaults). "
            "It then appears in the model selector.")


def caps_text(caps: Caps, device: str) -> str:
    """The limits one visitor's run has on this machine, in a sentence."""
    steps, batch = caps.bounds("steps")[1], caps.bounds("batch_size")[1]
    seq_len, vocab = caps.bounds("seq_len")[1], caps.bounds("vocab_size")[1]
    return (f"Limits on this machine ({device}): at most {steps:,} steps, batch {batch}, sequence length "
            f"{seq_len}, vocabulary {vocab:,}, presets {', '.join(caps.choices('preset'))}, uploads up to "
            f"{caps.max_upload_bytes // 2**20} MB. One run trains at a time for everyone.")


def job_status(job: TrainingJob) -> str:
    """One line: step, speed, time spent and left; or how the run ended."""
    total, done = job.trainer.config.steps, job.done
    elapsed = time.perf_counter() - job.started
    if done is not None:
        where = (f" Saved as runs/{job.name}: choose “{job.name} (trained here)” in the Model list to look inside it."
                 if done.get("checkpoint") else "")
        message = f" {done['message']}" if done.get("message") else ""
        words = {"finished": f"Finished {done['step']} steps", "stopped": f"Stopped at step {done['step']}",
                 "diverged": f"Diverged at step {done['step']}",
                 "out of memory": f"Out of memory at step {done['step']}", "error": "Training failed"}
        return f"{words.get(done['reason'], done['reason'])} in {clock(elapsed)}.{where}{message}"
    train = [r for r in job.records if r.get("kind") == "train"]
    if not train:
        statuses = [r["message"] for r in job.records if r.get("kind") == "status"]
        status = statuses[-1] if statuses else "starting its process"
        gloss = next((words for start, words in PHASES.items() if status.startswith(start)), "")
        return f"Preparing ({clock(elapsed)}): {status}…" + (f" *({gloss})*" if gloss else "")
    last = train[-1]
    source = getattr(job.trainer.config, "init_from", None)  # a fine-tuning run has none
    prefix = f"Continuing {Path(source).name} · " if source else ""  # domain adaptation, said on every line
    step = max(job.trainer.step, last["step"])  # the step it is on now, not the last one it logged
    line = f"{prefix}Step {step}/{total} · {last['tokens_per_s']:,.0f} tokens/s · {clock(elapsed)} elapsed"
    left, pace = job.seconds_left, job.pace()
    if left is not None:
        line += f" · about {clock(left)} left"
        if pace[1] is None and pace[2]:  # no check has ended yet: its time is not known
            line += f" and {pace[2]} check{'s' if pace[2] > 1 else ''} on held-out sentences, not timed yet"
    latest = job.records[-1]
    if latest.get("kind") == "status":  # a phase after the steps, such as a fine-tuning run's scoring
        return f"{line} · {latest['message']}…"
    if latest.get("kind") == "check":
        return f"{line} · checking on held-out sentences…"
    return line


def estimate_text(what: str, seconds: float, parts: str, pace: Pace, slot_busy: bool, after: str = "") -> str:
    """How long `what` ("This run", "The experiment") would take here now, from a pace measured just now (`parts`:
    what the time is made of; `after`: what comes on top, untimed), and whether the machine is busy."""
    line = f"**{what}: about {duration(seconds)} on this machine now**: {parts}, timed here just now{after}."
    if pace.busy:
        why = "a run of ours is training" if slot_busy else "other programs are running"
        line += (f" The machine is busy ({why}: the timing got {pace.share:.0%} of its {pace.threads} "
                 f"core{'s' if pace.threads > 1 else ''}' time): on a quiet one this is faster.")
    return f"<small>{line}</small>"


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
                f"{info.get('step') or 0:,} of {train.get('steps'):,} steps, batch {train.get('batch_size')}, "
                f"peak learning rate {train.get('lr'):g}{spent}."]
    start = train.get("init_from")  # a continued run has its start's shape, whatever preset its config names
    shape = (f"continued from **{short_name(str(start))}**" if start
             else f"preset **{train.get('preset')}**")
    return ["#### Training",
            f"Corpus **{corpus_name(train.get('corpus', '?'))}**, {shape}, "
            f"{info.get('step') or 0:,} of {train.get('steps'):,} steps, batch {train.get('batch_size')}, "
            f"sequence length {train.get('seq_len')}, peak learning rate {train.get('lr'):g}{spent}."]


def _metric_lines(info: dict[str, Any]) -> list[str]:
    """The last training and validation metrics as a table of one metric a row (its columns: where each was
    measured), so that a phone shows it whole: six columns a metric were cut off at 390 px, with no hint."""
    records = [(name, r) for name, r in [("train", info.get("last_train")), ("validation", info.get("last_val"))]
               if r]
    if not records:
        return []
    said = "The last training record and the last validation"
    if "mlm_loss" not in records[-1][1]:  # a classifier's run: its loss and accuracy, and its test score
        if records[-1][1].get("test_acc") is not None:
            last = records[-1][1]
            records.append(("test", {"loss": last.get("test_loss"), "acc": last["test_acc"]}))
            said += ", and the test sentences scored at the end"
        metrics = [("step", "step", "{}"), ("loss", "loss", "{:.3f}"), ("accuracy", "acc", "{:.1%}")]
    else:
        metrics = [("step", "step", "{}"), ("MLM loss", "mlm_loss", "{:.3f}"), ("MLM accuracy", "mlm_acc", "{:.1%}"),
                   ("NSP loss", "nsp_loss", "{:.3f}"), ("NSP accuracy", "nsp_acc", "{:.1%}")]
    return ["", f"{said}:", "", "| | " + " | ".join(name for name, _ in records) + " |",
            "|---|" + "---|" * len(records),
            *[f"| {label} | " + " | ".join(_cell(r.get(key), shape) for _, r in records) + " |"
              for label, key, shape in metrics]]


def _cell(value: Any, shape: str) -> str:
    """A metric in its table's cell; blank where it was not measured (a test score has no step)."""
    return "" if value is None else shape.format(value)


def duration(seconds: float) -> str:
    """A training time as people say it: 42 s, 12 min, 16 h 43 min."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def seconds(value: float) -> str:
    """A step's time: 0.17 s, 2.9 s."""
    return f"{value:.2f} s" if value < 1 else f"{value:.1f} s"


def corpus_name(corpus: str) -> str:
    return " + ".join("your upload" if "/" in part or "\\" in part else part for part in str(corpus).split(","))


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


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
    """The logit lens as a Markdown table: a row per layer, a column per [MASK] with its top guesses."""
    layers = len(lens[0]) if lens else 0
    lines = ["| layer | " + " | ".join(f"[MASK] {i + 1}" for i in range(len(lens))) + " |",
             "|---|" + "---|" * len(lens)]
    for layer in range(layers):
        name = f"{layer + 1}" + (" (last)" if layer == layers - 1 else "")
        cells = [" · ".join(f"{_escape(token)} {p:.0%}" for token, p in mask[layer]) for mask in lens]
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


# ----------------------------------------------------------------------------------------------------------------
# the fine-tuning experiment's verdict: what pre-training bought, in words

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
        f"{plots.STARTS[init]} **{score[f'test_{key}']:.3f}**" for init, score in scores.items()) + "."]
    if "random" in scores:
        lines.append(_gap("Pre-training", scores["pretrained"][f"test_{key}"] - scores["random"][f"test_{key}"],
                          "in this domain"))
        lines.append(_head_start(finished["pretrained"], finished["random"], key))
        if outside and "outside_acc" in scores["random"]:
            lines.append(_gap("Pre-training", scores["pretrained"]["outside_acc"] - scores["random"]["outside_acc"],
                              f"on {outside}, a domain neither run trained on"))
            lines.append(_below_majority(scores, outside))
    if WELL_READ in scores:
        lines.append(_well_read(scores, key, well_read or plots.STARTS[WELL_READ]))
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
