"""The training recipe's parts, checked by their properties: initial statistics and the schedule's shape."""
from __future__ import annotations

import pytest
import torch

from bert_demo.config import OPTIMIZER_NAME, PRESETS
from bert_demo.data.pairs import token_counts
from bert_demo.model import BertForPreTraining
from bert_demo.training.recipe import (
    initialise,
    lr_multiplier,
    optimizer_and_schedule,
    optimizer_tensors,
    set_dropout,
    sinusoids,
    unigram_log_probs,
)
from bert_demo.training.settings import TrainConfig


def fresh(seed: int = 0) -> BertForPreTraining:
    torch.manual_seed(seed)
    return BertForPreTraining(PRESETS["mini"].with_vocab(1000))


def test_qk_scale_multiplies_the_std_of_query_and_key_weights_only():
    model = fresh()
    initialise(model, qk_scale=3.0)
    layer = model.bert.encoder.layer[0].attention.self
    assert layer.query.weight.std().item() == pytest.approx(0.06, rel=0.03)
    assert layer.key.weight.std().item() == pytest.approx(0.06, rel=0.03)
    assert layer.value.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert not torch.equal(layer.query.weight, layer.key.weight)


def test_mimetic_init_makes_every_query_key_product_positive_semi_definite():
    model = fresh()
    initialise(model, qk_scale=2.0, mimetic=True)
    for layer in model.bert.encoder.layer:
        attention = layer.attention.self
        assert torch.equal(attention.query.weight, attention.key.weight)
        product = attention.query.weight.T @ attention.key.weight  # (H, H): q·k = x Wqᵀ Wk x'
        assert torch.linalg.eigvalsh(product).min() > -1e-5


def test_sinusoid_positions_make_neighbouring_positions_more_alike_than_distant_ones():
    model = fresh()
    initialise(model, sinusoid_positions=True)
    table = model.bert.embeddings.position_embeddings.weight
    assert table.pow(2).mean().sqrt().item() == pytest.approx(0.02, rel=0.01)  # BERT's embedding scale
    similarity = torch.nn.functional.cosine_similarity(table[10:11], table[:40], dim=-1)
    assert similarity[11] > similarity[14] > similarity[30]
    assert torch.allclose(sinusoids(4, 6)[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))


def test_default_initialise_changes_nothing_but_the_random_query_key_draws():
    model = fresh()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    initialise(model)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.endswith(("query.weight", "key.weight")) for k in changed)


def test_linear_schedule_warms_up_then_decays_to_zero():
    assert [round(lr_multiplier(s, 4, 10), 3) for s in range(11)] == [
        0.2, 0.4, 0.6, 0.8, 1.0, 0.833, 0.667, 0.5, 0.333, 0.167, 0.0]


def test_triangle_schedule_starts_at_a_quarter_peaks_at_warmup_and_ends_at_zero():
    values = [lr_multiplier(s, 30, 100, "triangle") for s in range(101)]
    assert values[0] == 0.25 and values[30] == 1.0 and values[100] == 0.0
    assert values.index(max(values)) == 30
    assert all(a < b for a, b in zip(values[:30], values[1:31]))
    assert all(a > b for a, b in zip(values[30:100], values[31:101]))


def rates(model, config, done, folder) -> list[float]:
    """The learning rates of a run's next steps, resumed at step `done` from `folder`."""
    optimizer, schedule = optimizer_and_schedule(model, config, lambda: config.steps, done, folder)
    seen = []
    for _ in range(4):
        seen.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    return seen


def test_a_run_resumed_without_its_adam_moments_warms_up_again_and_one_with_them_does_not(tmp_path):
    from safetensors.torch import save_file

    model, config = fresh(), TrainConfig(steps=1000, warmup_steps=3, lr=1e-3)
    on_schedule = [1e-3 * lr_multiplier(step, 3, 1000) for step in range(500, 504)]
    assert rates(model, config, 500, tmp_path) == pytest.approx([r * k / 4 for r, k in zip(on_schedule, (1, 2, 3, 4))])
    optimizer, _ = optimizer_and_schedule(model, config, lambda: config.steps)
    save_file(optimizer_tensors(optimizer), str(tmp_path / OPTIMIZER_NAME))
    assert rates(model, config, 500, tmp_path) == pytest.approx(on_schedule)


def test_an_unknown_schedule_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="linear, triangle"):
        lr_multiplier(0, 1, 10, "cosine")


def test_unigram_bias_starts_the_model_at_the_word_frequencies():
    documents = [[[5, 5, 6], [5]], [[7]]]  # token 5 three times, 6 and 7 once
    bias = unigram_log_probs(token_counts(documents, vocab_size=8))
    assert torch.allclose(bias.exp().sum(), torch.tensor(1.0))
    assert bias[5] > bias[6] == bias[7] > bias[0]  # add-one smoothing: unseen tokens are rare, not impossible
    model = fresh()
    initialise(model, output_bias=unigram_log_probs(token_counts(documents, 1000)))
    assert model.cls.predictions.bias.argmax() == 5


def test_local_heads_start_on_the_previous_and_the_next_token_in_every_layer():
    model = fresh().eval()
    initialise(model, position_scale=4.0, local_heads=2)
    ids = torch.randint(5, 1000, (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attentions = model(ids, output_attentions=True).attentions  # L x (B, A, T, T)
    inner = torch.arange(1, 63)
    for layer in attentions:
        assert layer[:, 0][:, inner, inner - 1].mean() > 0.7  # head 1: the previous token
        assert layer[:, 1][:, inner, inner + 1].mean() > 0.7  # head 2: the next token
        assert layer[:, 2][:, inner, inner - 1].mean() < 0.1  # the other heads keep BERT's init
    head = model.config.hidden_size // model.config.num_attention_heads
    assert model.bert.embeddings.word_embeddings.weight[:, :head].abs().sum() == 0  # words stay out of the code


def cls_attention(global_cls: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer, the most attention [CLS] gives one token, and the share each other token gives its left
    neighbour, in a mini whose heads all start local, on a pair of 32-token segments."""
    model = fresh().eval()
    initialise(model, position_scale=4.0, local_heads=4, global_cls=global_cls)  # no head global by chance
    ids = torch.randint(5, 1000, (4, 64), generator=torch.Generator().manual_seed(0))
    segments = (torch.arange(64) >= 32).long().expand(4, 64)  # a pair: [CLS] must not read the segments as places
    with torch.no_grad():
        attentions = model(ids, segments, output_attentions=True).attentions  # L x (B, A, T, T)
    inner = torch.arange(1, 63)
    return (torch.stack([layer[:, :, 0].max() for layer in attentions]),
            torch.stack([layer[:, 0][:, inner, inner - 1].mean() for layer in attentions]))


def test_global_cls_starts_cls_reading_the_whole_pair_while_the_other_tokens_stay_local():
    cls_peak, neighbour = cls_attention(global_cls=True)
    assert (cls_peak < 0.25).all()  # no token gets a quarter of [CLS]'s attention (uniform: 1/64)
    assert (neighbour > 0.7).all()  # the other tokens still read their neighbour
    cls_peak, _ = cls_attention(global_cls=False)
    assert (cls_peak > 0.9).all()  # without it [CLS] reads one token: where the next-sentence head looks


def test_more_local_heads_than_a_layer_has_are_refused():
    with pytest.raises(ValueError, match="between 1 and 4"):
        initialise(fresh(), local_heads=5)


def test_set_dropout_changes_every_dropout_of_a_built_model_and_its_config():
    model = BertForPreTraining(PRESETS["tiny"].with_vocab(100))
    set_dropout(model, 0.3)
    rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.3} and model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.3
    assert all(layer.attention.self.dropout_prob == 0.3 for layer in model.bert.encoder.layer)
