"""One training step on a pre-training example is the model's own: autograd's gradients equal transformers'
BertForPreTraining's on the same weights, batch and loss; the update is torch's AdamW's under the recipe; the loss
after is a fresh forward pass on the updated weights; and the model handed in never changes, whoever else asks it."""
from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from bert_demo.inference import fill_mask
from bert_demo.inspection import pretraining_example
from bert_demo.inspection.forward_steps import SPECS, Site, example_pass
from bert_demo.inspection.training_step import (
    DECODER,
    WORD_TABLE,
    coarse_part,
    flow,
    gradient_norms,
    gradient_pass,
    head_flow,
    take,
)
from bert_demo.model import BertForPreTraining
from bert_demo.training.settings import TrainConfig
from tests.references import transformers_model

TOL = 1e-5
RECIPE = TrainConfig(seq_len=64, vocab_size=256, nsp_weight=0.5, lr=1e-3, weight_decay=0.01, grad_clip=1.0)
PAPERS_EPS = replace(RECIPE, adam_eps=1e-6)  # BERT's ε: clipping brings some gradients under it


@pytest.fixture(scope="module")
def setup(lesson):
    """The inspection tests' tiny model with random weights (LayerNorms and biases too), its tokenizer, and an
    example drawn under the recipe."""
    assert lesson.recipe == RECIPE
    return lesson.model, lesson.tokenizer, pretraining_example.draw(lesson.documents, lesson.tokenizer, RECIPE, 3)


def test_the_gradients_are_transformers_on_the_same_weights_batch_and_loss(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    theirs = transformers_model(ours)
    batch = example.batch
    out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=batch["attention_mask"])
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), batch["mlm_labels"].flatten())
    loss = mlm + RECIPE.nsp_weight * F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"])
    loss.backward()
    assert step.loss_before == pytest.approx(loss.item(), abs=TOL)
    expected = dict(theirs.named_parameters())
    assert set(step.gradients) == set(dict(ours.named_parameters()))
    for name, gradient in step.gradients.items():
        torch.testing.assert_close(gradient, expected[name].grad, atol=TOL, rtol=0, msg=name)


def test_the_tied_tables_two_parts_sum_to_its_gradient_and_the_decoders_is_its_own_product(setup):
    """The decoder's part is (softmax - one-hot)/N at the picked positions times the transform's output: computed
    here by hand from the step's own captured values, it equals what autograd measured on the decoder's alias."""
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    lookup, decoder = step.tied_parts
    torch.testing.assert_close(lookup + decoder, step.gradients[WORD_TABLE], atol=TOL, rtol=0)
    assert float(lookup.norm()) > 0 and float(decoder.norm()) > 0
    with torch.no_grad():
        own = copy.deepcopy(ours)
        batch = example.batch
        hidden = own.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], False)[0][-1]
        picked = (batch["mlm_labels"] != -100).flatten()
        transformed = own.cls.predictions.transform(hidden.flatten(0, 1)[picked])  # (N, H)
    by_hand = step.mlm_start.T @ transformed / len(transformed)  # (V, H)
    torch.testing.assert_close(decoder, by_hand, atol=TOL, rtol=0)
    assert DECODER not in step.gradients  # the tied weight is one parameter, as named_parameters() lists it


def test_the_gradient_starts_as_softmax_minus_the_label_at_each_picked_position_and_at_the_nsp_head(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    start = step.mlm_start
    assert torch.allclose(start.sum(-1), torch.zeros(len(start)), atol=1e-5)  # a softmax minus a one-hot
    labels = example.batch["mlm_labels"][example.batch["mlm_labels"] != -100]
    assert bool((start.gather(1, labels[:, None]) < 0).all())  # only the label's entry is pushed up
    torch.testing.assert_close(step.flow[Site("cls.predictions")], start / len(start), atol=TOL, rtol=0)
    torch.testing.assert_close(step.flow[Site("cls.seq_relationship")][0], RECIPE.nsp_weight * step.nsp_start,
                               atol=TOL, rtol=0)
    assert step.attention_flow.shape == (3, 4, *example.batch["input_ids"].shape[1:] * 2)  # (layers, heads, T, T)


def test_the_update_is_torchs_adamw_under_the_recipe_after_clipping(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    reference = copy.deepcopy(ours)
    params = dict(reference.named_parameters())
    for name, p in params.items():
        p.grad = step.gradients[name].clone()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), RECIPE.grad_clip)
    matrices = [p for p in params.values() if p.dim() >= 2]
    others = [p for p in params.values() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices, "weight_decay": RECIPE.weight_decay},
                                   {"params": others, "weight_decay": 0.0}], lr=RECIPE.lr,
                                  betas=(0.9, RECIPE.beta2), eps=RECIPE.adam_eps)
    before = {name: p.detach().clone() for name, p in params.items()}
    optimizer.step()
    for name, p in params.items():
        torch.testing.assert_close(step.updates[name], p.detach() - before[name], atol=1e-7, rtol=0, msg=name)
    assert step.clipped < 1 and step.grad_norm > RECIPE.grad_clip  # this example's gradient was clipped


def test_the_first_adam_step_moves_a_weight_by_about_the_learning_rate_whatever_its_gradient(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    large, small = step.worked
    assert large.name == small.name and abs(large.gradient) > 100 * abs(small.gradient)
    for worked in (large, small):
        assert worked.m_hat == pytest.approx(worked.gradient, rel=1e-4)
        assert worked.v_hat == pytest.approx(worked.gradient ** 2, rel=1e-4)
        decay = RECIPE.lr * worked.weight_decay * worked.weight_before
        assert worked.update + decay == pytest.approx(-RECIPE.lr * (1 if worked.gradient > 0 else -1), rel=1e-3)
        assert worked.weight_after == pytest.approx(worked.weight_before + worked.update, abs=1e-7)


def test_the_loss_after_is_a_fresh_forward_pass_on_the_updated_weights(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    updated = copy.deepcopy(ours)
    with torch.no_grad():
        for name, p in updated.named_parameters():
            p.add_(step.updates[name])
        out = updated(**{k: v for k, v in example.batch.items()})
    nsp = F.cross_entropy(out.nsp_logits, example.batch["nsp_labels"])
    assert step.loss_after == pytest.approx(float(out.mlm_loss + RECIPE.nsp_weight * nsp), abs=TOL)
    assert step.loss_after < step.loss_before


def test_more_steps_on_one_example_memorise_it_and_leave_the_model_bit_for_bit_unchanged(setup):
    ours, _, example = setup
    state, config = {name: tensor.clone() for name, tensor in ours.state_dict().items()}, ours.config
    rates = [module.p for module in ours.modules() if isinstance(module, torch.nn.Dropout)]
    step = take(ours, example, RECIPE, steps=8, dropout=0.2)
    assert len(step.losses) == 9 and step.losses == sorted(step.losses, reverse=True)
    assert step.losses[-1] < 0.7 * step.losses[0]
    assert [len(moves) for moves in step.trail] == [8] * len(step.worked)
    assert all(torch.equal(tensor, state[name]) for name, tensor in ours.state_dict().items())
    assert not ours.training and ours.config is config
    assert [module.p for module in ours.modules() if isinstance(module, torch.nn.Dropout)] == rates


def test_a_step_is_the_same_while_other_visitors_ask_the_same_model(setup):
    ours, tokenizer, example = setup
    alone = take(ours, example, RECIPE)
    stop = threading.Event()

    def ask() -> None:
        while not stop.is_set():
            fill_mask(ours, tokenizer, "people came from far away to see the [MASK].")

    others = [threading.Thread(target=ask) for _ in range(2)]
    for thread in others:
        thread.start()
    try:
        crowded = [take(ours, example, RECIPE) for _ in range(3)]
    finally:
        stop.set()
        for thread in others:
            thread.join()
    for step in crowded:
        assert step.losses == alone.losses
        assert all(torch.equal(step.gradients[name], g) for name, g in alone.gradients.items())
        assert all(torch.equal(step.flow[name], g) for name, g in alone.flow.items())


def test_the_gradient_table_groups_every_parameter_by_layer_and_part(setup):
    ours, _, example = setup
    step = take(ours, example, RECIPE)
    rows = gradient_norms(step.gradients)
    groups = [group for group, _, _ in rows]
    assert groups[0] == "embeddings" and {"layer 1", "layer 2", "masked-LM head", "next-sentence head"} <= set(groups)
    total = sum(norm ** 2 for _, _, norm in rows) ** 0.5
    assert total == pytest.approx(step.grad_norm, rel=1e-4)
    assert ("layer 2", "attention Q") in {(group, part) for group, part, _ in rows}


@pytest.mark.parametrize("steps, dropout, message", [(0, 0.0, "steps"), (21, 0.0, "steps"), (1.5, 0.0, "steps"),
                                                     (1, 0.9, "dropout"), (1, "0.1", "dropout")])
def test_steps_or_dropout_out_of_range_are_refused(setup, steps, dropout, message):
    ours, _, example = setup
    with pytest.raises(ValueError, match=message):
        take(ours, example, RECIPE, steps=steps, dropout=dropout)


def test_the_gradient_at_every_layers_output_and_attention_is_transformers(setup):
    ours, tokenizer, example = setup
    step = take(ours, example, RECIPE)
    theirs = transformers_model(ours)
    batch = example.batch
    out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=batch["attention_mask"], output_hidden_states=True, output_attentions=True)
    for tensor in (*out.hidden_states, *out.attentions):
        tensor.retain_grad()
    mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), batch["mlm_labels"].flatten())
    (mlm + RECIPE.nsp_weight * F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"])).backward()
    torch.testing.assert_close(step.flow[Site("bert.embeddings.LayerNorm")], out.hidden_states[0].grad, atol=TOL,
                               rtol=0)
    for layer in range(3):
        torch.testing.assert_close(step.flow[Site(f"bert.encoder.layer.{layer}.output.LayerNorm")],
                                   out.hidden_states[layer + 1].grad, atol=TOL, rtol=0)
        torch.testing.assert_close(step.attention_flow[layer], out.attentions[layer].grad[0], atol=TOL, rtol=0)


def test_each_step_of_the_examples_forward_pass_reads_its_gradient_where_it_reads_its_values(setup):
    ours, tokenizer, example = setup
    step = take(ours, example, RECIPE)
    values = example_pass(ours, tokenizer, example.batch, layer=2, head=3)
    grads = gradient_pass(step, values)
    picked = [i for i, label in enumerate(example.labels) if label != -100]
    assert values.guessed == picked
    by_title = {(spec.part, spec.title): spec for spec in SPECS}
    softmax = by_title["Attention", "Softmax"].values(grads)
    torch.testing.assert_close(softmax, step.attention_flow[1, 2], atol=0, rtol=0)
    output = next(spec for spec in SPECS if spec.title == "The layer's output (LayerNorm)")
    torch.testing.assert_close(output.values(grads), step.flow[Site("bert.encoder.layer.1.output.LayerNorm")][0])
    torch.testing.assert_close(output.values(replace(grads, layer=2)),
                               step.flow[Site("bert.encoder.layer.2.output.LayerNorm")][0])
    decoder = by_title["Masked-LM head", "Decoder, tied to the word embeddings"]
    assert decoder.values(grads).shape == decoder.values(values).shape
    labels = [example.labels[i] for i in picked]
    start = step.mlm_start / len(picked)
    torch.testing.assert_close(decoder.values(grads)[:, 0], start[range(len(picked)), labels], atol=TOL, rtol=0)
    assert bool((decoder.values(grads)[:, 0] < 0).all())  # the label's: the one score pushed up, shown first
    assert decoder.columns(grads)[0] == "the label" and decoder.columns(values)[0] == "guess 1"
    for row, (label, cells) in enumerate(zip(labels, decoder.cells(grads))):
        ids = tokenizer.convert_tokens_to_ids(cells)
        assert ids[0] == label and label not in ids[1:]  # then the top guesses beside it, each once
        assert ids[1:] == [i for i in values.top_ids[row].tolist() if i != label][:len(ids) - 1]
        torch.testing.assert_close(decoder.values(grads)[row], start[row, ids], atol=TOL, rtol=0)


def test_the_flow_has_every_step_of_every_layer_and_the_heads_only_where_they_run(setup):
    ours, tokenizer, example = setup
    step = take(ours, example, RECIPE)
    values = example_pass(ours, tokenizer, example.batch)
    labels, sizes = flow(step, values)
    encoder = [spec for spec in SPECS if spec.gradient and spec.part in ("Attention", "Feed-forward")]
    others = [spec for spec in SPECS if spec.gradient and spec.part not in ("Attention", "Feed-forward")]
    assert sizes.shape == (3 * len(encoder) + len(others), len(values.tokens)) == (len(labels), len(values.tokens))
    assert "L3 Scores" in labels and "Word rows" in labels
    picked = values.guessed
    decoder = sizes[labels.index("Decoder, tied to the word embeddings")]
    assert not decoder[picked].isnan().any() and decoder.isnan().sum() == len(values.tokens) - len(picked)
    cls = sizes[labels.index("Classifier")]
    assert not cls[0].isnan() and cls[1:].isnan().all()
    last = sizes[labels.index("L3 The layer's output (LayerNorm)")]
    torch.testing.assert_close(last, step.flow[Site("bert.encoder.layer.2.output.LayerNorm")][0].norm(dim=-1))
    second = sizes[labels.index("L2 The layer's output (LayerNorm)")]
    torch.testing.assert_close(second, step.flow[Site("bert.encoder.layer.1.output.LayerNorm")][0].norm(dim=-1))
    reached = (sizes[labels.index("L3 GELU")] > 0).nonzero().squeeze(1).tolist()
    assert reached == sorted({0, *picked})  # the last layer's feed-forward: only where the heads read
    assert bool((sizes[labels.index("L3 Values V")] > 0).all())  # attention passes it to every token
    assert labels.index("L1 The layer's output (LayerNorm)") < labels.index("L2 Queries Q")  # layer after layer
    heads = head_flow(step, values)
    assert heads.shape == (3, 4) and bool((heads > 0).all())  # (layers, heads)
    weighted = sizes[labels.index("L1 Weighted sum of V")]
    torch.testing.assert_close(heads[0].pow(2).sum().sqrt(), weighted.pow(2).sum().sqrt(), atol=1e-6, rtol=1e-5)


def adamw_by_hand(ours: BertForPreTraining, example, recipe: TrainConfig, steps: int) -> list[dict[str, torch.Tensor]]:
    """torch's AdamW stepped `steps` times on the example's loss (masked-LM + nsp_weight x NSP, clipped as the recipe
    clips), decaying the matrices only, on a copy of the model in eval mode: its weights before and after each step."""
    reference = copy.deepcopy(ours).eval()
    params = dict(reference.named_parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params.values() if p.dim() >= 2],
                                    "weight_decay": recipe.weight_decay},
                                   {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=recipe.lr, betas=(0.9, recipe.beta2), eps=recipe.adam_eps)
    batch = {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}
    weights = [{name: p.detach().clone() for name, p in params.items()}]
    for _ in range(steps):
        optimizer.zero_grad()
        out = reference(**batch)
        (out.mlm_loss + recipe.nsp_weight * F.cross_entropy(out.nsp_logits, batch["nsp_labels"])).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), recipe.grad_clip)
        optimizer.step()
        weights.append({name: p.detach().clone() for name, p in params.items()})
    return weights


@pytest.mark.parametrize("recipe", [RECIPE, PAPERS_EPS], ids=["its own eps", "the papers eps"])
def test_each_worked_weights_move_at_every_step_is_its_own_as_torchs_adamw_steps_it(setup, recipe):
    """Step after step, each worked weight's move is that weight's value after the step minus its value before,
    as torch's AdamW moves it on the same loss: not another weight's, which sits in the same tensor."""
    ours, _, example = setup
    step = take(ours, example, recipe, steps=4)
    weights = adamw_by_hand(ours, example, recipe, 4)
    assert step.worked[0].name == step.worked[1].name  # two weights of one tensor: their moves must not mix
    for worked, moves in zip(step.worked, step.trail):
        expected = [float(after[worked.name][worked.index] - before[worked.name][worked.index])
                    for before, after in zip(weights, weights[1:])]
        # a gradient under ε moves its weight by lr·g/ε: the float noise of a tiny g shows, a few percent of it
        assert moves == pytest.approx(expected, rel=0.05, abs=2e-7), worked.index
        assert worked.update == moves[0]


def test_the_first_steps_moves_are_counted_weight_by_weight_against_half_the_rate_and_epsilon(setup):
    """The share of weights that moved by more than half the learning rate, the median move, and the weights whose
    clipped gradient was zero or under ε (and of those, above ε before clipping), counted here from the updates and
    gradients alone: overall, and for the word table and for one layer."""
    ours, _, example = setup
    step = take(ours, example, PAPERS_EPS)
    total = torch.nn.utils.get_total_norm(list(step.gradients.values()))  # as clip_grad_norm_ measures it
    factor = min(1.0, PAPERS_EPS.grad_clip / (float(total) + 1e-6))
    eps, lr = PAPERS_EPS.adam_eps, PAPERS_EPS.lr

    def counted(names: list[str]) -> tuple:
        moved = torch.cat([step.updates[name].abs().flatten() for name in names]) / lr
        raw = torch.cat([step.gradients[name].abs().flatten() for name in names])
        read = raw * factor
        under = (read > 0) & (read <= eps)
        return (len(moved), int((moved > 0.5).sum()), float(moved.sort().values[(len(moved) - 1) // 2]),
                int((read == 0).sum()), int(under.sum()), int((under & (raw > eps)).sum()))

    moves = step.moves
    names = list(step.gradients)
    weights, over, median, none, under, by_clipping = counted(names)
    assert (moves.weights, moves.over_half, moves.no_gradient, moves.under_eps, moves.under_eps_by_clipping) == \
        (weights, over, none, under, by_clipping)
    assert moves.median == pytest.approx(median, rel=1e-5)
    assert under > 0 and by_clipping > 0 and none > 0  # this example shows each case
    assert moves.clipped == pytest.approx(factor, rel=1e-6) and factor < 1
    parts = {part.part: part for part in moves.parts}
    for part, in_part in (("embeddings · word embeddings", [WORD_TABLE]),
                          ("layer 2", [name for name in names if name.startswith("bert.encoder.layer.1.")])):
        row = parts[part]
        weights, over, _, none, under, by_clipping = counted(in_part)
        assert (row.weights, row.over_half, row.no_gradient, row.under_eps, row.under_eps_by_clipping) == \
            (weights, over, none, under, by_clipping), part
    assert sum(part.weights for part in moves.parts) == sum(g.numel() for g in step.gradients.values())
    assert [coarse_part(name) for name in names].count("layer 1") == len(
        [name for name in names if name.startswith("bert.encoder.layer.0.")])


def test_a_weight_whose_clipped_gradient_fell_under_epsilon_is_worked_through_beside_those_that_move_alike(setup):
    """Adam's first step is lr·g/(|g|+ε): the worked weights show both cases where both occur, a pair of gradients
    far apart that move by about the rate, and one under ε that moves by less than half of it."""
    ours, _, example = setup
    step = take(ours, example, PAPERS_EPS)
    *alike, small = step.worked
    lr, eps = PAPERS_EPS.lr, PAPERS_EPS.adam_eps
    assert len(alike) == 2 and all(abs(w.gradient) > 4 * eps for w in alike)
    assert all(abs(w.update) == pytest.approx(lr, rel=0.05) for w in alike)
    assert 0 < abs(small.gradient) < eps and abs(small.update) < lr / 2
    expected = -lr * small.weight_decay * small.weight_before - lr * small.gradient / (abs(small.gradient) + eps)
    assert small.update == pytest.approx(expected, abs=5e-8)  # float32 weights: their difference is good to ~1e-8
    assert step.moves.under_eps > 0


def test_the_papers_dropout_is_in_the_first_step_and_the_later_ones_and_never_in_the_losses_measured(setup):
    """Dropout 0.1 drops a different tenth of the units at each forward pass of the steps (their gradients differ
    from those without it), while the losses before and after are measured without it, as the page says."""
    ours, _, example = setup
    off, on = take(ours, example, RECIPE, steps=2), take(ours, example, RECIPE, steps=2, dropout=0.1)
    assert on.dropout == 0.1 and off.dropout == 0.0
    assert any(not torch.equal(on.gradients[name], g) for name, g in off.gradients.items())  # the first step's
    assert on.trail[0][1] != off.trail[0][1]  # and the second's
    assert on.losses[0] == off.losses[0]  # measured without dropout: the same weights, the same loss


def test_the_gradient_views_backward_pass_alone_is_the_steps_and_writes_nothing_to_the_model(setup):
    """The forward pass's gradient view takes the backward pass alone: the same gradient at every step as the
    training step's, and no `.grad` left on the model every visitor shares."""
    from bert_demo.inspection.training_step import gradients_at_steps

    ours, _, example = setup
    alone, step = gradients_at_steps(ours, example, RECIPE), take(ours, example, RECIPE)
    assert set(alone.flow) == set(step.flow)
    assert all(torch.equal(alone.flow[tap], step.flow[tap]) for tap in step.flow)
    assert torch.equal(alone.attention_flow, step.attention_flow)
    assert all(p.grad is None for p in ours.parameters()) and not ours.training


def looped(model: BertForPreTraining, tokenizer, example, recipe: TrainConfig, steps: int, out,
           extras: Callable[[dict], dict] = lambda part: {}) -> BertForPreTraining:
    """A copy of `model` after `steps` steps of the training loop itself (`loop.train`, pre-training's loss), handed
    the example as every batch at the recipe's peak rate (a constant schedule: `take` steps at the peak too), its
    model told `extras` beside each batch."""
    from bert_demo.training import pretraining
    from bert_demo.training.loop import Run, Training
    from bert_demo.training.recipe import make_optimizer, set_dropout

    config = replace(recipe, steps=steps, batch_size=1, grad_accum=1, warmup_steps=0, precision="fp32",
                     log_every=steps, eval_every=10 * steps, save_every=10 * steps, out=str(out))
    batch = {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}

    def prepare(run: Run):
        yield {"kind": "status", "message": "the example as every batch"}
        run.model, run.tokenizer = copy.deepcopy(model), tokenizer
        set_dropout(run.model, 0.0)
        optimizer = make_optimizer(run.model, config)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        return Training(model=run.model, batches=iter([batch] * steps), optimizer=optimizer, schedule=schedule,
                        loss=functools.partial(pretraining.micro_batch_loss, config), evaluate=lambda: iter(()),
                        forward_extras=extras)

    run = Run(config, prepare)
    records = list(run.run())
    assert records[-1]["reason"] == "finished", records[-1]
    return run.model


def test_a_step_here_is_the_training_loops_step_on_the_same_batch(setup, tmp_path):
    """`take` writes the step out to show it (forward, loss, backward, clipping, the optimizer): the loop itself,
    given the example as its batch, must leave the same weights after one step and the same loss after three."""
    ours, tokenizer, example = setup
    one = take(ours, example, PAPERS_EPS)
    by_loop = dict(looped(ours, tokenizer, example, PAPERS_EPS, 1, tmp_path / "one").named_parameters())
    for name, weight in ours.named_parameters():
        # within 1% of the rate: a weight whose gradient is near ε moves by lr·g/(|g| + ε), so the float noise of two
        # attention kernels (the tab's step reads the probabilities, the loop's fused one never forms them) moves it
        # by up to a few thousandths of the rate
        apart = (by_loop[name] - (weight + one.updates[name])).abs()
        assert float(apart.max()) < 0.01 * PAPERS_EPS.lr, name
    three = take(ours, example, PAPERS_EPS, steps=3)
    model = looped(ours, tokenizer, example, PAPERS_EPS, 3, tmp_path / "three").eval()
    batch = {name: tensor for name, tensor in example.batch.items() if name != "mlm_fates"}
    with torch.no_grad():
        out = model(**batch)
    assert three.losses[-1] == pytest.approx(float(out.mlm_loss + PAPERS_EPS.nsp_weight * out.nsp_loss), abs=1e-5)


@pytest.mark.parametrize("recipe", [PAPERS_EPS, replace(PAPERS_EPS, optimizer="lamb")], ids=["AdamW", "LAMB"])
def test_a_step_here_moves_every_weight_as_the_training_loops_step_does_bit_for_bit(setup, tmp_path, recipe):
    """The tab's step is the loop's (`training.step`): on the same weights and batch, one step of the loop itself
    moves every weight exactly as `take` moves it, with the recipe's loss, clipping and optimizer. The loop's model is
    asked for the attention probabilities, as the tab's step asks for them: the fused attention kernel it uses
    otherwise rounds differently (the test above bounds that)."""
    ours, tokenizer, example = setup
    step = take(ours, example, recipe)
    by_loop = dict(looped(ours, tokenizer, example, recipe, 1, tmp_path,
                          lambda part: {"output_attentions": True}).named_parameters())
    moved_otherwise = [name for name, weight in ours.named_parameters()
                       if not torch.equal(by_loop[name].detach() - weight.detach(), step.updates[name])]
    assert moved_otherwise == []


def test_the_optimizer_named_is_the_one_the_recipe_makes(setup):
    """AdamW for the recipe's default, LAMB for a model trained with `--optimizer lamb`: the step is taken with the
    optimizer the recipe makes, and the page names it."""
    ours, _, example = setup
    assert take(ours, example, RECIPE).optimizer == "AdamW"
    assert take(ours, example, replace(RECIPE, optimizer="lamb")).optimizer == "LAMB"
