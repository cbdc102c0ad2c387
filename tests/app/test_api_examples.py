"""The `gradio_client` examples of docs/app.md, read from it and run as written against a served app, from a fresh
Client that has triggered none of the page's private events; and the values the API declares, accepted."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from gradio_client import Client
from gradio_client.exceptions import AppError

from bert_demo.app.policy import APP_FINETUNE
from bert_demo.checkpoint import save_pretrained
from bert_demo.config import read_config
from bert_demo.model import BertForPreTraining
from bert_demo.tokenizer import load_tokenizer
from bert_demo.training.pretraining import pretraining
from bert_demo.training.settings import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS_URL = "http://127.0.0.1:7860/"  # where the examples find the app; the test's app is elsewhere
MODEL = "checkpoints/tiny-test"  # the checkpoint the served app is given (conftest.py)


def readme_example() -> tuple[str, int]:
    """docs/app.md's python block that uses gradio_client, and the line it starts on."""
    readme = ROOT.joinpath("docs", "app.md").read_text()
    blocks = [m for m in re.finditer(r"^```python\n(.*?)^```", readme, re.S | re.M) if "gradio_client" in m[1]]
    assert len(blocks) == 1, "docs/app.md should have one python block of gradio_client examples"
    return blocks[0][1], readme[:blocks[0].start(1)].count("\n") + 1


def narrowed(folder: Path) -> None:
    """The shipped model's vocabulary, layers and heads in `folder`, 64 wide where it is 256, untrained: the examples
    prove the API, not the model, and their fine-tuning scores each start on 2,475 sentences (19 s of this module's
    30 at the shipped width, 9 s at this one)."""
    torch.manual_seed(0)
    narrow = BertForPreTraining(replace(read_config(folder), hidden_size=64, intermediate_size=256))
    saved = save_pretrained(narrow, load_tokenizer(folder), folder.parent / "narrowed")
    for name in ("config.json", "model.safetensors"):  # the card, examples and records stay the shipped model's
        shutil.copyfile(saved / name, folder / name)
    shutil.rmtree(saved)


@pytest.fixture(scope="module")
def app(served_app, tmp_path_factory):
    """The app, and what the examples name, made after it started (its page was built without them): the shipped
    model (narrowed), and two runs with timelines (steps 0, 10 and 30). Fine-tuning runs 2 steps a start, not the
    app's 200."""
    base = tmp_path_factory.mktemp("api-examples")
    with served_app(base) as served, pytest.MonkeyPatch.context() as patch:
        patch.setattr("bert_demo.app.state.forms.APP_FINETUNE", {**APP_FINETUNE, "max_steps": 2, "validations": 1})
        patch.setattr("bert_demo.app.policy.APP_FINETUNE", {**APP_FINETUNE, "max_steps": 2, "validations": 1})
        shutil.copytree(ROOT / "checkpoints" / "mini-english", base / "checkpoints" / "mini-english")
        narrowed(base / "checkpoints" / "mini-english")
        for name, lr in [("a", 1e-3), ("b", 3e-3)]:
            list(pretraining(TrainConfig(preset="tiny", corpus=str(served["corpus"]), steps=40, batch_size=4,
                                         seq_len=32, vocab_size=300, lr=lr, out=str(base / "runs" / name),
                                         eval_every=20, log_every=10, eval_batches=1)).run())
        yield served


def plot_data(output) -> list[dict]:
    return json.loads(output["plot"])["data"]


def test_the_documented_gradio_client_examples_run_as_written_from_a_fresh_client(app, capsys):
    code, first_line = readme_example()
    assert code.count(DOCS_URL) == 1
    run = {}  # tracebacks point at docs/app.md's own lines
    exec(compile("\n" * (first_line - 1) + code.replace(DOCS_URL, app["url"]), str(ROOT / "docs" / "app.md"), "exec"),
         run)
    filled, per_mask = run["filled"], run["per_mask"]
    assert "1 head switched off" in filled["label"] and any(s["class_or_confidence"] for s in filled["value"])
    assert run["per_layer"].startswith("| layer | [MASK] 1 |") and run["words"]
    assert len(per_mask[0]["confidences"]) == 5 and not any(per_mask[1:])  # the sentence has one [MASK]
    ranked = [c["confidence"] for c in per_mask[0]["confidences"]]
    assert ranked == sorted(ranked, reverse=True) and per_mask[0]["label"] == per_mask[0]["confidences"][0]["label"]
    assert len(plot_data(run["drops"])) == 1  # one map: one [MASK]
    p_next = {c["label"]: c["confidence"] for c in run["p_next"]["confidences"]}
    assert sum(p_next.values()) == pytest.approx(1.0)
    assert plot_data(run["heatmap"])[0]["type"] == "heatmap" and len(plot_data(run["grid"])) == 4  # mini: 4 heads
    assert len(run["table"]["data"]) > 5 and "“paris”" in run["caption"]  # the caption of /neighbours, the last
    assert plot_data(run["scatter"])[0]["text"] == ["paris", "london", "king", "queen"]
    assert {trace["name"] for trace in plot_data(run["chart"])} == {"a", "b"}
    assert any(s["class_or_confidence"] for s in run["at_10"]["value"])
    assert "status" in run, f"/train streamed nothing: {run['job'].exception()}"
    assert run["status"].startswith("Finished 50 steps")
    assert run["status"] in capsys.readouterr().out  # the loop printed each status
    assert run["ft_status"].startswith("Done: 2 runs")
    assert "random weights" in run["verdict"] and len(plot_data(run["curves"])) == 3  # two starts, the line to beat
    assert {c["label"] for c in run["probabilities"]["confidences"]} == {"negative", "positive"}
    assert [w["token"] for w in run["coloured"]["value"] if w["class_or_confidence"] is not None][:2] == ["a",
                                                                                                       "gripping"]
    assert "Layer 4, before" in plot_title(run["before"]) and "Layer 4, after" in plot_title(run["after"])
    assert run["moved"].startswith("Share of attention that moved") and "layer 4: " in run["moved"]
    assert run["pair"].startswith("Seed **7**, drawn by the training pipeline itself")
    assert "**Sentence B**" in run["pair"]
    assert run["tokens"].count('<div class="ex-tok ') > 10 and "over **1,000 draws**" in run["shares"].replace("O", "o")
    assert "Masked-LM loss" in run["loss"] and run["per_position"].startswith("| position |")
    assert "masking rate" in run["recipe"]
    assert run["step_text"].startswith("### 9 of 31 · Attention: Scores (layer 2, head 3)")
    assert plot_data(run["step_plot"])[0]["type"] == "heatmap"
    assert "| after | size |" in run["path"] and len(plot_data(run["every_layer"])) == 16  # 4 layers x 4 heads
    assert run["gradient_text"].startswith("**The gradient of the loss here**")
    assert run["summary"].startswith("**One step** of AdamW") and "What Adam's first step does" in run["adam"]
    assert run["batch"].startswith("The example above and the next **3**") and "micro-batches" in run["batch"]
    assert "feed-forward 1" not in run["by_hand"] and "intermediate.dense" in run["by_hand"]
    assert "layer 2, head 3" in run["by_hand"]
    assert len(plot_data(run["adam_plot"])) == 4 * 3 and run["adam_text"].startswith("**10 steps of AdamW**")
    assert run["depth_text"].startswith("The gradient of one fixed batch") and "At step 0 " in run["depth_text"]
    assert [t["name"] for t in plot_data(run["depth_plot"]) if t.get("showlegend") is not False][:3] == [
        "step 0", "step 10", "step 30"]  # runs/a's snapshots


def plot_title(output) -> str:
    return json.loads(output["plot"])["layout"]["title"]["text"]


def test_every_choice_the_api_declares_is_of_its_declared_type_and_is_accepted(app):
    api = Client(app["url"], verbose=False).view_api(print_info=False, return_format="dict")
    python = {"string": str, "number": (int, float), "boolean": bool}
    for endpoint, info in api["named_endpoints"].items():
        for parameter in info["parameters"]:
            declared = parameter["type"].get("items", parameter["type"])
            for value in declared.get("enum", []):
                assert isinstance(value, python[declared["type"]]), (endpoint, parameter["parameter_name"], value)
    seq_len = next(p for p in api["named_endpoints"]["/train"]["parameters"] if p["parameter_name"] == "seq_len")
    for value in [*seq_len["type"]["enum"], 64]:  # as declared, and as a number; no corpus is the app's refusal
        with pytest.raises(AppError, match="Choose a corpus or upload a .txt file"):
            Client(app["url"], verbose=False).predict([], None, "tiny", 10, 16, 1e-3, value, 4096,
                                                      api_name="/train")


@pytest.mark.parametrize("asked, api_name, message", [
    ({"model_name": "runs/a", "snapshot": "20", "sentence": "the [MASK] sat."}, "/fill_mask",
     "This run has no snapshot at step 20: it has 0, 10, 30"),
    ({"model_name": "runs/a", "snapshot": "soon", "sentence": "the [MASK] sat."}, "/fill_mask",
     "Unknown training step 'soon'"),
    ({"model_name": MODEL, "snapshot": "10", "sentence": "the [MASK] sat."}, "/fill_mask",
     "Only “final” can be shown of tiny-test: it kept no snapshots"),
    ({"model_name": "runs/a", "text_a": "the cat sat.", "compare": "soon"}, "/attention",
     "Unknown training step 'soon'"),
    ({"names": ["runs/a", "runs/missing"]}, "/compare_runs", "There is no model called runs/missing"),
    ({"corpus": ["wiki"], "upload": None, "preset": "tiny", "steps": 10, "seq_len": "long"}, "/train",
     "Sequence length must be a whole number"),
    ({"corpus": ["wiki"], "upload": None, "preset": "tiny", "steps": 10, "seq_len": 1000}, "/train",
     "Sequence length must be between 16 and 128"),
])
def test_a_step_run_or_sequence_length_the_page_does_not_list_gets_the_apps_own_message(app, asked, api_name,
                                                                                        message):
    with pytest.raises(AppError, match=re.escape(message)) as refused:
        Client(app["url"], verbose=False).predict(**asked, api_name=api_name)
    assert "list of choices" not in str(refused.value)


def test_a_step_the_run_kept_answers_at_that_step_and_is_compared(app):
    client = Client(app["url"], verbose=False)
    early, *_ = client.predict(model_name="runs/a", sentence="the [MASK] sat on the mat.", top_k=3, heads_off=[],
                               snapshot="0", api_name="/fill_mask")
    late, *_ = client.predict(model_name="runs/a", sentence="the [MASK] sat on the mat.", top_k=3, heads_off=[],
                              snapshot="final", api_name="/fill_mask")
    assert early["value"] != late["value"]
    _, _, caption, compared, *_ = client.predict(model_name="runs/a", text_a="the cat sat.", text_b="", layer=1, head=1,
                                                 view="one head", hide=False,
                                                 pair="every token", snapshot="final",
                                                 compare="10", api_name="/attention")
    assert "at two steps of training" in caption and compared["visible"]  # an update: the plot shows
    assert "Step 10" in json.loads(compared["value"]["plot"])["layout"]["title"]["text"]
