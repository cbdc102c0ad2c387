"""The from-scratch model gives Hugging Face's numbers on the same weights, on both attention paths."""
from __future__ import annotations

import pytest
import torch
import transformers

from bert_demo.config import PRESETS, BertConfig
from bert_demo.model import BertForPreTraining, in_eval_mode, private_view

TOL = 1e-5
CONFIG = BertConfig(vocab_size=211, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96)


def hf_model(config: BertConfig, attn: str) -> transformers.BertForPreTraining:
    hf_config = transformers.BertConfig(**config.to_hf_dict(), attn_implementation=attn)
    return transformers.BertForPreTraining(hf_config).eval()


def batch_with_padding_and_two_segments() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, CONFIG.vocab_size, (4, 17), generator=g)
    token_type_ids = torch.zeros_like(ids)
    token_type_ids[:, 9:] = 1
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 12:] = 0
    attention_mask[3, 5:] = 0
    ids[attention_mask == 0] = 0
    return {"input_ids": ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """Give every parameter (LayerNorms and biases too) random values so no term of the maths is trivially 0/1."""
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if name.endswith("LayerNorm.weight") else 0.0))
    return model


def pair(direction: str, attn: str) -> tuple[BertForPreTraining, transformers.BertForPreTraining]:
    """Our model and HF's with identical random weights, copied ours->HF or HF->ours."""
    torch.manual_seed(0)
    ours, theirs = BertForPreTraining(CONFIG).eval(), hf_model(CONFIG, attn)
    if direction == "ours_to_hf":
        randomised(ours)
        theirs.load_state_dict(ours.state_dict(), strict=False)
        theirs.cls.predictions.decoder.bias = theirs.cls.predictions.bias  # the tie HF keeps for old checkpoints
    else:
        randomised(theirs)
        ours.load_state_dict({k: v for k, v in theirs.state_dict().items() if k != "cls.predictions.decoder.bias"})
    return ours, theirs


@pytest.mark.parametrize("direction", ["ours_to_hf", "hf_to_ours"])
@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa_path", "explicit_path"])
def test_logits_hidden_states_and_attentions_match_transformers(direction, output_attentions):
    ours, theirs = pair(direction, "eager" if output_attentions else "sdpa")
    batch = batch_with_padding_and_two_segments()
    with torch.no_grad():
        a = ours(**batch, output_attentions=output_attentions, output_hidden_states=True)
        b = theirs(**batch, output_attentions=output_attentions, output_hidden_states=True)
    real = batch["attention_mask"].bool()
    assert torch.allclose(a.mlm_logits[real], b.prediction_logits[real], atol=TOL, rtol=0)
    assert torch.allclose(a.nsp_logits, b.seq_relationship_logits, atol=TOL, rtol=0)
    assert len(a.hidden_states) == CONFIG.num_hidden_layers + 1
    for h_ours, h_theirs in zip(a.hidden_states, b.hidden_states, strict=True):
        assert torch.allclose(h_ours[real], h_theirs[real], atol=TOL, rtol=0)
    if output_attentions:
        for p_ours, p_theirs in zip(a.attentions, b.attentions, strict=True):
            assert p_ours.shape == (4, CONFIG.num_attention_heads, 17, 17)
            assert torch.allclose(p_ours, p_theirs, atol=TOL, rtol=0)


def test_both_attention_paths_agree_and_padding_keys_get_zero_weight():
    model = randomised(BertForPreTraining(CONFIG)).eval()
    batch = batch_with_padding_and_two_segments()
    with torch.no_grad():
        fast = model(**batch)
        explicit = model(**batch, output_attentions=True)
    assert torch.allclose(fast.mlm_logits, explicit.mlm_logits, atol=TOL, rtol=0)
    for probs in explicit.attentions:
        assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-6)
        assert probs[3, :, :, 5:].abs().max() == 0  # padding keys of example 3


def test_sparse_prediction_loss_equals_full_logits_loss_and_hf_loss():
    ours, theirs = pair("ours_to_hf", "sdpa")
    batch = batch_with_padding_and_two_segments()
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, [1, 4, 7]] = batch["input_ids"][0, [1, 4, 7]]
    labels[2, [3, 15]] = batch["input_ids"][2, [3, 15]]
    nsp = torch.tensor([0, 1, 1, 0])
    with torch.no_grad():
        sparse = ours(**batch, mlm_labels=labels, nsp_labels=nsp)
        full = ours(**batch)
        hf = theirs(**batch, labels=labels, next_sentence_label=nsp)
    full_mlm = torch.nn.functional.cross_entropy(full.mlm_logits.view(-1, CONFIG.vocab_size), labels.view(-1))
    assert sparse.mlm_logits.shape == (5, CONFIG.vocab_size)
    assert torch.allclose(sparse.mlm_loss, full_mlm, atol=1e-6)
    assert torch.allclose(sparse.loss, hf.loss, atol=TOL)
    assert torch.allclose(sparse.loss, sparse.mlm_loss + sparse.nsp_loss)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.3, 1.0])
def test_told_how_many_targets_it_scores_the_same_positions_in_the_same_order_as_a_boolean_index(share):
    """A training step tells the model its count of targets (counted on the CPU), so that the GPU finds them by a
    sort of known size instead of a boolean index, which would make the host wait for it."""
    model = randomised(BertForPreTraining(CONFIG)).eval()
    batch = batch_with_padding_and_two_segments()
    torch.manual_seed(1)
    labels = torch.where(torch.rand(batch["input_ids"].shape) < share, batch["input_ids"], -100)
    with torch.no_grad():
        found = model(**batch, mlm_labels=labels)
        told = model(**batch, mlm_labels=labels, mlm_count=int((labels != -100).sum()))
    assert torch.equal(told.mlm_targets, labels[labels != -100]) and torch.equal(told.mlm_targets, found.mlm_targets)
    assert torch.equal(told.mlm_logits, found.mlm_logits) and torch.equal(told.mlm_loss, found.mlm_loss)


def test_batch_without_targets_gives_zero_mlm_loss_not_nan():
    model = BertForPreTraining(CONFIG)
    batch = batch_with_padding_and_two_segments()
    out = model(**batch, mlm_labels=torch.full_like(batch["input_ids"], -100))
    assert out.mlm_loss.item() == 0.0


def test_gradients_flow_to_every_parameter():
    model = BertForPreTraining(CONFIG).train()
    batch = batch_with_padding_and_two_segments()
    labels = torch.where(torch.rand(batch["input_ids"].shape) < 0.3, batch["input_ids"], -100)
    model(**batch, mlm_labels=labels, nsp_labels=torch.tensor([0, 1, 0, 1])).loss.backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert no_grad == []


def test_init_follows_bert_normal_0_02_and_decoder_is_tied():
    model = BertForPreTraining(PRESETS["mini"].with_vocab(8192))
    weight = model.bert.encoder.layer[0].intermediate.dense.weight
    assert abs(weight.std().item() - 0.02) < 0.001
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.bert.encoder.layer[0].output.LayerNorm.weight.eq(1).all()
    assert model.bert.embeddings.LayerNorm.eps == 1e-12


@pytest.mark.parametrize("name", ["tiny", "mini", "small", "base"])
def test_preset_sizes_and_parameter_counts_match_transformers(name):
    """Built on the meta device (no memory taken), so BERT-base is checked too: 110,106,428 parameters."""
    config = PRESETS[name].with_vocab(30522)
    expected = {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
                "base": (12, 768, 12, 3072)}[name]
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size) == expected
    with torch.device("meta"):
        ours, theirs = BertForPreTraining(config), hf_model(config, "sdpa")
    assert ours.num_parameters() == theirs.num_parameters() == config.num_parameters


def test_too_long_input_is_refused_with_clear_message():
    model = BertForPreTraining(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=32, max_position_embeddings=8))
    with pytest.raises(ValueError, match="more than this model's 8"):
        model(torch.ones(1, 9, dtype=torch.long))


def silence_heads_by_hook(theirs: transformers.BertForPreTraining, head_mask: torch.Tensor) -> None:
    """Zero the switched-off heads' slices of the context vector where it enters `attention.output.dense`: the
    reference for head_mask, since transformers 5.x has no head_mask argument."""
    head_size = CONFIG.hidden_size // CONFIG.num_attention_heads

    def hook(keep):
        def zero_heads(module, args):
            return (args[0] * keep.repeat_interleave(head_size),)
        return zero_heads

    for layer, keep in zip(theirs.bert.encoder.layer, head_mask):
        layer.attention.output.dense.register_forward_pre_hook(hook(keep))


@pytest.mark.parametrize("output_attentions", [False, True], ids=["sdpa_path", "explicit_path"])
def test_switched_off_heads_match_transformers_with_those_heads_zeroed_by_a_hook(output_attentions):
    ours, theirs = pair("ours_to_hf", "eager")
    head_mask = torch.ones(CONFIG.num_hidden_layers, CONFIG.num_attention_heads)
    head_mask[0, 1] = head_mask[1, 0] = head_mask[1, 3] = head_mask[2, 2] = 0
    batch = batch_with_padding_and_two_segments()
    out = ours(**batch, head_mask=head_mask, output_attentions=output_attentions)
    silence_heads_by_hook(theirs, head_mask)
    with torch.no_grad():
        ref = theirs(**batch)
    torch.testing.assert_close(out.mlm_logits, ref.prediction_logits, atol=TOL, rtol=0)
    torch.testing.assert_close(out.nsp_logits, ref.seq_relationship_logits, atol=TOL, rtol=0)
    assert (out.mlm_logits - ours(**batch).mlm_logits).abs().max() > 1e-3  # the heads did matter
    if output_attentions:
        assert out.attentions[0][:, 1].abs().max() == 0 and out.attentions[0][:, 0].sum(-1).allclose(torch.ones(1))


def test_a_head_mask_per_example_equals_each_example_run_alone():
    ours, _ = pair("ours_to_hf", "eager")
    batch = batch_with_padding_and_two_segments()
    masks = torch.ones(4, CONFIG.num_hidden_layers, CONFIG.num_attention_heads)
    masks[0, 0, 0] = masks[1, 2, 3] = masks[3] = 0
    together = ours(**batch, head_mask=masks).mlm_logits
    for i in range(4):
        alone = ours(**{k: v[i:i + 1] for k, v in batch.items()}, head_mask=masks[i]).mlm_logits
        torch.testing.assert_close(together[i:i + 1], alone, atol=TOL, rtol=0)


def test_a_private_view_shares_every_weight_and_keeps_what_its_caller_sets_to_itself():
    model = randomised(BertForPreTraining(CONFIG)).train()
    view = private_view(model).eval()
    view.bert.encoder.layer[0].register_forward_hook(lambda module, inputs, output: None)
    assert all(ours is theirs for ours, theirs in zip(model.parameters(), view.parameters()))
    assert view.cls.predictions.decoder.weight is view.bert.embeddings.word_embeddings.weight
    assert all(module.training for module in model.modules())
    assert not any(module._forward_hooks for module in model.modules())
    batch = batch_with_padding_and_two_segments()
    with torch.no_grad():
        torch.testing.assert_close(view(**batch).mlm_logits, model.eval()(**batch).mlm_logits, atol=0, rtol=0)


def test_in_eval_mode_is_the_model_itself_in_eval_mode_and_else_a_view():
    model = BertForPreTraining(CONFIG).eval()
    assert in_eval_mode(model) is model
    model.bert.encoder.layer[1].train()  # one module in training mode is enough to need a view
    view = in_eval_mode(model)
    assert view is not model and not any(module.training for module in view.modules())
    assert model.bert.encoder.layer[1].training
