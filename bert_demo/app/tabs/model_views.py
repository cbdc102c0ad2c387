"""What the Model tab says: how BERT is built (the explainer), and a model's facts: its configuration, size, how
and on what it was trained (its recipe, as the Train tab tells it), and its last metrics."""
from __future__ import annotations

from typing import Any

from bert_demo.app.runs.estimates import duration
from bert_demo.app.folders import short_name
from bert_demo.app.tabs.train_views import recipe_markdown
from bert_demo.data.sources import MIX_ABOUT

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
