"""The Step by step tab's handlers, called as the page calls them: an example drawn again with its seed, the shares
of both recipes, the loss the backend gives; every step of the forward pass with its line of model.py; bad input
refused with a message; and the recipe said on the Train and Model tabs."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from bert_demo.app.queries import At
from bert_demo.app.tabs import drawn, model_views, steps, steps_views, train
from bert_demo.inspection import pretraining_example
from bert_demo.inspection.forward_steps import STEP_NAMES, Site, source_line
from bert_demo.training.settings import PAPER_RECIPE, TrainConfig

MODEL = "checkpoints/tiny-test"
PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))


def draw(registry, seed: int = 3, recipe: str = "model", source: str = drawn.YOUR_TEXT, typed: str = PARAGRAPHS):
    return steps.pretraining_example(registry, MODEL, source=source, typed=typed, recipe=recipe, seed=seed)


def test_an_example_is_drawn_again_by_its_seed_and_shows_every_position_of_the_backends_draw(registry):
    first, again, other = draw(registry, 5), draw(registry, 5), draw(registry, 6)
    assert first == again and first["ex_tokens"] != other["ex_tokens"]
    loaded = registry.catalog.load(MODEL)
    recipe = drawn.trained_with(registry, MODEL, None)
    documents = pretraining_example.typed_documents(PARAGRAPHS)
    fates = set()
    for seed in range(5, 12):
        example = pretraining_example.draw(documents, loaded.tokenizer, recipe, seed)
        shown = draw(registry, seed)["ex_tokens"]
        assert shown.count('<div class="ex-tok ') == len(example.pieces)
        assert shown.count('class="ex-fate"') == len(example.picked) > 0
        fates |= set(example.fates)
    assert fates == {0, 1, 2, 3}  # every fate was shown
    example = pretraining_example.draw(documents, loaded.tokenizer, recipe, 5)
    assert first["ex_pair"].startswith("Seed **5**")
    assert ("IsNext" if example.is_next else "NotNext") in first["ex_pair"]
    loss = pretraining_example.loss(loaded.model, example, loaded.tokenizer)
    assert f"**{loss.mlm_loss:.4f}**" in first["ex_loss"] and f"**{loss.loss:.4f}**" in first["ex_loss"]
    assert first["ex_loss_table"].count("\n") == len(example.picked) + 1


def test_the_shares_table_sets_the_models_masking_rate_beside_the_papers(registry):
    shown = draw(registry)["ex_shares"]
    picked = next(line for line in shown.splitlines() if line.startswith("| positions picked"))
    cells = [cell.strip() for cell in picked.split("|")[2:-1]]
    recorded = drawn.trained_with(registry, MODEL, None)
    assert cells[0] == f"{recorded.mask_prob:.0%}" and cells[2] == "15%"
    assert all(re.fullmatch(r"\d+\.\d%", cell) for cell in (cells[1], cells[3]))
    paper = draw(registry, recipe="paper")
    assert "under BERT's recipe" in paper["ex_pair"] and "every setting as in the paper" in paper["ex_recipe_note"]


def test_the_shares_table_sets_each_recipes_own_share_of_mask_random_and_kept():
    def drawn_shares(mask_prob: float, mask_replace: float) -> pretraining_example.Shares:
        fates = {"[MASK]": 0.5, "a random word": 0.25, "kept": 0.25}
        return pretraining_example.Shares(draws=1000, picked=mask_prob, fates=fates, is_next=0.5, mask_prob=mask_prob,
                                          mask_replace=mask_replace, candidates=9000, targets=2000)

    shown = steps_views.shares_markdown(drawn_shares(0.25, 1.0), drawn_shares(0.15, 0.8), None)
    sets = {line.split("|")[1].strip(): (line.split("|")[2].strip(), line.split("|")[4].strip())
            for line in shown.splitlines() if line.startswith("| … of those picked")}
    assert sets == {"… of those picked: [MASK]": ("100%", "80%"), "… of those picked: a random word": ("0%", "10%"),
                    "… of those picked: kept": ("0%", "10%")}


def test_a_named_corpus_gives_passages_with_their_places(registry, private_cache):
    shown = draw(registry, seed=2, source="wiki", typed="")
    assert re.search(r"\*\*Sentence A\*\*, wiki, document \d+, sentences? \d+", shown["ex_pair"])


def test_every_step_of_the_forward_pass_is_shown_with_its_equation_shape_and_line(registry):
    from bert_demo.inspection.forward_steps import forward_steps as computed

    loaded = registry.catalog.load_at(MODEL, None)
    passed = computed(loaded.model, loaded.tokenizer, "the cat sat on the [MASK].", "it purred.", layer=2, head=1)
    for index in range(len(STEP_NAMES)):
        shown = steps.forward_steps(registry, MODEL, text_a="the cat sat on the [MASK].", text_b="it purred.", layer=2,
                                    head=1, step=index)
        part, title = STEP_NAMES[index].split(" · ")
        assert shown["fw_text"].startswith(f"### {index + 1} of {len(STEP_NAMES)} · {part}: {title}")
        rows, columns = passed[index].shape
        assert "$$" in shown["fw_text"] and f"**Shape** ({rows}, {columns}): {rows} row" in shown["fw_text"]
        number = int(re.search(r"model.py`, line (\d+)", shown["fw_text"])[1])
        assert source_line(passed[index].code) == (number, source_line_of(shown["fw_text"]))
        figure = json.loads(shown["fw_plot"].to_json())
        assert figure["data"], STEP_NAMES[index]
        assert shown["fw_step"].value == index


def source_line_of(markdown: str) -> str:
    return markdown.split("```python\n")[1].split("\n```")[0]


def test_the_code_shown_is_the_line_of_model_py_it_names(registry):
    shown = steps.forward_steps(registry, MODEL, text_a="the cat sat.", text_b="", layer=1, head=1,
                                step=STEP_NAMES.index("Attention · Scores"))
    number, line = source_line("scores = self.attention_scores(")
    assert f"line {number}:" in shown["fw_text"] and source_line_of(shown["fw_text"]) == line


@pytest.mark.parametrize("change, message", [
    ({"source": "the web"}, "draw from"), ({"recipe": "mine"}, "the recipe is"), ({"seed": -1}, "seed must be"),
    ({"seed": 1.5}, "seed must be a whole number"),
    ({"typed": "one paragraph only. it is short."}, "at least two paragraphs"),
])
def test_an_example_asked_wrongly_gets_a_message(registry, change, message):
    args = {"seed": 3, "recipe": "model", "source": drawn.YOUR_TEXT, "typed": PARAGRAPHS, **change}
    with pytest.raises(gr.Error, match=f"(?i){message}"):
        draw(registry, **args)


@pytest.mark.parametrize("layer, head, index, message", [
    (9, 1, 0, "layer must be"), (1, 9, 0, "head must be"), (1, 1, 31, "the step must be a whole number from 0 to 30, "
                                                                      "got 31"), (1.5, 1, 0, "layer must be a whole")])
def test_a_step_asked_wrongly_gets_a_message(registry, layer, head, index, message):
    with pytest.raises(gr.Error, match=f"(?i){message}"):
        steps.forward_steps(registry, MODEL, text_a="the cat sat.", text_b="", layer=layer, head=head, step=index)


def test_the_tab_draws_when_first_opened_and_again_on_another_model_only_once_drawn(registry):
    args = dict(source="wiki", typed="", recipe="model", seed=1, snapshot="final", text_a="the cat sat.", text_b="",
                layer=9, head=9, step=0, reads="typed", shows="values", position=-1)
    first = steps.steps_opened(registry, MODEL, **args, opened=False)
    assert first["steps_drawn"] is True and first["fw_layer"].maximum == first["fw_layer"].value == 3
    assert first["fw_head"].maximum == first["fw_head"].value == 4  # each to its own count, not the other's
    assert (first["lc_layer"].maximum, first["lc_head"].maximum) == (3, 4)  # section 4's, the same model's
    assert all(value == gr.skip() for value in steps.steps_opened(registry, MODEL, **args, opened=True).values())
    untouched = steps.steps_refreshed(registry, "checkpoints/another", **args, opened=False)
    assert untouched["ex_pair"] == gr.skip() and untouched["fw_text"] == gr.skip()
    again = steps.steps_refreshed(registry, "checkpoints/another", **args, opened=True)
    assert again["ex_pair"].startswith("Seed **1**") and again["fw_text"].startswith("### 1 of 31")


def test_the_train_tab_offers_the_papers_recipe_and_says_how_the_fast_one_differs():
    fast, paper = train.recipe_note("fast"), train.recipe_note("paper")
    assert "- masking rate: **25%** (BERT's: 15%)" in fast and "1.2 M tokens" in fast
    assert "every setting as in the paper" in paper
    with pytest.raises(gr.Error, match="(?i)the recipe is"):
        train.recipe_note("quick")


def test_a_run_under_the_papers_recipe_is_configured_with_its_settings(registry):
    config = registry.forms.train_config(corpus="wiki", recipe="paper")
    assert {name: getattr(config, name) for name in PAPER_RECIPE} == PAPER_RECIPE
    assert registry.forms.train_config(corpus="wiki").mask_prob == TrainConfig().mask_prob == 0.25
    with pytest.raises(ValueError, match="the recipe is fast or paper"):
        registry.forms.train_config(corpus="wiki", recipe="mine")


def test_the_model_tab_says_the_recipe_the_model_was_trained_with(registry):
    shown = model_views.model_markdown(registry.catalog.model_info(MODEL))
    assert "Trained with **its own recipe**" in shown and "- masking rate:" not in shown  # 15%, as BERT's
    record = {**json.loads((registry.catalog.resolve(MODEL).folder / "bert_demo.json").read_text())["train_config"],
              "mask_prob": 0.25}
    assert "- masking rate: **25%** (BERT's: 15%)" in model_views.model_markdown({**registry.catalog.model_info(MODEL),
                                                                           "train_config": record})


def test_scores_are_drawn_as_dots_and_shares_as_bars_and_a_lone_sentence_is_said_to_have_no_b(registry):
    decoder, softmax = (STEP_NAMES.index(name) for name in ("Masked-LM head · Decoder, tied to the word embeddings",
                                                             "Masked-LM head · Softmax: the guesses"))
    scores = steps.forward_steps(registry, MODEL, text_a="the [MASK] sat.", text_b="", layer=1, head=1, step=decoder)
    shares = steps.forward_steps(registry, MODEL, text_a="the [MASK] sat.", text_b="", layer=1, head=1, step=softmax)
    assert json.loads(scores["fw_plot"].to_json())["data"][0]["type"] == "scatter"  # a bar from 0 hid the top guess
    assert json.loads(shares["fw_plot"].to_json())["data"][0]["type"] == "bar"
    nsp = STEP_NAMES.index("Next-sentence head · Softmax")
    shown = steps.forward_steps(registry, MODEL, text_a="the cat sat.", text_b="", layer=1, head=1, step=nsp)["fw_text"]
    assert "There is no sentence B here" in shown
    assert "There is no sentence B" not in steps.forward_steps(registry, MODEL, text_a="the cat sat.",
                                                               text_b="it purred.", step=nsp)["fw_text"]


def test_walking_the_steps_layers_and_heads_of_one_input_runs_the_model_once(registry, monkeypatch):
    from bert_demo.inspection import forward_steps as forward

    runs, run = [], forward.forward_pass
    monkeypatch.setattr(forward, "forward_pass", lambda *args: runs.append(args[2:4]) or run(*args))
    for index in range(5):
        steps.forward_steps(registry, MODEL, text_a="a walk of one input.", text_b="", layer=2, head=2, step=index)
    shown = steps.forward_steps(registry, MODEL, text_a="a walk of one input.", text_b="", layer=1, head=1,
                                step=0)  # another layer and head
    assert "(layer 1, head 1)" in steps.forward_steps(registry, MODEL, text_a="a walk of one input.", text_b="",
                                                      layer=1, head=1, step=5)["fw_text"]
    steps.forward_steps(registry, MODEL, text_a="another input.", text_b="", layer=1, head=1, step=0)
    assert runs == [("a walk of one input.", None), ("another input.", None)] and shown["fw_text"]


def test_a_kept_forward_pass_is_its_visitors_alone(registry, monkeypatch):
    """The same text on the same model, asked by two visitors: each gets a pass of their own, computed for them, so
    that nothing kept from one visitor reaches another (nor tells them, by its speed, what another asked)."""
    from bert_demo.inspection import forward_steps as forward

    runs, run = [], forward.forward_pass
    monkeypatch.setattr(forward, "forward_pass", lambda *args: runs.append(args[2]) or run(*args))
    for visitor in ("visitor-a", "visitor-b", "visitor-a"):
        steps.forward_steps(registry, MODEL, text_a="a text two visitors type.", text_b="", layer=1, head=1, step=0,
                            owner=visitor)
    assert runs == ["a text two visitors type."] * 2


def test_the_kept_passes_stay_within_their_bytes(registry, monkeypatch):
    """Passes of six texts of one length, where two fit in the bytes: the two latest are kept, within the bound."""
    texts = [f"text number {i} of six." for i in range(6)]
    steps.forward_steps(registry, MODEL, text_a=texts[0], text_b="", layer=1, head=1, step=0, owner="visitor-a")
    one = next(kept for (_, asked), kept in steps._passes.items() if texts[0] in asked).nbytes
    monkeypatch.setattr(steps, "_passes", steps.ByVisitor(steps.PASSES_KEPT, int(2.5 * one),
                                                          lambda kept: kept.nbytes))
    for typed in texts:
        steps.forward_steps(registry, MODEL, text_a=typed, text_b="", layer=1, head=1, step=0, owner="visitor-a")
        assert 0 < steps._passes.bytes <= 2.5 * one
    assert [asked[-2] for (_, asked), _ in steps._passes.items()] == texts[-2:]  # (..., text A, text B)


def test_a_kept_pass_of_the_run_in_progress_is_taken_again_once_the_run_has_stepped(registry, monkeypatch):
    """The run in progress is "live" at every step, while its weights change with each: a visitor's kept pass named
    it by that name alone, and showed the numbers of weights the run had since changed."""
    import copy

    from bert_demo.app.runs.job import TrainingJob
    from bert_demo.inspection import forward_steps as forward

    loaded = registry.catalog.load(MODEL)
    trainer = SimpleNamespace(step=5, model=loaded.model, tokenizer=loaded.tokenizer, visible_to=None,
                              snapshot=lambda: copy.deepcopy(loaded.model).eval())
    registry.slot.job = TrainingJob(trainer, "a-run")
    monkeypatch.setattr(TrainingJob, "running", property(lambda job: True))
    runs, run = [], forward.forward_pass
    monkeypatch.setattr(forward, "forward_pass", lambda *args: runs.append(args[0]) or run(*args))
    shown = {}
    for step, visitor in ((5, "visitor-a"), (5, "visitor-a"), (6, "visitor-a"), (6, "visitor-a"), (6, "visitor-b")):
        trainer.step = step
        shown[step, visitor] = steps.forward_steps(registry, "live", text_a="the run moves on.", text_b="", layer=1,
                                                   head=1, step=3, owner=visitor)["fw_text"]
    assert len(runs) == 3 and runs[0] is not runs[1]  # kept at step 5; taken again, of the new weights, at step 6
    assert runs[1] is runs[2] and shown[6, "visitor-b"] == shown[6, "visitor-a"]  # beside another: its own, the same


def test_opening_the_tab_on_the_drawn_example_shows_that_example_in_both_views_and_names_a_bad_slider(registry):
    """The tab opened (or a link followed) with the forward pass reading the example: section 2's rows are the very
    pieces section 1 drew; a slider's value that is not whole is refused by its name."""
    view = dict(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model", seed=5, snapshot="final",
                text_a="ignored.", text_b="", layer=1, head=1, step=0, reads="example", shows="values", position=-1)
    both = steps.steps_opened(registry, MODEL, opened=False, **view)
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                          seed=5)).example
    assert both["ex_pair"].startswith("Seed **5**")
    rows = json.loads(both["fw_plot"].to_json())["data"][0]["y"]
    assert [row.split(" ", 1)[1] for row in rows] == example.shown
    for slider in ("layer", "head"):
        with pytest.raises(gr.Error, match=f"(?i)the {slider} must be a whole number"):
            steps.steps_opened(registry, MODEL, opened=False, **{**view, slider: 1.5})


def test_the_forward_pass_reads_the_drawn_example_as_training_reads_it(registry):
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                          seed=5)).example
    shown = steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=0, reads="example",
                                source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model", seed=5)
    rows = json.loads(shown["fw_plot"].to_json())["data"][0]["y"]
    assert [row.split(" ", 1)[1] for row in rows] == example.shown  # every piece, masked, random and kept
    decoder = STEP_NAMES.index("Masked-LM head · Decoder, tied to the word embeddings")
    guesses = steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=decoder,
                                  reads="example", source=drawn.YOUR_TEXT, typed=PARAGRAPHS,
                                  recipe="model", seed=5)
    assert f"**Shape** ({len(example.picked)}, " in guesses["fw_text"]  # the head runs at the picked positions


def test_a_step_shows_its_gradient_from_the_training_step_taken_once(registry, monkeypatch):
    from bert_demo.app.tabs import learning
    from bert_demo.inspection import training_step

    taken, take = [], training_step.take
    monkeypatch.setattr(training_step, "take", lambda *args, **kwargs: taken.append(1) or take(*args, **kwargs))
    ask = dict(reads="example", shows="gradient", source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model", seed=6,
               owner="visitor-g")
    learning.training_step(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model", seed=6,
                           owner="visitor-g")
    output = STEP_NAMES.index("Feed-forward · The layer's output (LayerNorm)")
    shown = steps.forward_steps(registry, MODEL, text_a="", text_b="", layer=2, head=1, step=output, **ask)
    assert shown["fw_text"].startswith("**The gradient of the loss here**") and taken == [1]
    assert "its gradient on one colour scale" in shown["fw_grid_note"]  # the pictures below are the gradient's too
    same = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                       seed=6))
    step = take(same.loaded.model, same.example, same.config)
    expected = step.flow[Site("bert.encoder.layer.1.output.LayerNorm")][0]
    z = torch.tensor(shown["fw_plot"].data[0].z, dtype=torch.float32)
    torch.testing.assert_close(z, expected, atol=float(expected.abs().max()) * 1e-3, rtol=0)  # 4 digits of the top
    mask = steps.forward_steps(registry, MODEL, text_a="", text_b="", layer=2, head=1,
                               step=STEP_NAMES.index("Attention · Padding mask"), **ask)
    assert "no gradient at this step" in mask["fw_text"]


def test_a_gradient_of_typed_sentences_is_refused_with_what_to_choose(registry):
    with pytest.raises(gr.Error, match="choose “the example drawn above”"):
        steps.forward_steps(registry, MODEL, text_a="the cat sat.", text_b="", layer=1, head=1, step=0,
                            shows="gradient")


def test_the_tab_offers_the_models_training_steps_where_it_kept_snapshots(registry):
    assert steps.timeline_of(registry, MODEL)["ex_at"].visible is False
    assert steps.timeline_of(registry, "no/such model")["ex_at"].visible is False


def test_a_link_names_the_views_settings_and_model_and_opening_it_sets_them():
    link = steps.link_to("runs/my run", "wiki", "paper", 7, "example", "gradient", 8, 2, 3)
    assert ("(?tab=steps&model=runs%2Fmy+run&source=wiki&recipe=paper&seed=7&reads=example&shows=gradient&step=9"
            "&layer=2&head=3)") in link
    request = SimpleNamespace(query_params={"tab": "steps", "model": "runs/my run", "seed": "7", "step": "9",
                                            "layer": "x", "recipe": "paper"})
    tabs, no_link, model, source, recipe, seed, reads, shows, step, layer, head = steps.opened_by_link(request)
    assert tabs.selected == "steps" and no_link is False  # the link's view is drawn next, as if the tab had opened
    assert (model, recipe, seed, step) == ("runs/my run", "paper", 7, 8)
    assert all(value == gr.skip() for value in (source, reads, shows, layer, head))  # unread: left as it is
    tabs, no_link, *settings = steps.opened_by_link(SimpleNamespace(query_params={}))
    assert no_link is True and all(value == gr.skip() for value in (tabs, *settings))  # nothing to draw


def test_from_the_training_step_one_click_shows_its_gradient_at_the_step_chosen_or_where_it_is_born():
    index = STEP_NAMES.index("Feed-forward · GELU")
    assert steps.to_gradient(index) == ("example", "gradient", index)
    no_gradient = STEP_NAMES.index("Attention · Padding mask")
    assert steps.to_gradient(no_gradient) == ("example", "gradient", STEP_NAMES.index(steps.DECODER_STEP))


def test_the_decoders_gradient_shows_each_positions_label_first_as_autograd_and_says_which_were_kept_or_random(
        registry):
    """At the decoder the gradient view shows each picked position's label first, its gradient (p − 1)/N negative,
    then the top guesses beside it, each as transformers' autograd gives it; and each row says whether masking kept
    the position or gave it a random word."""
    from bert_demo.data.masking import Fate
    from tests.references import example_batch, transformers_loss, transformers_model
    from tests.rendered import traces

    seed = next(seed for seed in range(60) if {Fate.RANDOM, Fate.KEPT} <= set(
        drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                    seed=seed)).example.fates))
    shown = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="model",
                                                        seed=seed))
    example, tokenizer = shown.example, shown.loaded.tokenizer
    index = STEP_NAMES.index("Masked-LM head · Decoder, tied to the word embeddings")
    answer = steps.forward_steps(registry, MODEL, text_a="ignored.", text_b="", layer=1, head=1, step=index,
                                 reads="example", shows="gradient", source=drawn.YOUR_TEXT,
                                 typed=PARAGRAPHS, recipe="model", seed=seed)
    theirs = transformers_model(shown.loaded.model)
    loss, out = transformers_loss(theirs, example_batch(example), shown.config.nsp_weight)
    out.prediction_logits.retain_grad()
    loss.backward()
    grads = out.prediction_logits.grad[0]
    titles = [a.text for a in answer["fw_plot"].layout.annotations]
    notes = {Fate.RANDOM: " (random)", Fate.KEPT: " (kept)"}
    assert titles == [f"{p} {example.shown[p]}{notes.get(example.fates[p], '')}" for p in example.picked]
    for trace, position in zip(traces(answer["fw_plot"]), example.picked):
        words = list(trace["y"])
        ids = tokenizer.convert_tokens_to_ids(words)
        assert ids[0] == example.labels[position] and ids[0] not in ids[1:]
        assert list(trace["x"]) == pytest.approx(grads[position, ids].tolist(), abs=1e-6)
        assert trace["x"][0] < 0 and all(value >= 0 for value in trace["x"][1:])
    assert "The first column is each picked position's label" in answer["fw_text"]
    assert f"(p − 1) / {len(example.picked)}" in answer["fw_text"]


def test_choosing_typed_sentences_shows_values_and_choosing_the_gradient_reads_the_example():
    """A gradient needs a training example's labels: the page never asks for the gradient of typed sentences (that
    was a refusal, shown twice, under the last answer's plot)."""
    assert steps.shows_fitted("typed", "gradient") == ("typed", "values")
    assert steps.shows_fitted("example", "gradient") == ("example", "gradient")
    assert steps.reads_fitted("typed", "gradient") == ("example", "gradient")
    assert steps.reads_fitted("typed", "values") == ("typed", "values")
