"""The app served in-process on 127.0.0.1 and driven with gradio_client, as any API user would."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from bert_demo.app import header, ui
from bert_demo.app.policy import FORM
from bert_demo.app.runs.job import TrainingJob
from bert_demo.app.registry import Registry
from bert_demo.app.uploads import UPLOAD_PREFIX
from bert_demo.app.tabs import attention, embeddings, fill, nsp, train, train_views
from bert_demo.app.tabs.attention import VIEW_AVERAGE, VIEW_HEAD, VIEW_ROLLOUT
from bert_demo.app.ui import ANALYTICS_EVERY, build_demo
from bert_demo.config import read_metadata
from bert_demo.training.settings import TrainConfig
from tests.conftest import TEST_SHAPE as SHAPE
from tests.conftest import held, wait_until

MODEL = "checkpoints/tiny-test"


@pytest.fixture(scope="module")
def app(served_app, tmp_path_factory):
    with served_app(tmp_path_factory.mktemp("app")) as served:
        yield served


@pytest.fixture(scope="module")
def client(app) -> Client:
    return Client(app["url"], verbose=False)


def plot_data(output) -> list[dict]:
    return json.loads(output["plot"])["data"]


def points(output) -> int:
    """Points on a training chart's first curve (0 while it is a blank chart waiting for the first step)."""
    data = plot_data(output)
    return len(data[0]["x"]) if data else 0


def test_the_api_has_exactly_the_twenty_one_named_endpoints(client):
    api = client.view_api(print_info=False, return_format="dict")
    assert set(api["named_endpoints"]) == {"/train", "/compare_runs", "/fill_mask", "/head_importance",
                                           "/next_sentence", "/attention", "/neighbours", "/projection",
                                           "/finetune", "/classify", "/attribution", "/attention_change", "/neuron",
                                           "/pretraining_example", "/forward_steps", "/training_step",
                                           "/across_training", "/batch_step", "/by_hand", "/adam_over_time",
                                           "/depth_across_training"}
    assert not api["unnamed_endpoints"]


def test_a_tab_wires_only_to_its_own_components_the_page_and_the_links_it_names(make_checkpoint, tmp_path,
                                                                               monkeypatch):
    """The Train tab's watch of the slot writes Fine-tune's line too: a link it declares (`train.LINKS`). Without
    the name, building the page stops at that component."""
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    make = lambda: build_demo(Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs",  # noqa: E731
                                       device="cpu", allow_hub=False))
    make()
    monkeypatch.setattr(train, "LINKS", ())
    with pytest.raises(KeyError, match="ft_slot_busy"):
        make()


@pytest.mark.parametrize("examples", [True, False], ids=["shipped examples", "no examples"])
def test_each_tab_lays_out_exactly_the_components_its_typed_parts_declare(make_checkpoint, tmp_path, monkeypatch,
                                                                         examples):
    """`TrainParts`, `FillParts`, ...: a tab's components, typed, by the names its handlers answer with; a component
    added or renamed without its declaration fails here (NotRequired: only where the shipped model's examples are)."""
    from bert_demo.app.tabs import classifier, finetune, model, steps

    parts = {header: header.HeaderParts, fill: fill.FillParts, nsp: nsp.NspParts,
             attention: attention.AttentionParts, embeddings: embeddings.EmbeddingsParts, train: train.TrainParts,
             finetune: finetune.FinetuneParts, classifier: classifier.ClassifierParts, model: model.ModelParts,
             steps: steps.StepsParts}
    laid_out = {}

    def recorded(module, layout):
        def laid(*args, **kwargs):
            components = layout(*args, **kwargs)
            laid_out[module] = set(components)  # as laid out: the page adds the other tabs' to the header's dict
            return components
        return laid

    for module in parts:
        monkeypatch.setattr(module, "layout", recorded(module, module.layout))
    root = Path(__file__).resolve().parents[2] / "checkpoints" if examples else tmp_path / "checkpoints"
    if not examples:
        make_checkpoint(root / "tiny-test")
    build_demo(Registry(checkpoints_dir=root, runs_dir=tmp_path / "runs", device="cpu", allow_hub=False))
    for module, declared in parts.items():
        optional = {name for name, kind in declared.__annotations__.items()
                    if getattr(kind, "__forward_arg__", str(kind)).startswith("NotRequired[")}
        named = set(declared.__annotations__) | (set(FORM) if module is train else set())  # and the form's settings
        assert named - optional <= laid_out[module] <= named, module.__name__


def test_gradio_summarises_request_times_every_few_events_not_after_each_one(app):
    assert app["demo"]._queue.ANAYLTICS_CACHE_FREQUENCY == ANALYTICS_EVERY > 1  # gradio's default, 1, costs 2-7 ms


def test_fill_mask_ranks_tokens_for_each_mask(client):
    sentence, _, _, *labels = client.predict(model_name=MODEL, sentence="the cat [MASK] on the [MASK].", top_k=4,
                                             api_name="/fill_mask")
    spans = sentence["value"]
    assert [s["class_or_confidence"] is not None for s in spans] == [False, True, False, True, False]
    assert [bool(label) for label in labels] == [True, True] + [False] * (len(labels) - 2)
    ranked = labels[0]["confidences"]
    assert len(ranked) == 4 and ranked[0]["confidence"] >= ranked[-1]["confidence"] > 0
    assert spans[1]["token"] == ranked[0]["label"]


@pytest.mark.parametrize("model, text, message", [
    (MODEL, "no mask in here", "has no [MASK]"),
    (MODEL, "   ", "empty"),
    ("../secrets", "a [MASK].", "only model folders"),
    ("checkpoints/missing", "a [MASK].", "no model called"),
    ("", "a [MASK].", "choose a model"),
])
def test_fill_mask_errors_are_messages_not_tracebacks(client, model, text, message):
    with pytest.raises(AppError, match="(?i)" + re.escape(message)) as error:
        client.predict(model_name=model, sentence=text, top_k=5, api_name="/fill_mask")
    assert "Traceback" not in str(error.value)


def test_next_sentence_gives_a_probability(client):
    result = client.predict(model_name=MODEL, text_a="The sun rose.", text_b="Birds began to sing.",
                            api_name="/next_sentence")
    confidences = {c["label"]: c["confidence"] for c in result["confidences"]}
    assert set(confidences) == {"B follows A", "B is a random sentence"}
    assert sum(confidences.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("view", [VIEW_HEAD, VIEW_AVERAGE, VIEW_ROLLOUT])
def test_attention_draws_a_head_and_the_grid_of_heads(client, view):
    main, grid, caption, *_ = client.predict(model_name=MODEL, text_a="the cat sat.", text_b="it purred.", layer=2,
                                             head=2, view=view, hide=False,
                                             api_name="/attention")
    heatmap = plot_data(main)[0]
    assert heatmap["type"] == "heatmap" and heatmap["zmax"] == pytest.approx(max(map(max, heatmap["z"])), abs=1e-4)
    tokens = json.loads(main["plot"])["layout"]["xaxis"]["ticktext"]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    assert len(heatmap["z"]) == len(tokens) and "→" in heatmap["text"][0][1]
    assert len(plot_data(grid)) == SHAPE.num_attention_heads  # a picture a head of the layer
    assert f"{SHAPE.num_hidden_layers} layers × {SHAPE.num_attention_heads} heads" in caption


def test_attention_can_hide_cls_and_sep_and_clamps_the_layer(client):
    main, _, caption, *_ = client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=40, head=1,
                                          view=VIEW_HEAD, hide=True, api_name="/attention")
    layout = json.loads(main["plot"])["layout"]
    assert caption.startswith(f"{len(layout['xaxis']['ticktext'])} tokens shown")  # counted after hiding
    assert "[CLS]" not in layout["xaxis"]["ticktext"]
    assert layout["title"]["text"].startswith(f"Layer {SHAPE.num_hidden_layers}, head 1")  # layer 40: the last


def test_fill_mask_shows_the_guesses_at_every_layer_and_the_words_to_click(client):
    _, table, words, *_ = client.predict(model_name=MODEL, sentence="the cat [MASK] on the mat.", top_k=3, heads_off=[],
                                         api_name="/fill_mask")
    rows = [line.split(" | ")[0].strip("| ") for line in table.splitlines()[2:]]
    layers = [str(layer) for layer in range(1, SHAPE.num_hidden_layers)] + [f"{SHAPE.num_hidden_layers} (last)"]
    assert table.startswith("| layer | [MASK] 1 |") and rows == layers
    assert [w["token"] for w in words if w["class_or_confidence"]] == "the cat [MASK] on the mat.".split()


def test_switching_heads_off_through_the_api_changes_the_guesses_and_unknown_heads_are_refused(client):
    sentence = "the cat [MASK] on the mat."
    every, _, _, ranked, *_ = client.predict(model_name=MODEL, sentence=sentence, top_k=5, heads_off=[],
                                             api_name="/fill_mask")
    silenced, _, _, ranked_off, *_ = client.predict(model_name=MODEL, sentence=sentence, top_k=5,
                                                    heads_off=["L1 H1", "L1 H2", "L2 H1", "L2 H4"],
                                                    api_name="/fill_mask")
    assert "4 heads switched off" in silenced["label"] and ranked_off != ranked
    with pytest.raises(AppError, match="(?i)no head 'L9 H1' in this model: it has layers 1-3 and heads 1-4"):
        client.predict(model_name=MODEL, sentence=sentence, top_k=5, heads_off=["L9 H1"], api_name="/fill_mask")
    with pytest.raises(AppError, match="(?i)no head 'L1 H5' in this model"):  # a head past the heads, not the layers
        client.predict(model_name=MODEL, sentence=sentence, top_k=5, heads_off=["L1 H5"], api_name="/fill_mask")


def test_the_words_behind_a_mask_guess_are_coloured_and_a_text_without_a_mask_is_refused(app):
    answer = fill.mask_attribution(app["registry"], MODEL, sentence="the cat [MASK] on the mat.")["mask_words"]
    scored = [(span["token"], span["class_or_confidence"]) for span in answer.value]
    assert [word for word, score in scored if score is not None] == ["the", "cat", "[MASK]", "on", "the", "mat", "."]
    assert max(abs(score) for _, score in scored if score is not None) == 1.0
    assert answer.label.startswith("Why “") and "within" in answer.label
    with pytest.raises(gr.Error, match="no \\[MASK\\]"):
        fill.mask_attribution(app["registry"], MODEL, sentence="the cat sat.")


def test_head_importance_draws_one_map_per_mask(client):
    figure = json.loads(client.predict(model_name=MODEL, sentence="the [MASK] sat on the [MASK].",
                                       api_name="/head_importance")["plot"])
    assert len(figure["data"]) == 2 and figure["data"][0]["y"] == ["L1", "L2", "L3"]
    assert figure["data"][0]["x"] == ["H1", "H2", "H3", "H4"]
    assert [a["text"].split(":")[0] for a in figure["layout"]["annotations"]] == ["[MASK] 1", "[MASK] 2"]


def test_neighbours_and_projection_answer_and_explain_a_word_that_is_not_one_token(client):
    table, caption = client.predict(model_name=MODEL, word="cat", sentence="", layer=0, api_name="/neighbours")
    assert len(table["data"]) == embeddings.NEIGHBOURS and "cat" not in [row[0] for row in table["data"]]
    assert "input embedding" in caption
    assert table["headers"] == ["token", "cosine similarity"]  # a word on its own has no reference sentence
    in_sentence, in_context = client.predict(model_name=MODEL, word="cat", sentence="the cat sat on the mat.", layer=2,
                                             api_name="/neighbours")
    assert "after layer 2" in in_context
    assert in_sentence["headers"] == ["word", "in the reference sentence", "cosine similarity"]
    assert all(row[1] for row in in_sentence["data"])
    with pytest.raises(AppError, match="not one token"):
        client.predict(model_name=MODEL, word="xylophonists", sentence="", layer=0, api_name="/neighbours")
    figure = json.loads(client.predict(model_name=MODEL, words="cat dog sun mat", api_name="/projection")["plot"])
    assert figure["data"][0]["text"] == ["cat", "dog", "sun", "mat"]


def test_attention_pair_filter_keeps_sentence_a_looking_at_b_and_needs_a_sentence_b(client):
    main, grid, caption, *_ = client.predict(model_name=MODEL, text_a="the cat sat.", text_b="it purred.", layer=1,
                                             head=1, view=VIEW_HEAD, hide=True,
                                             pair=attention.PAIR_A_TO_B,
                                             api_name="/attention")
    layout = json.loads(main["plot"])["layout"]
    assert layout["yaxis"]["ticktext"] == ["the", "cat", "sat", "."]
    assert "[SEP]" not in layout["xaxis"]["ticktext"] and "cat" not in layout["xaxis"]["ticktext"]
    assert caption.startswith("4 × ") and "sentence A" in caption
    typed_sep, *_ = client.predict(model_name=MODEL, text_a="the cat [SEP] sat.", text_b="it purred.", layer=1, head=1,
                                   view=VIEW_HEAD, hide=True, pair=attention.PAIR_A_TO_B,
                                   api_name="/attention")  # the model still sees it all in A
    assert json.loads(typed_sep["plot"])["layout"]["yaxis"]["ticktext"] == ["the", "cat", "sat", "."]
    with pytest.raises(AppError, match="needs a sentence B"):
        client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=1, head=1, view=VIEW_HEAD, hide=False,
                       pair=attention.PAIR_B_TO_A, api_name="/attention")


def test_attention_draws_the_model_view_of_every_head_and_offers_every_token_to_the_neuron_view(client):
    *_, gallery, token = client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=1, head=1,
                                        view=VIEW_HEAD, hide=False, api_name="/attention")
    assert [item["caption"] for item in gallery["value"]] == [
        f"L{layer} H{head}" for layer in range(1, SHAPE.num_hidden_layers + 1)
        for head in range(1, SHAPE.num_attention_heads + 1)]
    assert gallery["columns"] == SHAPE.num_attention_heads  # a row a layer
    assert token["choices"][2] == ["2: cat", 2] and len(token["choices"]) == 6
    assert token["value"] == 1  # the first word, not [CLS]


def test_neuron_view_draws_query_keys_and_the_weights_they_make(client):
    figure = json.loads(client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=2, head=1, position=2,
                                       api_name="/neuron")["plot"])
    assert "“cat” weighs each token" in figure["layout"]["title"]["text"]
    weights = [trace for trace in figure["data"] if trace["type"] == "bar"][-1]
    assert weights["x"][0] is None and sum(weights["x"][1:]) == pytest.approx(1, abs=1e-3)  # no bar for the query row
    with pytest.raises(AppError, match="one of the 6 tokens"):
        client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=2, head=1, position=9,
                       api_name="/neuron")


@pytest.mark.parametrize("position", ["inf", [1, 2], {"a": 1}, 2.5])
def test_a_query_position_that_is_not_a_whole_number_gets_a_message_and_one_log_line(client, position, caplog):
    """A query position that is no whole number ("inf", a list, a dict) gets a message and one log line, never a
    traceback or "Something went wrong"."""
    with pytest.raises(AppError, match=r"The query token is given by its number \(0 for \[CLS\]"):
        client.predict(model_name=MODEL, text_a="the cat sat.", text_b="", layer=2, head=1, position=position,
                       api_name="/neuron")
    assert not [r for r in caplog.records if r.exc_info or "unexpected error" in r.getMessage()]


def test_a_5000_character_word_is_not_repeated_whole_in_the_message(client):
    with pytest.raises(AppError, match="is not one token in this model's vocabulary") as refused:
        client.predict(model_name=MODEL, word="x" * 4999 + "y", sentence="", layer=0, api_name="/neighbours")
    assert "x" * 50 not in str(refused.value) and len(str(refused.value)) < 300


def test_the_head_control_is_greyed_out_in_views_where_it_does_nothing():
    assert attention.view_changed(VIEW_HEAD)["head"].interactive is True
    assert attention.view_changed(VIEW_AVERAGE)["head"].interactive is False
    assert attention.view_changed(VIEW_ROLLOUT)["head"].interactive is False


@pytest.mark.parametrize("index, expected", [
    (0, "[MASK] cat sat on the mat."), (10, "the cat sat on the [MASK]."), (1, "the cat sat on the mat."),
    (99, "the cat sat on the mat."),
])
def test_a_clicked_word_becomes_a_mask_and_keeps_its_punctuation(index, expected):
    assert fill.mask_word("the cat sat on the mat.", index) == {"fill_text": expected}
    assert fill.mask_word("a [MASK] b", 2) == {"fill_text": "a [MASK] b"}  # already masked


def test_training_settings_that_are_not_allowed_are_refused(client):
    with pytest.raises(AppError, match="'base'.*not in the list of choices"):  # gradio checks the caps it shows
        client.predict(["wiki"], None, "base", 100, 16, 1e-3, 64, 4096, api_name="/train")
    with pytest.raises(AppError, match="Choose a corpus or upload"):  # the backend checks the rest
        client.predict([], None, "tiny", 100, 16, 1e-3, 64, 4096, api_name="/train")


def test_a_short_run_streams_growing_metrics_and_ends_with_a_checkpoint(app, client):
    job = client.submit([], handle_file(str(app["corpus"])), "tiny", 20, 4, 1e-3, 32, 512, api_name="/train")
    lengths, outputs = [], None
    for outputs in job:
        lengths.append(points(outputs[1]))
    status, loss, accuracy, lr, probe, checkpoint, selector, _, readout, estimate = outputs  # (no buttons)
    assert estimate == ""  # the run's own time went with it: the page times the form again (`train.wire`)
    assert lengths[-1] == 20 and lengths == sorted(lengths) and len(set(lengths)) >= 2
    assert status.startswith("Finished 20 steps") and "choose" in status
    assert probe["label"].startswith("Step 20")
    assert readout.startswith("**Held-out sentences at step 20**") and "[MASK]" in readout
    baseline = [t for t in plot_data(accuracy) if t["name"] == "always the most frequent token"]
    assert baseline and 0 < baseline[0]["y"][-1] < 1
    assert str(checkpoint["value"]).endswith(".zip"), checkpoint
    assert "value" not in selector  # the selector lists the run but keeps showing the visitor's choice
    run = next(name for _, name in selector["choices"] if name.startswith("runs/tiny-upload-"))
    assert run in [e.name for e in app["registry"].catalog.list_models(client.session_hash)]
    assert run not in [e.name for e in app["registry"].catalog.list_models()]  # trained on an upload: private
    sentence, *_ = client.predict(model_name=run, sentence="the [MASK] was visited.", top_k=3, api_name="/fill_mask")
    assert sentence["value"][1]["class_or_confidence"]
    with pytest.raises(AppError, match="There is no model called"):
        Client(app["url"], verbose=False).predict(model_name=run, sentence="the [MASK] sat.", top_k=3,
                                                  api_name="/fill_mask")


def test_a_fine_tune_through_the_api_streams_curves_and_leaves_a_classifier_that_answers(app, client, short_finetune):
    job = client.submit(MODEL, "movie-reviews", handle_file(str(short_finetune)), "100", ["random"],
                        api_name="/finetune")
    outputs = list(job)[-1]
    status, curves, verdict, counts, changes, classifier, selector, tuned, took = outputs
    assert status.startswith("Done: 2 runs of 4 steps"), status
    assert tuned["value"] == MODEL and "The latest experiment here took" in took
    assert {t["name"] for t in plot_data(curves)} >= {"pre-trained (validation)", "random weights (validation)"}
    assert "random weights" in verdict
    probabilities = client.predict(classifier["value"], "the cat was happy.", "", api_name="/classify")
    assert {c["label"] for c in probabilities["confidences"]} == {"no", "yes"}
    words = client.predict(classifier["value"], "the cat was happy.", "", api_name="/attribution")
    assert [w["token"] for w in words["value"] if w["class_or_confidence"] is not None][:2] == ["the", "cat"]
    with pytest.raises(AppError, match="has no classifier"):
        client.predict(MODEL, "the cat was happy.", "", api_name="/classify")
    with pytest.raises(AppError, match="not in the list of choices"):  # gradio checks the radio
        client.predict(MODEL, "movie-reviews", None, "12", ["random"], api_name="/finetune")


def test_a_long_run_outlives_its_stream_for_a_while_and_inference_keeps_answering(app, client, monkeypatch):
    registry = app["registry"]
    monkeypatch.setattr(registry.slot, "abandon_s", 6.0)
    job = client.submit([], handle_file(str(app["corpus"])), "tiny", 1000, 16, 1e-3, 64, 512, True,  # shared
                        api_name="/train")
    lengths = []
    for outputs in job:
        lengths.append(points(outputs[1]))
        if lengths[-1] >= 3 and len(set(lengths)) >= 3:
            break
    assert lengths == sorted(lengths) and lengths[-1] < 1000
    started = time.perf_counter()
    other = Client(app["url"], verbose=False)  # another user, while the run trains
    result = other.predict(model_name=MODEL, text_a="The sun rose.", text_b="Birds sang.", api_name="/next_sentence")
    assert result["confidences"] and time.perf_counter() - started < 20
    live = other.predict(model_name="live", sentence="the [MASK] was visited.", top_k=2,
                         api_name="/fill_mask")  # the run in progress
    assert live[0]["value"][1]["class_or_confidence"]
    run = registry.slot.job
    with held(run):  # however fast this machine, the run is still training when nobody follows it any more
        job.cancel()  # the stream goes, as a reloading page's does: the run trains on until nobody follows it for 6 s
        time.sleep(1.0)
        assert run.running and not run.trainer.stopping
        wait_until(lambda: run.trainer.stopping, "the slot to give up the run nobody follows")
    run.thread.join(timeout=120)
    assert not run.running and run.done["reason"] == "stopped" and run.done["step"] < 1000
    assert f"runs/{run.name}" in [e.name for e in registry.catalog.list_models()]


def test_app_py_builds_the_app_without_importing_torch(tmp_path):
    """Cold start: torch and transformers load on first use, so the page is served within seconds."""
    code = ("import sys, app; assert app.demo.config; "
            "print(sorted(m for m in ('torch', 'transformers', 'bert_demo.inference') if m in sys.modules))")
    env = {**os.environ, "BERT_DEMO_CHECKPOINTS": str(tmp_path), "BERT_DEMO_RUNS": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


FIRST_USE = """
import sys, threading
from bert_demo.app import header
from bert_demo.app.tabs import attention, fill, nsp
from bert_demo.app.registry import Registry
from bert_demo.app.ui import build_demo
registry = Registry(checkpoints_dir=sys.argv[1], runs_dir=sys.argv[2], device="cpu", allow_hub=False)
demo = build_demo(registry)
assert "transformers" not in sys.modules
model = "checkpoints/tiny-test"
calls = [lambda: header.selected(registry, model, 2, 4),
         lambda: attention.attention(registry, model, text_a="the cat sat.", view="one head"),
         lambda: fill.fill_mask(registry, model, sentence="the [MASK] sat.", top_k=3),
         lambda: nsp.next_sentence(registry, model, text_a="a b.", text_b="c d.")]
errors = []
def run(call):
    try:
        call()
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=run, args=(call,)) for call in calls * 2]
[t.start() for t in threads]; [t.join() for t in threads]
print(errors)
"""


def test_handlers_used_for_the_first_time_at_once_all_find_transformers_whole(make_checkpoint, tmp_path):
    """A fresh app, as when its page first loads: several handlers start in worker threads at once. Without the
    lock of `machine.import_heavy` one of them saw transformers half-imported ("cannot import name
    'BertTokenizerFast'")."""
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    result = subprocess.run([sys.executable, "-c", FIRST_USE, str(tmp_path / "checkpoints"), str(tmp_path / "runs")],
                            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_sliders_follow_the_models_range_and_move_only_a_layer_or_head_outside_it(make_checkpoint, tmp_path):
    """The answer to choosing a model (or loading an example) sets a slider's value only when it is out of range,
    so an example clicked while the page is still loading keeps its layer and head."""
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    layers, heads = SHAPE.num_hidden_layers, SHAPE.num_attention_heads
    for handler in (header.selected, header.narrow):
        inside = handler(registry, MODEL, 1, 1)
        assert (inside["layer"].constructor_args, inside["head"].constructor_args) == ({"maximum": layers},
                                                                                      {"maximum": heads})
        outside = handler(registry, MODEL, 9, 9)
        assert outside["layer"].constructor_args == {"maximum": layers, "value": layers}
        assert outside["head"].constructor_args == {"maximum": heads, "value": heads}


def test_examples_are_shown_only_with_the_checkpoint_they_were_written_for(make_checkpoint, tmp_path):
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    make_checkpoint(tmp_path / "runs" / "a-run")
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    boxes = ("fill_examples", "nsp_examples", "att_examples_box")
    own = header.selected(registry, MODEL, 1, 1)
    other = header.selected(registry, "runs/a-run", 1, 1)
    assert all(own[box].constructor_args == {"visible": True} for box in boxes)
    assert all(other[box].constructor_args == {"visible": False} for box in boxes)


def test_earlier_runs_are_compared_on_one_chart_against_tokens_or_time(make_checkpoint, tmp_path):
    make_checkpoint(tmp_path / "runs" / "lr-1e-3")
    make_checkpoint(tmp_path / "runs" / "lr-3e-3", history=[
        {"kind": "val", "step": 10, "tokens": 800, "mlm_acc": 0.2, "mlm_loss": 5.0, "elapsed": 30.0},
        {"kind": "train", "step": 10, "tokens": 800, "mlm_loss": 5.5, "elapsed": 29.0}])
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    figure = train.compare_runs(registry, ["runs/lr-1e-3", "runs/lr-3e-3"], "tokens")["compare_runs_plot"]
    accuracy = [trace for trace in figure.data if trace.xaxis == "x"]
    assert [trace.name for trace in accuracy] == ["lr-1e-3", "lr-3e-3"]
    assert list(accuracy[0].x) == [400] and list(accuracy[1].x) == [800] and list(accuracy[1].y) == [0.2]
    by_time = train.compare_runs(registry, ["runs/lr-3e-3"], "time")["compare_runs_plot"]
    assert list(by_time.data[0].x) == [0.5] and by_time.layout.xaxis.title.text == "minutes of training"
    with pytest.raises(Exception, match="(?i)choose one or more runs"):
        train.compare_runs(registry, [], "tokens")


def test_model_tab_says_how_long_a_model_trained_in_hours_minutes_or_seconds(make_checkpoint, tmp_path):
    for name, elapsed in [("long", 60152.4), ("short", 42.3), ("medium", 754.0)]:
        make_checkpoint(tmp_path / "checkpoints" / name, elapsed=elapsed, device="cpu")
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    shown = {name: header.selected(registry, f"checkpoints/{name}", 1, 1)["model_info"]
             for name in ("long", "short", "medium")}
    assert ", 16 h 43 min of training on cpu." in shown["long"]
    assert ", 42 s of training on cpu." in shown["short"] and ", 13 min of training on cpu." in shown["medium"]


def test_the_train_tab_continues_the_selected_model_through_the_api(app, client):
    job = client.submit(["wiki"], None, "tiny", 10, 4, 1e-3, 32, 512, False, train.START_CONTINUE, MODEL,
                        api_name="/train")
    *_, outputs = job  # the last update
    status = outputs[0]
    assert status.startswith("Finished 10 steps") and "tiny-test-continued-wiki" in status
    run = next(e for e in app["registry"].catalog.list_models() if "tiny-test-continued-wiki" in e.name)
    assert read_metadata(run.folder)["train_config"]["init_from"].endswith("tiny-test")
    with pytest.raises(AppError, match="(?i)somewhere.*not in the list of choices"):  # gradio checks the radio
        client.predict(["wiki"], None, "tiny", 10, 4, 1e-3, 32, 512, False, "somewhere", MODEL, api_name="/train")


TYPED = "\n\n".join(f"Paragraph {i} is about a small village by the lake. The baker there sells bread number {i}."
                    for i in range(8))


def test_typed_text_trains_like_an_upload_and_stays_private(app, client):
    job = client.submit([], None, "tiny", 10, 4, 1e-3, 32, 512, False, train.START_RANDOM, MODEL, TYPED,
                        api_name="/train")
    *_, outputs = job  # the last update
    assert outputs[0].startswith("Finished 10 steps") and "upload" in outputs[0]
    run = next(name for _, name in outputs[6]["choices"] if "tiny-upload-" in name)
    assert run not in [e.name for e in app["registry"].catalog.list_models()]  # another visitor does not see it
    with pytest.raises(AppError, match="(?i)upload a file or type text, not both"):
        client.predict([], handle_file(str(app["corpus"])), "tiny", 10, 4, 1e-3, 32, 512, False,
                       train.START_RANDOM, MODEL, TYPED, api_name="/train")


def test_typed_text_that_cannot_be_trained_on_is_called_typed_text_not_an_uploaded_file(tmp_path):
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    for typed, message in [("x " * (11 * 2**19), "The typed text is 11.0 MB; at most 10 MB are allowed"),
                           ("One paragraph alone.", "The typed text cannot be trained on: ")]:
        with pytest.raises(gr.Error, match=re.escape(message)) as refused:
            list(train.train(registry, [], None, "tiny", 10, 4, 1e-3, 32, 512, False, train.START_RANDOM,
                                None, typed, owner="visitor"))
        assert "upload" not in str(refused.value)


def test_typed_text_is_refused_by_size_before_any_copy_and_is_kept_where_a_restarted_app_sweeps(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    with pytest.raises(gr.Error, match="The typed text is 11.0 MB"):
        list(train.train(registry, [], None, "tiny", 10, 4, 1e-3, 32, 512, False, train.START_RANDOM, None,
                            "x" * (11 * 2**20), owner="visitor"))
    assert not any((tmp_path / "temp").iterdir())  # nothing was written
    seen = []

    def join_line(**settings):
        seen.append(Path(settings["upload"]))
        assert seen[0].read_text() == TYPED
        raise ValueError("the slot is closed")

    monkeypatch.setattr(registry, "join_line", join_line)
    with pytest.raises(gr.Error, match="The slot is closed"):
        list(train.train(registry, [], None, "tiny", 10, 4, 1e-3, 32, 512, False, train.START_RANDOM, None,
                            TYPED, owner="visitor"))
    assert seen[0].parent.name.startswith(f"{UPLOAD_PREFIX}{os.getpid()}-") and not seen[0].parent.exists()


def test_a_run_far_better_on_its_training_text_than_on_held_out_text_is_said_to_memorise():
    records = [{"kind": "train", "step": 200, "mlm_acc": 0.8}, {"kind": "val", "step": 200, "mlm_acc": 0.05}]
    assert "Learned by heart" in train_views.memorising_note(records) and "80%" in train_views.memorising_note(
        records)
    records[0]["mlm_acc"] = 0.3
    assert train_views.memorising_note(records) == ""  # a gap of 0.25: learning, not memorising


def test_a_finished_run_whose_next_sentence_accuracy_is_at_chance_is_told_why():
    records = [{"kind": "val", "step": 500, "nsp_acc": 0.62}, {"kind": "val", "step": 1000, "nsp_acc": 0.516}]
    note = train_views.nsp_chance_note(records)
    assert note.startswith("**Next-sentence prediction stayed at chance (52%).**") and "Devlin et al." in note
    records[-1]["nsp_acc"] = 0.58  # the last validation counts: off chance, nothing to explain
    assert train_views.nsp_chance_note(records) == ""
    assert train_views.nsp_chance_note([{"kind": "train", "step": 10, "nsp_acc": 0.5}]) == ""  # no validation yet


def test_head_importance_of_a_pair_draws_one_map_for_the_judgement(make_checkpoint, tmp_path):
    make_checkpoint(tmp_path / "checkpoints" / "tiny-test")
    registry = Registry(checkpoints_dir=tmp_path / "checkpoints", runs_dir=tmp_path / "runs", device="cpu",
                        allow_hub=False)
    figure = nsp.pair_importance(registry, MODEL, text_a="the cat sat.", text_b="it purred.")["nsp_importance_plot"]
    assert len(figure.data) == 1 and figure.layout.annotations[0].text == "B follows A"
    with pytest.raises(Exception, match="(?i)sentence B is empty"):
        nsp.pair_importance(registry, MODEL, text_a="the cat sat.", text_b=" ")


def test_the_probe_says_at_which_step_its_guesses_change_next(registry):
    trainer = SimpleNamespace(config=TrainConfig(corpus="wiki", steps=1000, eval_every=167), step=132, model=None)
    job = TrainingJob(trainer, "run")
    job.records += [{"kind": "probe", "step": 0, "text": "the [MASK] sat.", "predictions": [("cat", 0.5)]},
                    {"kind": "train", "step": 132, "tokens_per_s": 900.0, "elapsed": 40.0}]
    label = train.training_outputs(registry, job, None)["probe"].label
    assert label == "Step 0: guesses for “the [MASK] sat.” (the next at step 167)"  # not stuck at step 0


def test_a_question_waits_in_the_line_its_inputs_by_name_choose(registry):
    """The app's wiring gives admission each input by its name: the forward pass's gradient view waits in the line
    of training steps, its values in its own."""
    import asyncio
    from contextlib import asynccontextmanager

    kinds = []

    class Recording:
        @asynccontextmanager
        async def admit(self, kind, visitor):
            kinds.append(kind)
            yield

    def forward_steps(registry, model_name, text_a, shows="values", owner=None):
        return {}

    fn = ui.wire(forward_steps, registry, {}, Recording())
    asyncio.run(fn(MODEL, "the cat sat.", "gradient", None, None))
    asyncio.run(fn(MODEL, "the cat sat.", "values", None, None))
    assert kinds == ["training_step", "forward_steps"]


def test_a_question_whose_asker_has_gone_by_its_turn_is_not_computed(registry):
    """gradio marks a session's events dead when its stream closes; a question that waited in the app's lines
    meanwhile is refused when its turn comes, not computed for nobody."""
    import asyncio
    from contextlib import asynccontextmanager
    from types import SimpleNamespace

    class Admitting:
        @asynccontextmanager
        async def admit(self, kind, visitor):
            yield

    computed = []

    def neuron(registry, model_name, text_a):
        computed.append(text_a)
        return {}

    def asked_by(session: str, alive: bool) -> SimpleNamespace:
        queue = SimpleNamespace(active_jobs=[None, [SimpleNamespace(session_hash=session, alive=alive)]])
        app = SimpleNamespace(get_blocks=lambda: SimpleNamespace(_queue=queue))
        return SimpleNamespace(request=SimpleNamespace(app=app), session_hash=session, headers={}, client=None)

    assert ui.gone(asked_by("s", False)) and not ui.gone(asked_by("s", True)) and not ui.gone(None)
    fn = ui.wire(neuron, registry, {}, Admitting())
    with pytest.raises(gr.Error, match="has gone"):
        asyncio.run(fn(MODEL, "left", asked_by("s", False)))
    asyncio.run(fn(MODEL, "stayed", asked_by("s", True)))
    assert computed == ["stayed"]
