"""bert_demo/app/tabs/finetune.py and classifier.py: the Fine-tune tab's experiment trains each start in the training
slot's run process and streams their curves, states the gap, and leaves a classifier that answers and explains itself;
the label-count chart is built from finished runs; every bad input is a message, never a traceback."""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import gradio as gr
import pytest
import torch

from bert_demo.app import header, verdict
from bert_demo.app.policy import APP_FINETUNE
from bert_demo.app.state.forms import Caps
from bert_demo.app.registry import Registry
from bert_demo.app.uploads import UPLOAD_PREFIX
from bert_demo.app.tabs import (
    attention,
    classifier,
    embeddings,
    fill,
    finetune,
    finetune_runs,
    model_views,
    train,
)
from bert_demo.app.tabs.fill_views import attribution_spans
from bert_demo.checkpoint import load_classifier, load_pretrained, save_pretrained
from bert_demo.config import PRESETS, read_config, read_metadata
from bert_demo.inference import classify
from bert_demo.tokenizer import train_tokenizer
from bert_demo.training.settings import FinetuneConfig

WORDS = ["river", "garden", "music", "window", "summer", "letter", "station", "forest"]
OWNER = "visitor-1"


def rows(count: int = 200) -> list[dict]:
    """Sentences whose label a model reads off one word: "wonderful" is positive, "terrible" negative."""
    return [{"text": f"the {WORDS[i % 8]} was {'wonderful' if i % 2 else 'terrible'} today.",
             "label": "positive" if i % 2 else "negative"} for i in range(count)]


def write(path: Path, lines: list[dict] | str | bytes) -> str:
    if isinstance(lines, bytes):
        path.write_bytes(lines)
    else:
        path.write_text(lines if isinstance(lines, str) else "\n".join(json.dumps(row) for row in lines))
    return str(path)


@pytest.fixture(scope="module")
def registry(make_checkpoint, tmp_path_factory) -> Registry:
    """A registry whose one shipped model is a tiny BERT with a vocabulary of the labelled sentences."""
    return labelled_registry(make_checkpoint, tmp_path_factory.mktemp("tuning"))


@pytest.fixture
def google_shaped(make_checkpoint, tmp_path) -> Registry:
    """The same, its model of the shape of Google's BERT-Tiny (2 layers of 128), which the hub has."""
    return labelled_registry(make_checkpoint, tmp_path, PRESETS["tiny"])


def labelled_registry(make_checkpoint, root: Path, shape=None) -> Registry:
    folder = make_checkpoint(root / "checkpoints" / "tiny-test")
    model, _ = load_pretrained(folder)
    texts = [row["text"] for row in rows()]
    save_pretrained(model.__class__((shape or model.config).with_vocab(300)),
                    train_tokenizer([texts], vocab_size=300, min_frequency=1), folder)
    return Registry(checkpoints_dir=root / "checkpoints", runs_dir=root / "runs", allow_hub=False)


@pytest.fixture(scope="module")
def experiment(registry, tmp_path_factory):
    """One experiment through the handler, as the tab runs it: pre-trained and random, 100 labels, 15 steps."""
    upload = write(tmp_path_factory.mktemp("upload") / "mine.jsonl", rows())
    budget = {**APP_FINETUNE, "max_steps": 15}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("bert_demo.app.state.forms.APP_FINETUNE", budget)
        patch.setattr("bert_demo.app.policy.APP_FINETUNE", budget)
        updates = list(finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100",
                                       ["random"], owner=OWNER))
    return updates


def sent(update: gr.components.Component) -> dict:
    """What a component returned as an update sets on the page: the arguments it was given (a dropdown's value
    reads as its first choice when none was given, and the page keeps its own)."""
    return update._constructor_args[0]


def curves(figure) -> dict[str, list[float]]:
    return {trace.name: list(trace.y) for trace in figure.data}


def test_the_experiment_streams_both_starts_curves_and_ends_with_the_gap_in_a_sentence(experiment):
    final = experiment[-1]
    drawn = curves(final["ft_curves"])
    assert len(drawn["pre-trained (validation)"]) >= 4 and len(drawn["random weights (validation)"]) >= 4
    assert all(0.0 <= accuracy <= 1.0 for curve in drawn.values() for accuracy in curve)
    chance = next(t for t in final["ft_curves"].data if t.name.startswith("always the commonest class"))
    assert 0.5 <= chance.y[0] < 1  # the line to beat: the commonest class's share, named in the legend
    assert "pre-trained" in final["ft_verdict"] and "random weights" in final["ft_verdict"]
    assert "points" in final["ft_verdict"] or "little difference" in final["ft_verdict"]
    statuses = " ".join(u.get("ft_status", "") for u in experiment)
    assert tempfile.gettempdir() not in statuses and UPLOAD_PREFIX not in statuses  # no server path is shown
    live = [u for u in experiment if "ft_curves" in u and u is not final]
    starts = [{name for name in curves(u["ft_curves"]) if name.endswith("(validation)")} for u in live]
    assert {"pre-trained (validation)"} in starts  # the first run's curve alone,
    assert {"pre-trained (validation)", "random weights (validation)"} in starts  # then kept while the second trains


def test_a_reloaded_page_rebuilds_the_last_experiment_its_visitor_may_see_from_the_runs_records(registry,
                                                                                                 experiment):
    rebuilt, final = finetune_runs.last_experiment(registry, OWNER), experiment[-1]
    assert rebuilt["ft_status"].startswith("The last experiment here: 2 runs of 15 steps each")
    assert curves(rebuilt["ft_curves"]) == curves(final["ft_curves"]) and rebuilt["ft_verdict"] == final["ft_verdict"]
    assert rebuilt["ft_classifier"].value == final["ft_classifier"].value
    assert sent(rebuilt["ft_model"])["value"] == "checkpoints/tiny-test"  # what it fine-tuned, not the page's default
    hidden = finetune_runs.last_experiment(registry, "someone else")  # trained on OWNER's upload: private to them
    assert all(update == gr.skip() for update in hidden.values())


def test_the_latest_experiments_time_counts_each_of_its_runs_and_is_said_once_it_ends(registry, experiment):
    """"The latest fine-tuning runs here took 3:19" counted one of the experiment's two runs."""
    took = finetune_runs.latest_took(registry, OWNER)
    each = re.fullmatch(r"The latest experiment here took (\d+):(\d\d) of training: (\d+):(\d\d) \(pre-trained\), "
                        r"(\d+):(\d\d) \(random weights\)\.", took)
    assert each, took
    total, first, second = (int(each[i]) * 60 + int(each[i + 1]) for i in (1, 3, 5))
    assert abs(total - first - second) <= 1  # rounded apart
    assert took in experiment[-1]["ft_estimate"]  # the line under Start says so as the experiment ends


@pytest.fixture
def tiny_only(roots, make_checkpoint, tmp_path):
    """A machine that fine-tunes up to the mini shape only, with a small-shaped model ("wide", as small-english is to
    a CPU) and a test-shaped one ("another", as mini-english)."""
    folder = tmp_path / "checkpoints"
    for name in ("tiny-test", "another"):
        shutil.copytree(roots["checkpoints"] / name, folder / name)
    model, tokenizer = load_pretrained(folder / "another")
    save_pretrained(model.__class__(PRESETS["small"].with_vocab(model.config.vocab_size)), tokenizer, folder / "wide")
    return Registry(checkpoints_dir=folder, runs_dir=tmp_path / "runs", device="cpu", allow_hub=False,
                    caps=Caps("cpu", limits={"preset": ("mini",)}))


def test_the_tab_fine_tunes_a_model_this_machine_can_and_follows_the_one_selected_above_where_it_can(
        tiny_only, monkeypatch):
    """It opened on small-english, which a CPU cannot fine-tune, under a note to choose mini-english."""
    monkeypatch.setattr(FinetuneConfig, "model", "checkpoints/another")  # as mini-english
    assert not tiny_only.forms.fine_tunable("checkpoints/wide") and tiny_only.forms.fine_tunable("checkpoints/another")
    assert finetune.model_to_tune(tiny_only, "checkpoints/wide") == "checkpoints/another"
    assert finetune.model_to_tune(tiny_only, "checkpoints/tiny-test") == "checkpoints/tiny-test"
    assert finetune.model_selected(tiny_only, "checkpoints/wide")["ft_model"] == gr.skip()  # it keeps one it can
    assert finetune.model_selected(tiny_only, "checkpoints/tiny-test")["ft_model"] == "checkpoints/tiny-test"


def test_a_reloaded_page_reads_no_weights_again_for_the_layer_chart(registry, experiment, monkeypatch):
    finetune_runs.last_experiment(registry, OWNER)  # the first page load after the experiment may read them
    reads = []
    from bert_demo import checkpoint

    monkeypatch.setattr(checkpoint, "read_weights", lambda *a, **k: reads.append(a) or {})
    rebuilt = finetune_runs.last_experiment(registry, OWNER)
    assert reads == [] and rebuilt["ft_changes"].data  # the same chart, from what the first load measured


def test_the_layer_chart_shows_how_far_each_part_moved_from_where_each_start_began(experiment):
    bars = {trace.name: dict(zip(trace.x, trace.y)) for trace in experiment[-1]["ft_changes"].data}
    assert set(bars) == {"pre-trained", "random weights"}  # the random start from its step-0 snapshot
    assert list(bars["pre-trained"]) == ["embeddings", "layer 1", "layer 2", "layer 3", "pooler"]  # its 3 layers
    assert all(value > 0 for start in bars.values() for value in start.values())


def test_each_start_is_a_saved_run_of_the_same_budget_private_to_the_visitor_of_the_upload(registry, experiment):
    runs = [e for e in registry.catalog.list_models(OWNER) if e.name.startswith("runs/")]
    configs = {read_metadata(e.folder)["train_config"]["init"]: read_metadata(e.folder)["train_config"] for e in runs}
    assert set(configs) == {"pretrained", "random"}
    assert configs["pretrained"]["steps"] == configs["random"]["steps"] == 15
    assert configs["pretrained"]["train_examples"] == 100 and configs["random"]["seed"] == configs["pretrained"]["seed"]
    assert all(read_config(e.folder).labels == ("negative", "positive") for e in runs)
    assert not [e for e in registry.catalog.list_models("someone-else") if e.name.startswith("runs/")]
    ours = f"{UPLOAD_PREFIX}{os.getpid()}-*/labelled.jsonl"  # this process's copies: another test run may hold its own
    assert not list(Path(tempfile.gettempdir()).glob(ours))  # the copy is gone


def test_the_new_classifier_is_chosen_and_answers_as_the_library_function_does(registry, experiment):
    chosen = experiment[-1]["ft_classifier"].value
    answer = classifier.classify(registry, chosen, "the river was wonderful today.", "", owner=OWNER)["ft_label"]
    model, tokenizer, _, _ = load_classifier(registry.catalog.resolve(chosen, OWNER).folder)
    expected = dict(classify(model, tokenizer, "the river was wonderful today."))
    assert answer.keys() == {"negative", "positive"} == expected.keys()
    assert all(abs(answer[k] - expected[k]) < 1e-5 for k in answer)


def test_the_attribution_colours_whole_words_and_says_how_close_completeness_is(registry, experiment):
    chosen = experiment[-1]["ft_classifier"].value
    words = classifier.attribution(registry, chosen, "the river was wonderful today.", owner=OWNER)["ft_words"]
    spans = [(span["token"], span["class_or_confidence"]) for span in words.value
             if span["class_or_confidence"] is not None]
    assert [word for word, _ in spans] == ["the", "river", "was", "wonderful", "today", "."]
    assert max(abs(score) for _, score in spans) == 1.0
    assert "within" in words.label


def test_attribution_spans_join_wordpieces_and_mark_the_second_sentence():
    spans = attribution_spans(["[CLS]", "play", "##ing", "[SEP]", "ok", "[SEP]"], [0.0, 0.2, 0.2, 0.0, -0.8, 0.0])
    assert [s for s in spans if s[0] != " "] == [("playing", 0.5), ("|", None), ("ok", -1.0)]


def test_the_label_count_chart_plots_each_finished_runs_test_accuracy_at_its_count(registry, experiment,
                                                                                   monkeypatch):
    runs = [e for e in registry.catalog.list_models(OWNER) if e.name.startswith("runs/")]
    task = read_metadata(runs[0].folder)["train_config"]["task"]
    for run in runs:  # as if trained on a named task: the chart is per model and task
        metadata = json.loads((run.folder / "bert_demo.json").read_text())
        metadata["train_config"]["task"] = "movie-reviews"
        (run.folder / "bert_demo.json").write_text(json.dumps(metadata))
    figure = finetune_runs.label_counts(registry, "checkpoints/tiny-test", "movie-reviews", OWNER)["ft_counts"]
    assert {trace.name: list(trace.x) for trace in figure.data} == {"pre-trained": [100], "random weights": [100]}
    empty = finetune_runs.label_counts(registry, "checkpoints/tiny-test", "tweets", OWNER)["ft_counts"]
    assert not empty.data and "run other label counts" in empty.layout.annotations[0].text  # says what fills it
    uploaded = finetune_runs.label_counts(registry, "checkpoints/tiny-test", task, OWNER)["ft_counts"]
    assert not uploaded.data and "an uploaded file is a task of its own" in uploaded.layout.annotations[0].text
    assert task != "movie-reviews"


def test_a_classifier_is_refused_where_a_masked_lm_head_is_needed_and_the_reverse(registry, experiment):
    with pytest.raises(gr.Error, match="has no classifier"):
        classifier.classify(registry, "checkpoints/tiny-test", "a sentence.", owner=OWNER)
    with pytest.raises(ValueError, match="fine-tuned classifier .* Ask it in the Fine-tune tab") as refused:
        registry.catalog.load(experiment[-1]["ft_classifier"].value, OWNER)
    assert str(registry.roots["runs"]) not in str(refused.value)  # no server path reaches a visitor


def test_the_attention_and_embeddings_tabs_look_inside_a_fine_tuned_model_the_others_refuse_it(registry,
                                                                                               experiment):
    chosen = experiment[-1]["ft_classifier"].value
    shown = attention.attention(registry, chosen, text_a="the river was wonderful today.", text_b="", layer=2, head=1,
                                view=attention.VIEW_HEAD, hide=False, owner=OWNER)
    _, expected = inference_attention(registry.catalog.load_classifier(chosen, OWNER), "the river was wonderful today.")
    drawn = [value for row in shown["att_plot"].data[0].z for value in row]
    assert drawn == pytest.approx(expected[1, 0].flatten().tolist(), abs=1e-3)  # the classifier's own map
    from bert_demo.inspection.neighbours import neighbours

    table = embeddings.neighbours(registry, chosen, word="river", sentence="", layer=0,
                                  owner=OWNER)["neighbours_table"]["data"]
    encoder = registry.catalog.load_at(chosen, None, OWNER, encoder=True)
    classifier = registry.catalog.load_classifier(chosen, OWNER).model
    assert torch.equal(encoder.model.bert.embeddings.word_embeddings.weight,
                       classifier.bert.embeddings.word_embeddings.weight)  # the classifier's own table
    own = neighbours(encoder.model, encoder.tokenizer, "river", len(table))
    assert table and [row[0] for row in table] == [n.token for n in own]
    plot = embeddings.projection(registry, chosen, words="river garden music", owner=OWNER)["projection_plot"]
    assert sum(len(trace.x) for trace in plot.data) >= 3  # a point a word at least
    with pytest.raises(gr.Error, match="fine-tuned classifier .* look at its attention or embeddings"):
        fill.fill_mask(registry, chosen, sentence="the [MASK] was wonderful today.", top_k=5, owner=OWNER)


def test_choosing_a_fine_tuned_model_shows_its_fine_tuning_and_scores_in_the_model_tab(registry, experiment):
    chosen = experiment[-1]["ft_classifier"].value
    shown = header.selected(registry, chosen, 1, 1, owner=OWNER)
    assert not shown["summary"].startswith("⚠️") and "3 layers, hidden size 48, 4 heads" in shown["summary"]
    info = shown["model_info"]
    assert "#### Fine-tuning" in info and "from the weights of **tiny-test**" in info and "100 labelled" in info
    assert "| | train | validation | test |" in info and "| accuracy |" in info and "nan" not in info
    assert UPLOAD_PREFIX not in info and tempfile.gettempdir() not in info  # the upload's private copy: no path
    assert model_views.model_markdown({**registry.catalog.model_info(chosen, OWNER), "train_config": {
        **read_metadata(registry.catalog.resolve(chosen, OWNER).folder)["train_config"],
        "task": f"{tempfile.gettempdir()}/{UPLOAD_PREFIX}1-x/labelled.jsonl"}}).count("an uploaded labelled file") == 1


def inference_attention(loaded, text: str):
    from bert_demo.inference import attention

    return attention(loaded.model, loaded.tokenizer, text)


BAD_FILES = [
    ("no-label.jsonl", [{"text": "a sentence."}] * 30, "label"),
    ("one-class.jsonl", [{"text": "a sentence.", "label": "good"}] * 30, "two classes"),
    ("many.jsonl", [{"text": f"sentence {i}.", "label": f"c{i % 21}"} for i in range(84)], "at most 20"),
    ("latin1.csv", "text,label\ncaf\xe9 ok,a\n".encode("latin-1") * 20, "UTF-8"),
    ("empty-text.jsonl", [{"text": "", "label": "a"}, {"text": "b", "label": "b"}] * 20, "has no text"),
    ("words.txt", "just text\n", ".csv"),
]


@pytest.mark.parametrize("name, content, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_labelled_file_that_cannot_be_trained_on_is_refused_with_a_message(registry, tmp_path, name, content,
                                                                             message):
    upload, before = write(tmp_path / name, content), registry.slot.job
    with pytest.raises(gr.Error, match="(?i)" + message):
        list(finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100", ["random"],
                             owner=OWNER))
    assert registry.slot.job is before  # nothing was started


@pytest.mark.parametrize("change, message", [
    ({"task": "no-such-task"}, "unknown task"),
    ({"labels": "7"}, "choose 100, 300, 1000, all"),
    ({"compare": ["bogus"]}, "compare with"),
    ({"model": "runs/nothing-here"}, "no model called"),
])
def test_bad_settings_are_refused_with_a_message_before_any_run_starts(registry, change, message):
    settings = {"model": "checkpoints/tiny-test", "task": "movie-reviews", "upload": None, "labels": "100",
                "compare": ["random"], **change}
    with pytest.raises(gr.Error, match="(?i)" + message):
        list(finetune.finetune(registry, **settings, owner=OWNER))


def test_a_labelled_file_larger_than_the_app_fine_tunes_on_is_refused_before_any_run(registry, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setattr("bert_demo.app.state.forms.APP_FINETUNE", {**APP_FINETUNE, "max_upload_examples": 150})
    upload = write(tmp_path / "mine.jsonl", rows(200))
    with pytest.raises(gr.Error, match="has 200 examples; the app fine-tunes on at most 150"):
        list(finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100", [], owner=OWNER))


def test_empty_or_oversized_text_to_classify_is_refused_with_a_message(registry, experiment):
    chosen = experiment[-1]["ft_classifier"].value
    with pytest.raises(gr.Error, match="empty"):
        classifier.classify(registry, chosen, "   ", owner=OWNER)
    with pytest.raises(gr.Error, match="characters"):
        classifier.attribution(registry, chosen, "word " * 5000, owner=OWNER)


def val(step: int, acc: float, **final: float) -> dict:
    return {"kind": "val", "step": step, "acc": acc, **final}


def test_the_verdict_states_the_gap_says_a_small_one_is_small_and_notes_a_faster_start():
    bought = verdict.verdict({"pretrained": [val(50, 0.60), val(200, 0.70, test_acc=0.71, outside_acc=0.60,
                                                         outside_majority=0.58)],
                             "random": [val(50, 0.52), val(200, 0.64, test_acc=0.65, outside_acc=0.59,
                                                      outside_majority=0.58)]},
                            1000, "amazon-reviews")
    assert "bought **6.0 points** in this domain" in bought
    assert "at the first validation (step 50) the pre-trained start had 0.600 against 0.520" in bought
    assert "little difference on amazon-reviews" in bought and "+1.0 points" in bought
    level = verdict.verdict({"pretrained": [val(50, 0.55), val(200, 0.70, test_acc=0.700)],
                            "random": [val(50, 0.55), val(200, 0.69, test_acc=0.695)]}, None, None)
    assert "every labelled sentence" in level and "little difference in this domain (+0.5 points" in level
    assert "learned faster" not in level
    assert "commonest class" not in bought  # 0.60 and 0.59 beat the 0.58 of always answering one class
    biased = verdict.verdict({"pretrained": [val(200, 0.7, test_acc=0.7, outside_acc=0.52, outside_majority=0.58)],
                             "random": [val(200, 0.6, test_acc=0.6, outside_acc=0.55, outside_majority=0.58)]},
                            500, "amazon-reviews")
    assert "no start beats always answering its commonest class (0.580)" in biased


def test_the_verdict_scores_a_glue_task_in_its_own_metric_not_accuracy():
    cola = verdict.verdict({"pretrained": [val(50, 0.69, matthews=0.08), val(200, 0.70, matthews=0.12,
                                                                         test_acc=0.70, test_matthews=0.12)],
                           "random": [val(50, 0.69, matthews=0.0), val(200, 0.69, matthews=0.0, test_acc=0.69,
                                                                     test_matthews=0.0)]}, None, None)
    assert "(Matthews correlation): pre-trained **0.120**, random weights **0.000**" in cola
    assert "bought **12.0 points** in this domain" in cola  # accuracy alone would call it level (1 point)
    assert "(step 50) the pre-trained start had 0.080 against 0.000" in cola  # level in accuracy there
    mrpc = verdict.verdict({"pretrained": [val(200, 0.70, test_acc=0.70, test_f1=0.81)]}, None, None)
    assert "(F1): pre-trained **0.810**" in mrpc


def test_the_verdict_says_whether_the_well_read_start_bought_more_than_the_selected_model():
    runs = {"pretrained": [val(200, 0.70, test_acc=0.70)], "random": [val(200, 0.65, test_acc=0.65)]}
    more = verdict.verdict({**runs, "well-read": [val(200, 0.80, test_acc=0.80)]}, 1000, None, "Google's BERT-Small")
    assert ("Google's BERT-Small, pre-trained on 3.3 billion words, reached **0.800**: +15.0 points over random "
            "weights, against +5.0 for the selected model") in more
    assert "The more text a model read before, the more its pre-training buys." in more
    level = verdict.verdict({**runs, "well-read": [val(200, 0.71, test_acc=0.71)]}, 1000, None)
    assert "all that reading bought no more than the selected model's" in level


def test_a_fine_tuning_run_in_progress_is_not_offered_as_the_live_model_for_the_pretraining_tabs(registry,
                                                                                                tmp_path):
    upload = write(tmp_path / "mine.jsonl", rows())
    budget = {**APP_FINETUNE, "max_steps": 200, "epochs": 1000}  # 200 steps: the run trains on until it is stopped
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("bert_demo.app.state.forms.APP_FINETUNE", budget)
        patch.setattr("bert_demo.app.policy.APP_FINETUNE", budget)
        updates = finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100", [],
                                  owner=OWNER)
        try:
            for _ in updates:
                job = registry.slot.job
                if job is not None and job.running and job.trainer.model is not None:
                    break
            assert "live" not in [name for _, name in registry.catalog.choices(OWNER)]
            with pytest.raises(ValueError, match="no run is pre-training right now"):
                registry.catalog.resolve("live", OWNER)
        finally:
            updates.close()
            finetune.stop(registry, OWNER)
            registry.slot.job.thread.join(timeout=60)


def test_a_reopened_page_follows_the_visitors_experiment_with_stop_enabled_and_another_sees_someone_elses(
        registry, tmp_path):
    upload = write(tmp_path / "mine.jsonl", rows())
    budget = {**APP_FINETUNE, "max_steps": 200, "epochs": 1000}  # 200 steps: the run trains on until it is stopped
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("bert_demo.app.state.forms.APP_FINETUNE", budget)
        patch.setattr("bert_demo.app.policy.APP_FINETUNE", budget)
        updates = finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100", ["random"],
                                    owner=OWNER)
        for update in updates:
            if update.get("ft_status", "").startswith("Run 1 of 2"):
                break
        updates.close()  # the page reloads
        job = registry.slot.job
        reopened = finetune.reopened(registry, OWNER)
        first = next(reopened)
        assert job.running and first["ft_stop"] == finetune.STOP_ACTIVE and first["ft_start"] == finetune.START_BUSY
        assert first["ft_status"].startswith("Run 1 of 2, pre-trained: ")
        watched = train.watch_slot(registry, "someone else")
        elsewhere = watched["ft_slot_busy"].constructor_args
        assert elsewhere["visible"] and elsewhere["value"].startswith(
            "**Busy:** someone else's fine-tuning run (1 of the 2 of an experiment) has the training slot")
        assert watched["slot_watch"].constructor_args == {"value": train.WATCH_EVERY_S, "active": True}
        assert not train.watch_slot(registry, OWNER)["ft_slot_busy"].constructor_args["visible"]  # their own
        assert finetune.stop(registry, OWNER)["ft_status"].startswith("Stopping")
        last = list(reopened)[-1]
        assert "The experiment stopped here." in last["ft_status"] and last["ft_stop"] == finetune.STOP_IDLE
        assert registry.slot.job is job and not registry.slot.line  # the second run never started


def test_attention_before_and_after_fine_tuning_compares_the_run_with_its_own_start(registry, experiment):
    runs = {read_metadata(e.folder)["train_config"]["init"]: e.name for e in registry.catalog.list_models(OWNER)
            if e.name.startswith("runs/")}
    for init, name in runs.items():  # pre-trained: the shipped weights; random: its step-0 snapshot
        shown = classifier.attention_change(registry, name, "the river was wonderful today.", "", 2, owner=OWNER)
        before, after = shown["ft_att_before"].data[0].z, shown["ft_att_after"].data[0].z
        assert len(before) == len(after) == 8 and before != after, init  # [CLS] 6 words [SEP]; the run moved it
        tops = [shown[side].data[0].zmax for side in ("ft_att_before", "ft_att_after")]
        assert tops[0] == tops[1] == pytest.approx(max(max(map(max, before)), max(map(max, after))), abs=1e-4)
        moved = [float(part.split(": ")[1]) for part in shown["ft_att_caption"].rstrip(".").split(": ", 1)[1]
                 .split(", ")]
        assert len(moved) == 3 and all(0 < value < 1 for value in moved), shown["ft_att_caption"]



def test_the_layer_slider_fits_the_chosen_classifier(registry, experiment):
    slider = classifier.classifier_chosen(registry, experiment[-1]["ft_classifier"].value, owner=OWNER)["ft_att_layer"]
    assert slider.maximum == slider.value == 3  # the test model's three layers, not its four heads


TINY_GOOGLE = "gaunernst/bert-tiny-uncased"  # Google's BERT of tiny-test's shape (2 layers of 128)


def hub_like_model(root: Path, hub_id: str = TINY_GOOGLE) -> Path:
    """A folder as the hub's cache holds the well-read start: written by `transformers` (weights, config, vocab.txt
    with an uncased BERT tokenizer), with a vocabulary of its own, under the hub cache's folder layout."""
    import transformers

    folder = root / f"models--{hub_id.replace('/', '--')}" / "snapshots" / "0123abcd"
    folder.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "was", "today", ".", "wonderful", "terrible",
             *WORDS, *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"], *"abcdefghijklmnopqrstuvwxyz"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(str(folder))
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    transformers.BertForPreTraining(config).save_pretrained(str(folder), safe_serialization=True)
    return folder


def test_googles_bert_of_the_selected_models_shape_joins_the_experiment_as_a_third_start_from_the_hub(
        google_shaped, tmp_path, monkeypatch):
    registry = google_shaped
    hub, asked = hub_like_model(tmp_path / "hub"), []
    monkeypatch.setattr(registry.catalog, "allow_hub", True)
    monkeypatch.setattr("bert_demo.checkpoint.download", lambda name, cache_dir=None, check=None: asked.append(name)
                        or hub)
    monkeypatch.setattr("bert_demo.app.state.forms.APP_FINETUNE", {**APP_FINETUNE, "max_steps": 8})
    monkeypatch.setattr("bert_demo.app.policy.APP_FINETUNE", {**APP_FINETUNE, "max_steps": 8})
    upload, owner = write(tmp_path / "mine.jsonl", rows()), "visitor-2"
    final = list(finetune.finetune(registry, "checkpoints/tiny-test", "movie-reviews", upload, "100",
                                 ["random", verdict.WELL_READ], owner=owner))[-1]
    assert asked == [TINY_GOOGLE]  # tiny-test is tiny: 2 layers of 128, as Google's BERT-Tiny
    assert "Google's BERT, same shape (validation)" in curves(final["ft_curves"])
    assert "Google's BERT-Tiny, pre-trained on 3.3 billion words, reached" in final["ft_verdict"]
    assert "over random weights, against" in final["ft_verdict"]
    assert "Google's BERT, same shape" in {trace.name for trace in final["ft_changes"].data}  # from the hub weights
    runs = {e.name: read_metadata(e.folder)["train_config"] for e in registry.catalog.list_models(owner)
            if e.name.startswith("runs/bert-tiny-uncased-")}
    assert len(runs) == 1 and next(iter(runs.values()))["model"] == str(hub)
    well_read = registry.catalog.load_classifier(next(iter(runs)), owner)
    assert well_read.tokenizer.get_vocab() == transformers_vocab(hub)  # fine-tuned with the hub model's own words
    model_tab = header.selected(registry, next(iter(runs)), 1, 1, owner=owner)["model_info"]
    assert f"from the weights of **{TINY_GOOGLE}**" in model_tab  # its hub id, not a cache folder
    for run in registry.catalog.list_models(owner):  # as if trained on a named task: the chart is per model and task
        if run.name.startswith("runs/"):
            metadata = json.loads((run.folder / "bert_demo.json").read_text())
            metadata["train_config"]["task"] = "movie-reviews"
            (run.folder / "bert_demo.json").write_text(json.dumps(metadata))
    counts = finetune_runs.label_counts(registry, "checkpoints/tiny-test", "movie-reviews", owner)["ft_counts"]
    assert {trace.name for trace in counts.data} == {"pre-trained", "random weights", "Google's BERT, same shape"}
    run = next(iter(runs))  # the same run, as if Google's BERT-Mini had been fine-tuned: another shape, not drawn
    elsewhere = hub_like_model(tmp_path / "hub", "gaunernst/bert-mini-uncased")
    metadata = read_metadata(registry.catalog.resolve(run, owner).folder)
    metadata["train_config"]["model"] = str(elsewhere)
    (registry.catalog.resolve(run, owner).folder / "bert_demo.json").write_text(json.dumps(metadata))
    counts = finetune_runs.label_counts(registry, "checkpoints/tiny-test", "movie-reviews", owner)["ft_counts"]
    assert {trace.name for trace in counts.data} == {"pre-trained", "random weights"}


def transformers_vocab(folder: Path) -> dict[str, int]:
    import transformers

    return transformers.BertTokenizerFast.from_pretrained(str(folder)).get_vocab()


def unreachable(*args, **kwargs):
    raise ConnectionError("no route to huggingface.co")


def test_googles_bert_is_refused_before_any_run_where_the_hub_is_off_or_unreachable_or_it_has_no_such_shape(
        google_shaped, registry, monkeypatch):
    settings = {"model": "checkpoints/tiny-test", "task": "movie-reviews", "upload": None, "labels": "100",
                "compare": ["random", verdict.WELL_READ]}
    with pytest.raises(gr.Error, match="set not to reach: leave Google's BERT-Tiny out"):
        list(finetune.finetune(google_shaped, **settings, owner="visitor-3"))
    for each in (google_shaped, registry):
        monkeypatch.setattr(each.catalog, "allow_hub", True)
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", unreachable)  # as on a machine without the hub
    with pytest.raises(gr.Error, match="(?i)could not fetch .* from the Hugging Face Hub: the hub may be "
                                       "unreachable from here; leave Google's BERT-Tiny out"):
        list(finetune.finetune(google_shaped, **settings, owner="visitor-3"))
    with pytest.raises(gr.Error, match="(?i)only a saved model can be fine-tuned"):  # the hub id, selected
        list(finetune.finetune(google_shaped, **{**settings, "model": TINY_GOOGLE}, owner="visitor-3"))
    with pytest.raises(gr.Error, match=r"(?i)google published no BERT of the selected model's shape \(3 layers "
                                       r"of 48\); Google's BERT-Tiny \(2 layers of 128\), .* leave the well-read"):
        list(finetune.finetune(registry, **settings, owner="visitor-3"))  # the test model's shape: Google has none
    for each in (google_shaped, registry):
        assert not [e for e in each.catalog.list_models("visitor-3") if e.name.startswith("runs/")]
