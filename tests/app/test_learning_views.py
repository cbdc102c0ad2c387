"""What the training step's section shows, read back from what it rendered (the Markdown tables' cells, the figures'
data and axes) and checked against an independent computation: transformers' BertForPreTraining with the same
weights for the loss, the gradients and the guesses, and torch's own AdamW stepped on the same loss for the update,
at the first step and at the steps after it. Signs, orders (before → after, IsNext/NotNext), which weight a number
belongs to, and which layer and head a cell is, are what these tests hold."""
from __future__ import annotations

import re

import pytest
import torch

from bert_demo.app.queries import At
from bert_demo.app.tabs import drawn, learning
from bert_demo.data.masking import Fate
from tests.conftest import TEST_SHAPE
from tests.references import adamw_by_hand, example_batch, transformers_loss, transformers_model
from tests.rendered import after, axis_title, number, numbers, table_after, tables, traces

MODEL = "checkpoints/tiny-test"
PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))
STEPS = 3


@pytest.fixture(scope="module")
def registry(make_checkpoint, tmp_path_factory):
    from bert_demo.app.registry import Registry

    root = tmp_path_factory.mktemp("learning-views")
    make_checkpoint(root / "checkpoints" / "tiny-test")
    return Registry(checkpoints_dir=root / "checkpoints", runs_dir=root / "runs", device="cpu", allow_hub=False)


@pytest.fixture(scope="module")
def seed(registry) -> int:
    """The first seed whose example, under the paper's recipe, has a picked position kept as it was and one given a
    random word."""
    return next(seed for seed in range(60) if {Fate.RANDOM, Fate.KEPT} <= set(
        drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                                    seed=seed)).example.fates))


@pytest.fixture(scope="module")
def taken(registry, seed):
    """The three training steps themselves, taken once for the module, as the page's handler takes them."""
    from bert_demo.inspection import training_step

    take, kept = training_step.take, []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training_step, "take", lambda *args, **kwargs: kept.append(take(*args, **kwargs)) or kept[-1])
        learning.training_step(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper", seed=seed,
                               snapshot="final", steps=STEPS, dropout="off")
    return take, kept[0]


@pytest.fixture
def shown(registry, seed, taken, monkeypatch):
    """Three steps on that example, as the page asks for them, rendered afresh for each test (the steps themselves
    taken once), and what the example was."""
    from bert_demo.inspection import training_step

    take, step = taken
    monkeypatch.setattr(training_step, "take", lambda *args, steps=1, **kwargs: step if steps == STEPS else
                        take(*args, steps=steps, **kwargs))
    answer = learning.training_step(registry, MODEL, source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                    seed=seed, snapshot="final", steps=STEPS, dropout="off")
    return answer, drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS,
                                                               recipe="paper", seed=seed))


@pytest.fixture(scope="module")
def by_hand(registry, seed):
    """torch's AdamW, stepped on transformers' loss for the same example under the same recipe."""
    example = drawn.drawn(registry, At(MODEL), drawn.Draw(source=drawn.YOUR_TEXT, typed=PARAGRAPHS, recipe="paper",
                                                          seed=seed))
    return adamw_by_hand(example.loaded.model, example_batch(example.example), example.config, STEPS)


def weight_of(cell: str) -> tuple[str, tuple[int, ...]]:
    """"bert.embeddings.word_embeddings.weight[4, 14]" as (name, index)."""
    name, index = re.fullmatch(r"(.+)\[([\d, ]+)\]", cell).groups()
    return name, tuple(int(i) for i in index.split(","))


def marked(cell: str, fates: list[int]) -> int:
    """A position cell ("12", "12 (kept)", "7 (random)"), its mark checked against masking's fate there."""
    position, *mark = cell.split(" ", 1)
    position = int(position)
    expected = {Fate.KEPT: ["(kept)"], Fate.RANDOM: ["(random)"]}.get(Fate(fates[position]), [])
    assert mark == expected, (cell, Fate(fates[position]))
    return position


def test_the_recipe_is_the_papers_where_it_differs_from_the_models_and_the_test_model_has_distinct_sizes(shown):
    _, example = shown
    config = example.loaded.model.config
    assert len({config.num_hidden_layers, config.num_attention_heads, config.hidden_size // config.num_attention_heads,
                config.hidden_size, config.intermediate_size, config.vocab_size}) == 6
    assert (config.num_hidden_layers, config.num_attention_heads) == (TEST_SHAPE.num_hidden_layers,
                                                                      TEST_SHAPE.num_attention_heads)
    assert example.config.adam_eps == 1e-6 and example.config.beta2 == 0.999


def test_the_worked_weights_are_torchs_adamw_numbers_for_those_very_weights(shown, by_hand):
    answer, example = shown
    recipe = example.config
    rows = table_after(answer["ts_adam"], "| weight |")
    assert len(rows) >= 2
    state = {name: by_hand.optimizer.state[p] for name, p in by_hand.model.named_parameters()}
    one = adamw_by_hand(example.loaded.model, example_batch(example.example), recipe, 1)
    first = {name: one.optimizer.state[p] for name, p in one.model.named_parameters()}
    assert state  # the three-step optimizer has moments too; the table is the first step's
    for row in rows:
        name, index = weight_of(row["weight"])
        g = float(one.read[name][index])
        m, v = float(first[name]["exp_avg"][index]), float(first[name]["exp_avg_sq"][index])
        before, moved = float(one.weights[0][name][index]), float(one.weights[1][name][index])
        expected = {"w": before, "g (clipped)": g, "m": m, "v": v, "m̂": m / 0.1, "v̂": v / (1 - recipe.beta2),
                    "Δw": moved - before, "Δw / lr": (moved - before) / recipe.lr, "w after": moved}
        for column, value in expected.items():
            assert number(row[column]) == pytest.approx(value, rel=6e-3, abs=1e-3 if column == "Δw / lr" else 1e-12), \
                (row["weight"], column)
        assert number(row["Δw"]) * g <= 0  # against the gradient's sign


def test_step_after_step_shows_each_weights_own_move_at_every_step(shown, by_hand):
    """Each column is one weight's value after a step minus its value before, as a share of the rate: at step 2 and
    after too, and not the move of another weight of the same tensor."""
    answer, example = shown
    worked = [weight_of(row["weight"]) for row in table_after(answer["ts_adam"], "| weight |")]
    trail = table_after(answer["ts_adam"], "**Step after step**")
    assert [row["step"] for row in trail] == [str(step) for step in range(1, STEPS + 1)]
    columns = list(trail[0])[1:]
    assert len(columns) == len(worked)
    for column, (name, index) in zip(columns, worked):
        assert column.endswith(f"[{', '.join(map(str, index))}]")
        for step, row in enumerate(trail):
            move = float(by_hand.weights[step + 1][name][index] - by_hand.weights[step][name][index])
            assert number(row[column]) == pytest.approx(move / example.config.lr, abs=2e-3), (column, step + 1)


def test_the_first_steps_moves_are_counted_over_every_weight_as_the_page_says(shown):
    """The share that moved by more than half the rate, the median move, the gradients under ε and those clipping put
    there, and no gradient at all, counted here from torch's AdamW's first step, overall and part by part."""
    answer, example = shown
    recipe = example.config
    one = adamw_by_hand(example.loaded.model, example_batch(example.example), recipe, 1)
    names = list(one.weights[0])

    def counted(chosen: list[str]) -> dict[str, float]:
        moved = torch.cat([(one.weights[1][n] - one.weights[0][n]).abs().flatten() for n in chosen]) / recipe.lr
        read = torch.cat([one.read[n].abs().flatten() for n in chosen])
        raw = torch.cat([one.raw[n].abs().flatten() for n in chosen])
        under = (read > 0) & (read <= recipe.adam_eps)
        return {"weights": len(moved), "moved > lr/2": float((moved > 0.5).float().mean()),
                "median move / lr": float(moved.sort().values[(len(moved) - 1) // 2]), "g = 0": int((read == 0).sum()),
                "0 < g ≤ ε": int(under.sum()),
                "of those, > ε before clipping": int((under & (raw > recipe.adam_eps)).sum())}

    text = answer["ts_adam"]
    every = counted(names)
    said = text[text.index("**Measured over all"):]
    assert number(said.split(" weights")[0]) == every["weights"]
    assert after(said, "weights of this step:") == pytest.approx(every["moved > lr/2"], abs=6e-4)
    assert after(said, "the median move was") == pytest.approx(every["median move / lr"], abs=6e-4)
    rows = {row["part"]: row for row in table_after(text, "| part |")}
    parts = {"embeddings · word embeddings": ["bert.embeddings.word_embeddings.weight"],
             "embeddings · position embeddings": ["bert.embeddings.position_embeddings.weight"],
             **{f"layer {layer + 1}": [n for n in names if n.startswith(f"bert.encoder.layer.{layer}.")]
                for layer in range(TEST_SHAPE.num_hidden_layers)},
             "masked-LM head": [n for n in names if n.startswith("cls.predictions.")]}
    for part, chosen in parts.items():
        expected = counted(chosen)
        del expected["median move / lr"]  # the median is said of all the weights, not of each part
        # a key's bias adds the same to every score of a row, which the softmax ignores: its true gradient is 0, and
        # float rounding leaves some of it at exactly 0 in one implementation and at 1e-9 in the other
        noise = TEST_SHAPE.hidden_size if part.startswith("layer") else 0
        for column, value in expected.items():
            tolerance = 6e-4 if column == "moved > lr/2" else noise if "g" in column else 0
            assert number(rows[part][column]) == pytest.approx(value, abs=tolerance), (part, column)
    assert sum(number(row["weights"]) for row in rows.values()) == every["weights"]
    positions = counted(["bert.embeddings.position_embeddings.weight"])["g = 0"]
    assert positions > 0 and f"{positions:,} of them in embeddings · position embeddings" in said  # past its length


def test_the_summary_reads_before_then_after_with_transformers_losses_and_guesses(shown, by_hand):
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    rows = {row[""]: row for row in table_after(answer["ts_summary"], "| | before |")}
    assert list(rows["the loss training minimises"]) == ["", "before", f"after {STEPS} steps"]
    with torch.no_grad():
        for model, column in ((theirs, "before"), (by_hand.model, f"after {STEPS} steps")):
            loss, out = transformers_loss(model, batch, recipe.nsp_weight)
            mlm = torch.nn.functional.cross_entropy(out.prediction_logits.flatten(0, 1), batch["mlm_labels"].flatten())
            nsp_probs = out.seq_relationship_logits.softmax(-1)[0]
            label = int(batch["nsp_labels"][0])
            assert number(rows["the loss training minimises"][column]) == pytest.approx(float(loss), abs=6e-5)
            assert number(rows["masked-LM loss"][column]) == pytest.approx(float(mlm), abs=6e-5)
            assert number(rows["next-sentence loss"][column]) == pytest.approx(-float(nsp_probs[label].log()), abs=6e-5)
            assert number(rows["p(the pair's own NSP label)"][column]) == pytest.approx(float(nsp_probs[label]),
                                                                                      abs=6e-4)
            probs = out.prediction_logits[0].softmax(-1)
            for row in table_after(answer["ts_summary"], "| position | label |"):
                position = marked(row["position"], example.example.fates)
                target = int(batch["mlm_labels"][0, position])
                p_before, p_after = numbers(row["p(label) before → after"])
                assert (p_before if column == "before" else p_after) == pytest.approx(float(probs[position, target]),
                                                                                     abs=6e-4)
    assert by_hand.losses[-1] == pytest.approx(number(rows["the loss training minimises"][f"after {STEPS} steps"]),
                                               abs=6e-5)


def test_where_the_gradient_starts_is_autograds_gradient_at_the_scores_label_and_top_guess(shown):
    """(p − 1)/N at the label, p/N at the top guess, at each picked position; and at the NSP head the softmax minus
    the one-hot label, for (IsNext, NotNext) in that order."""
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    loss, out = transformers_loss(theirs, batch, recipe.nsp_weight)
    out.prediction_logits.retain_grad()
    out.seq_relationship_logits.retain_grad()
    loss.backward()
    grads, probs = out.prediction_logits.grad[0], out.prediction_logits[0].detach().softmax(-1)
    vocabulary = example.loaded.tokenizer.convert_tokens_to_ids
    rows = table_after(answer["ts_start"], "| position |")
    assert [marked(row["position"], example.example.fates) for row in rows] == example.example.picked
    for row in rows:
        position = int(row["position"].split()[0])
        label = vocabulary(row["label"])
        assert label == int(batch["mlm_labels"][0, position])
        assert number(row["p(label)"]) == pytest.approx(float(probs[position, label]), abs=6e-4)
        assert number(row["∂loss/∂score(label)"]) == pytest.approx(float(grads[position, label]), rel=6e-3)
        if "(the label)" not in row["top guess"]:
            top = vocabulary(row["top guess"])
            assert top == int(probs[position].argmax())
            assert number(row["∂loss/∂score(top)"]) == pytest.approx(float(grads[position, top]), rel=6e-3)
    nsp = out.seq_relationship_logits.grad[0] / recipe.nsp_weight
    said = answer["ts_start"][answer["ts_start"].index("**At the NSP head**"):]
    label_word = "IsNext" if example.example.is_next else "NotNext"
    assert f"the label is {label_word}" in said
    shown_values = numbers(said.split("softmax − one-hot =")[1].split("for")[0])
    assert shown_values == pytest.approx(nsp.tolist(), abs=6e-5)


def test_the_tied_tables_parts_are_autograds_on_an_untied_copy(shown):
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    decoder = theirs.cls.predictions.decoder
    decoder.weight = torch.nn.Parameter(decoder.weight.detach().clone())  # the decoder's own copy: its own gradient
    loss, _ = transformers_loss(theirs, batch, recipe.nsp_weight)
    loss.backward()
    lookup, scores = theirs.bert.embeddings.word_embeddings.weight.grad, decoder.weight.grad
    rows = tables(answer["ts_tied"])[0]
    assert number(rows[0]["size (L2)"]) == pytest.approx(float(lookup.norm()), rel=6e-3)
    assert number(rows[1]["size (L2)"]) == pytest.approx(float(scores.norm()), rel=6e-3)
    assert number(rows[2]["size (L2)"]) == pytest.approx(float((lookup + scores).norm()), rel=6e-3)
    assert after(answer["ts_tied"], "to within") < 1e-5  # the two parts add up to the table's own gradient
    assert numbers(rows[0]["rows it reaches"])[0] == len(set(batch["input_ids"][0].tolist()))
    assert numbers(rows[1]["rows it reaches"])[:2] == [len(scores), len(scores)]


def test_each_parts_bar_is_the_norm_of_transformers_gradient_of_that_part(shown, by_hand):
    answer, _ = shown
    bars = traces(answer["ts_params"])[0]
    sizes = dict(zip(bars["y"], bars["x"]))
    raw = by_hand.raw

    def norm(*names: str) -> float:
        return float(sum(raw[name].pow(2).sum() for name in names) ** 0.5)

    for layer in range(TEST_SHAPE.num_hidden_layers):
        prefix = f"bert.encoder.layer.{layer}."
        for part, module in (("attention Q", "attention.self.query"), ("attention K", "attention.self.key"),
                             ("feed-forward 1", "intermediate.dense")):
            assert sizes[f"layer {layer + 1} · {part}"] == pytest.approx(
                norm(prefix + module + ".weight", prefix + module + ".bias"), rel=1e-4)
    assert sizes["embeddings · word embeddings"] == pytest.approx(norm("bert.embeddings.word_embeddings.weight"),
                                                                  rel=1e-4)
    assert sizes["next-sentence head · classifier"] == pytest.approx(
        norm("cls.seq_relationship.weight", "cls.seq_relationship.bias"), rel=1e-4)
    assert list(bars["y"]).index("layer 1 · attention Q") < list(bars["y"]).index("layer 2 · attention Q")
    assert "gradient" in axis_title(answer["ts_params"], "xaxis")


def test_each_heads_cell_is_the_gradient_at_that_layers_and_heads_weighted_sum_of_v(shown):
    """A row a layer, a column a head: with 3 layers and 4 heads a swapped axis cannot pass."""
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    contexts = []
    for layer in theirs.bert.encoder.layer:
        layer.attention.output.dense.register_forward_pre_hook(
            lambda module, inputs: (contexts.append(inputs[0]), inputs[0].retain_grad()) and None)
    loss, _ = transformers_loss(theirs, batch, recipe.nsp_weight)
    loss.backward()
    heads, width = TEST_SHAPE.num_attention_heads, TEST_SHAPE.hidden_size // TEST_SHAPE.num_attention_heads
    expected = [[float(context.grad[0, :, h * width:(h + 1) * width].norm()) for h in range(heads)]
                for context in contexts]
    heatmap = traces(answer["ts_heads"])[0]
    assert list(heatmap["y"]) == [f"layer {layer + 1}" for layer in range(TEST_SHAPE.num_hidden_layers)]
    assert list(heatmap["x"]) == [str(head + 1) for head in range(heads)]
    assert axis_title(answer["ts_heads"], "xaxis") == "head"
    assert torch.tensor(heatmap["z"]) == pytest.approx(torch.tensor(expected), rel=1e-4)


def test_the_losses_chart_is_the_loss_before_and_after_each_step_of_torchs_adamw(shown, by_hand):
    answer, _ = shown
    line = traces(answer["ts_losses"])[0]
    assert list(line["x"]) == list(range(STEPS + 1))
    assert list(line["y"]) == pytest.approx(by_hand.losses, abs=1e-4)
    assert axis_title(answer["ts_losses"], "xaxis") == "steps taken on this example"


def test_the_flow_is_each_tokens_gradient_at_each_step_from_the_loss_back_to_the_embeddings(shown):
    """Rows are tokens, columns steps from the heads back to the embeddings; a layer's output and its queries are
    transformers' gradients there, token by token, in the layer the column names."""
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    queries = []
    for layer in theirs.bert.encoder.layer:
        layer.attention.self.query.register_forward_hook(
            lambda module, inputs, output: (queries.append(output), output.retain_grad()) and None)
    loss, out = transformers_loss(theirs, batch, recipe.nsp_weight, output_hidden_states=True)
    for hidden in out.hidden_states:
        hidden.retain_grad()
    loss.backward()
    heatmap = traces(answer["ts_flow"])[0]
    labels = list(answer["ts_flow"].layout.xaxis.ticktext)
    assert labels[0] == "Classifier" and labels[-1] == "Word rows"  # from the loss back to the input
    notes = {Fate.RANDOM: " (random)", Fate.KEPT: " (kept)"}
    assert list(heatmap["y"]) == [f"{i} {token}{notes.get(fate, '')}" for i, (token, fate)
                                  in enumerate(zip(example.example.shown, example.example.fates))]
    assert sum("(kept)" in row for row in heatmap["y"]) == example.example.fates.count(Fate.KEPT) > 0
    z = torch.tensor(heatmap["z"], dtype=torch.float64)  # (tokens, steps): log10 of the size, NaN where none
    last = TEST_SHAPE.num_hidden_layers
    for layer in range(1, last + 1):
        column = labels.index(f"L{layer} The layer's output (LayerNorm)")
        expected = out.hidden_states[layer].grad[0].norm(dim=-1).log10()
        kept = ~z[:, column].isnan()
        assert z[kept, column] == pytest.approx(expected[kept].double(), abs=1e-4), layer
        column = labels.index(f"L{layer} Queries Q")
        expected = queries[layer - 1].grad[0].norm(dim=-1).log10()
        kept = ~z[:, column].isnan()
        assert kept.sum() > 0 and z[kept, column] == pytest.approx(expected[kept].double(), abs=1e-4), layer


def test_the_embeddings_layernorms_gain_and_the_largest_part_are_measured_on_this_step(shown, by_hand):
    """Under the parts chart: the gradient's size below the embeddings' LayerNorm over its size above (transformers'
    gradients at its input and output), its input's σ and γ, and the part whose gradient is largest."""
    answer, example = shown
    batch, recipe = example_batch(example.example), example.config
    theirs = transformers_model(example.loaded.model)
    kept = {}
    layer_norm = theirs.bert.embeddings.LayerNorm
    layer_norm.register_forward_hook(lambda module, inputs, output: kept.update(
        into=inputs[0], out=output) or inputs[0].retain_grad() or output.retain_grad())
    loss, _ = transformers_loss(theirs, batch, recipe.nsp_weight)
    loss.backward()
    note = answer["ts_params_note"]
    ratio = float(kept["into"].grad.norm() / kept["out"].grad.norm())
    assert after(note, "LayerNorm the gradient grows" if ratio >= 1 else "LayerNorm the gradient shrinks") == \
        pytest.approx(ratio, rel=6e-3)
    sigma = float((kept["into"].detach().var(-1, unbiased=False) + layer_norm.eps).sqrt().mean())
    assert after(note, "standard deviation σ, here") == pytest.approx(sigma, rel=6e-3)
    assert after(note, "multiplies it by γ, here") == pytest.approx(float(layer_norm.weight.abs().mean()), rel=6e-3)
    sizes = {}
    for name, gradient in by_hand.raw.items():
        part = name.rsplit(".", 1)[0]
        sizes[part] = sizes.get(part, 0.0) + float(gradient.pow(2).sum())
    largest = max(sizes, key=sizes.get)
    total = sum(sizes.values()) ** 0.5
    assert numbers(note.split("(L2 norms)")[0])[-2:] == pytest.approx([sizes[largest] ** 0.5, total], rel=6e-3)
    named = largest.removeprefix("bert.embeddings.").removeprefix("cls.predictions.").replace("_", " ")
    assert named in note.split("(L2 norms)")[0]  # the part named is the one with the largest gradient
    factor = min(1.0, recipe.grad_clip / (total + 1e-6))  # what clip_grad_norm_ multiplied every gradient by
    sets_it = factor < 1 and sizes[largest] ** 0.5 > total / 2
    assert sets_it  # the paper's recipe on this example: one part holds most of a clipped gradient
    assert after(note, "so it is what sets the clipping factor,") == pytest.approx(factor, rel=6e-3)

def test_the_unrelated_sentences_guess_before_and_after_is_transformers_before_and_after_the_steps(shown, by_hand):
    """"Everything moves": the unrelated sentence's top guess before, that word's probability after, and the top
    guess after, read against transformers' model before and after torch's AdamW's steps."""
    answer, example = shown
    tokenizer = example.loaded.tokenizer
    said = answer["ts_summary"][answer["ts_summary"].index("**Everything moves.**"):]
    sentence = re.search(r"Fill-mask's first: (.+?)\. Its top guess", said)[1].strip("`")
    batch = tokenizer(sentence, return_tensors="pt")
    position = int((batch["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0])
    before_model = transformers_model(example.loaded.model)
    with torch.no_grad():
        before = before_model(**batch).prediction_logits[0, position].softmax(-1)
        later = by_hand.model(**batch).prediction_logits[0, position].softmax(-1)
    words = re.findall(r"`([^`]+)`", said.split("Fill-mask's first:")[1])[1:]  # the guess before, the guess after
    first = int(before.argmax())
    assert tokenizer.convert_tokens_to_ids(words[0]) == first
    assert after(said, "was `" + words[0] + "` at") == pytest.approx(float(before[first]), abs=6e-4)
    assert after(said, "that word has") == pytest.approx(float(later[first]), abs=6e-4)
    assert tokenizer.convert_tokens_to_ids(words[1]) == int(later.argmax())
    assert after(said, "and the top guess is `" + words[1] + "` at") == pytest.approx(float(later.max()),
                                                                                         abs=6e-4)


def test_what_adams_first_step_does_is_said_with_the_worked_weights_own_numbers(shown, by_hand):
    """The paragraph under the worked weights: Adam's (the recipe made AdamW), the first two weights with a gradient
    over ε their gradients' ratio and their moves as shares of the rate, and a weight under ε its move, each
    computed here from torch's AdamW's first step on transformers' loss."""
    answer, example = shown
    recipe, text = example.config, answer["ts_adam"]
    said = text[text.index("**What Adam's first step does:**"):text.index("**Measured over all")]
    assert "LAMB" not in said
    one = adamw_by_hand(example.loaded.model, example_batch(example.example), recipe, 1)
    worked = [weight_of(row["weight"]) for row in table_after(text, "| weight |")]
    g = {w: float(one.read[w[0]][w[1]]) for w in worked}
    move = {w: float(one.weights[1][w[0]][w[1]] - one.weights[0][w[0]][w[1]]) / recipe.lr for w in worked}
    alike = [w for w in worked if abs(g[w]) > recipe.adam_eps]
    small = [w for w in worked if abs(g[w]) <= recipe.adam_eps]
    assert len(alike) >= 2 and small  # the paper's ε: this example shows both cases
    apart = numbers(said[said.index("have gradients"):said.index("times apart")])[0]
    assert apart == pytest.approx(abs(g[alike[0]] / g[alike[1]]), rel=0.01, abs=0.5)
    first, second = numbers(said[said.index("move alike ("):])[:2]
    assert (first, second) == (pytest.approx(move[alike[0]], abs=1e-3), pytest.approx(move[alike[1]], abs=1e-3))
    assert after(said, "it moved by") == pytest.approx(abs(move[small[0]]), abs=6e-4)


def test_the_betas_shown_are_the_recipes_optimizers_own_in_their_order(shown):
    """β1 then β2, as the optimizer the recipe makes holds them: a swapped pair, (β2, β1), is a different text."""
    from bert_demo.training.recipe import make_optimizer

    answer, example = shown
    betas = tuple(make_optimizer(example.loaded.model, example.config).param_groups[0]["betas"])
    assert betas[0] != betas[1]  # the paper's recipe: 0.9 and 0.999, so the order is seen
    assert (after(answer["ts_adam"], "β1 ="), after(answer["ts_adam"], "β2 =")) == betas


def test_two_steps_show_step_after_step_and_one_does_not(taken):
    """The trail is there from the second step on: one step has no history to show."""
    from dataclasses import replace

    from bert_demo.app.tabs import learning_views

    _, step = taken
    two = learning_views.adam_markdown(replace(step, trail=[moves[:2] for moves in step.trail]), paper=True)
    assert [row["step"] for row in table_after(two, "**Step after step**")] == ["1", "2"]
    one = learning_views.adam_markdown(replace(step, trail=[moves[:1] for moves in step.trail]), paper=True)
    assert "**Step after step**" not in one


def test_a_step_under_a_lamb_recipe_is_named_lamb_wherever_the_view_describes_it(make_checkpoint, tmp_path):
    """A model trained with `--optimizer lamb`: its recipe (as its folder keeps it) makes LAMB, the step is taken with
    it, and every paragraph that describes the step names LAMB, never AdamW nor Adam's own first step, and step after
    step gives LAMB's rule: Adam's, rescaled by each matrix's trust ratio."""
    from bert_demo.app.tabs import learning_views
    from bert_demo.checkpoint import load_pretrained
    from bert_demo.config import read_metadata
    from bert_demo.inspection import pretraining_example, training_step
    from bert_demo.training.settings import TrainConfig
    from tests.conftest import METADATA

    folder = make_checkpoint(tmp_path / "lamb", train_config={**METADATA["train_config"], "optimizer": "lamb"})
    model, tokenizer = load_pretrained(folder)
    recipe = TrainConfig.from_stored(read_metadata(folder)["train_config"])
    example = pretraining_example.draw(pretraining_example.typed_documents(PARAGRAPHS), tokenizer, recipe, 0)
    step = training_step.take(model, example, recipe, steps=2)
    summary = learning_views.summary_markdown(step, tokenizer, MODEL, "", example.fates)
    update = learning_views.adam_markdown(step, paper=False)
    assert summary.startswith("**2 steps** of LAMB on this example") and "A fresh LAMB's first step" in summary
    assert update.startswith("**LAMB**, as the recipe makes it") and "**LAMB's first step**" in update
    assert "rescaled by the matrix's trust ratio (LAMB's)" in update[update.index("**Step after step**"):]
    assert "AdamW" not in summary + update and "What Adam's first step does" not in update
