"""One example across a run's training: at each snapshot its loss is a fresh forward pass under that snapshot's
weights, each label's rank counts the guesses above it, and the model handed in is never changed."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bert_demo.checkpoint import save_pretrained
from bert_demo.inspection import pretraining_example
from bert_demo.inspection.across_training import across
from bert_demo.model import BertForPreTraining
from bert_demo.training import timeline
from bert_demo.training.settings import TrainConfig

PARAGRAPHS = "\n\n".join(
    f"The {w} stood by the river for many years. People came from far away to see the {w}. In winter the {w} was "
    f"covered in snow. Children played near the {w} every summer." for w in ("mill", "tower", "bridge", "church"))


@pytest.fixture
def run(trained_tiny, tokenizer, tmp_path):
    """A folder with the trained tiny model as its final weights and two snapshots: random weights at step 0 and
    the final weights halved at step 10."""
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "run")
    torch.manual_seed(3)
    start = BertForPreTraining(trained_tiny.config)
    halved = {name: tensor / 2 for name, tensor in trained_tiny.state_dict().items()}
    (folder / timeline.FOLDER).mkdir()
    from safetensors.torch import save_file

    for step, state in ((0, start.state_dict()), (10, halved)):
        kept = {k: v.half().contiguous() for k, v in state.items() if k != "cls.predictions.decoder.weight"}
        save_file(kept, str(folder / timeline.file_name(step)))
    example = pretraining_example.draw(pretraining_example.typed_documents(PARAGRAPHS), tokenizer,
                                       TrainConfig(seq_len=64), 2)
    return folder, example, {0: start, 10: halved}


def test_each_moment_is_a_fresh_forward_pass_under_that_steps_weights(trained_tiny, run):
    folder, example, states = run
    before = {name: tensor.clone() for name, tensor in trained_tiny.state_dict().items()}
    moments = across(trained_tiny, folder, example, nsp_weight=0.5, final_step=40)
    assert [m.step for m in moments] == [0, 10, 40]
    for moment in moments:
        model = BertForPreTraining(trained_tiny.config).eval()
        if moment.step == 40:
            model.load_state_dict(trained_tiny.state_dict())
        else:
            model.load_state_dict(timeline.load(folder, moment.step), strict=False)
        with torch.no_grad():
            out = model(**example.batch)
        nsp = F.cross_entropy(out.nsp_logits, example.batch["nsp_labels"])
        assert moment.loss == pytest.approx(float(out.mlm_loss + 0.5 * nsp), abs=1e-4)
        above = (out.mlm_logits > out.mlm_logits.gather(1, out.mlm_targets[:, None])).sum(-1) + 1
        assert moment.ranks == above.tolist() and min(moment.ranks) >= 1
    assert all(torch.equal(tensor, before[name]) for name, tensor in trained_tiny.state_dict().items())


def test_the_final_weights_are_a_moment_only_where_the_runs_last_step_is_known_and_past_its_last_snapshot(
        trained_tiny, run):
    folder, example, _ = run
    assert [m.step for m in across(trained_tiny, folder, example)] == [0, 10]
    assert [m.step for m in across(trained_tiny, folder, example, final_step=10)] == [0, 10]


def test_a_run_without_snapshots_has_no_moments(trained_tiny, tokenizer, tmp_path):
    folder = save_pretrained(trained_tiny, tokenizer, tmp_path / "shipped")
    example = pretraining_example.draw(pretraining_example.typed_documents(PARAGRAPHS), tokenizer,
                                       TrainConfig(seq_len=64), 2)
    assert across(trained_tiny, folder, example) == []


def test_the_gradient_through_the_depth_at_each_snapshot_is_transformers_on_those_weights(trained_tiny, tokenizer,
                                                                                           run):
    from bert_demo.inspection.across_training import depth_across
    from bert_demo.inspection.batch_step import draw_batch
    from tests.references import transformers_model

    folder, example, _ = run
    recipe = TrainConfig(seq_len=64, nsp_weight=0.5)
    batch = draw_batch(pretraining_example.typed_documents(PARAGRAPHS), tokenizer, recipe, 2, 3)
    before = {name: tensor.clone() for name, tensor in trained_tiny.state_dict().items()}
    grads = [None if p.grad is None else p.grad.clone() for p in trained_tiny.parameters()]
    depths = depth_across(trained_tiny, folder, batch, recipe, final_step=40)
    assert [d.step for d in depths] == [0, 10, 40]
    for depth in depths:
        ours = BertForPreTraining(trained_tiny.config).eval()
        ours.load_state_dict(trained_tiny.state_dict() if depth.step == 40 else timeline.load(folder, depth.step),
                             strict=False)
        theirs = transformers_model(ours)
        out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                     attention_mask=batch["attention_mask"], output_hidden_states=True)
        for hidden in out.hidden_states:
            hidden.retain_grad()
        mlm = F.cross_entropy(out.prediction_logits.flatten(0, 1), batch["mlm_labels"].flatten())
        loss = mlm + 0.5 * F.cross_entropy(out.seq_relationship_logits, batch["nsp_labels"])
        loss.backward()
        assert depth.loss == pytest.approx(float(loss.detach()), abs=1e-4)
        assert depth.at_outputs == pytest.approx([float(h.grad.norm()) for h in out.hidden_states], rel=1e-3)
        layers = theirs.bert.encoder.layer
        norms = [float(torch.cat([p.grad.flatten() for p in layer.parameters()]).norm()) for layer in layers]
        assert depth.in_weights == pytest.approx(norms, rel=1e-3)
    assert all(torch.equal(tensor, before[name]) for name, tensor in trained_tiny.state_dict().items())
    assert all((p.grad is None and g is None) or torch.equal(p.grad, g)
               for p, g in zip(trained_tiny.parameters(), grads))
