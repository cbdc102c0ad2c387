"""The GPU path on a real GPU: the same numbers as transformers there, a run in the precision `auto` picks that learns
and saves fp32 weights, the process's own GPU made current, steps that never wait on the GPU, inference that answers as
on the CPU, and a run that runs out of GPU memory saving what it had. Skipped without CUDA (CI has none):
`benchmarks/gpu_check.py` runs them on a machine with one."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from bert_demo.checkpoint import load_pretrained, read_metadata
from bert_demo.config import has_weights
from bert_demo.inference import fill_mask, next_sentence
from bert_demo.training import timeline
from bert_demo.training.loop import Control
from bert_demo.training.pretraining import pretraining
from bert_demo.training.runtime import Distributed, pick_device, resolve_precision
from bert_demo.training.settings import TrainConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "mini-english"
SENTENCES = ["the capital of france is [MASK].", "she poured the [MASK] into a cup and drank it slowly."]


@pytest.fixture
def shipped() -> Path:
    """The shipped mini-english, unless its weights were left home so that a call to a lent GPU could carry a
    corpus and a checkpoint within its 64 MiB (`benchmarks/gpu_pretrain.py leave-home`)."""
    if not has_weights(SHIPPED):
        pytest.skip("the shipped weights were left home for this call (gpu_pretrain.py leave-home)")
    return SHIPPED


@pytest.fixture
def fp32_matmuls():
    """Full fp32 matmuls (no TF32), as the parity claim is made in fp32."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_the_shipped_model_on_the_gpu_gives_the_numbers_of_transformers_on_the_gpu(shipped, fp32_matmuls):
    model, tokenizer = load_pretrained(shipped, device="cuda")
    reference = transformers.BertForPreTraining.from_pretrained(shipped).cuda().eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt").to("cuda")
    with torch.no_grad():
        ours = model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        theirs = reference(**batch)
    assert (ours.mlm_logits - theirs.prediction_logits).abs().max() < 1e-4
    assert (ours.nsp_logits - theirs.seq_relationship_logits).abs().max() < 1e-4


def test_cuda_means_this_processes_gpu_and_it_is_made_current():
    device = pick_device("cuda", Distributed())
    assert device == torch.device("cuda", 0) and torch.cuda.current_device() == 0


def test_auto_picks_bf16_exactly_on_cards_of_compute_capability_8_or_more():
    expected = "bf16" if torch.cuda.get_device_capability(0) >= (8, 0) else "fp32"
    assert resolve_precision("auto", torch.device("cuda", 0)) == expected


def test_a_run_on_the_gpu_learns_in_its_auto_precision_and_saves_fp32_weights_transformers_loads(write_corpus,
                                                                                                tmp_path):
    config = TrainConfig(preset="tiny", corpus=str(write_corpus(tmp_path / "corpus.txt")), steps=60, batch_size=16,
                         seq_len=64, vocab_size=300, out=str(tmp_path / "run"), eval_every=30, log_every=10,
                         device="cuda")
    records = list(pretraining(config).run())
    losses = [r["mlm_loss"] for r in records if r["kind"] == "train"]
    assert records[-1]["reason"] == "finished" and losses[-1] < losses[0] - 1.0, losses
    assert read_metadata(tmp_path / "run")["precision"] == resolve_precision("auto", torch.device("cuda", 0))
    reference = transformers.BertForPreTraining.from_pretrained(tmp_path / "run")
    assert all(p.dtype == torch.float32 for p in reference.parameters())


def test_between_records_the_host_queues_steps_without_ever_waiting_for_the_gpu(write_corpus, tmp_path):
    """A step that waits on the GPU (a boolean index, a copy from unpinned memory, an .item()) leaves the GPU idle
    while the host catches up, every step; steps 40 to 90 of a run, between its records and snapshots, raise if
    anything synchronises (torch.cuda.set_sync_debug_mode), with data workers as a GPU run has them."""
    control = Control()

    def strict_from_40_to_90() -> None:
        if control.step in (40, 90):
            torch.cuda.set_sync_debug_mode("error" if control.step == 40 else "default")
    control.after_step = strict_from_40_to_90
    config = TrainConfig(preset="tiny", corpus=str(write_corpus(tmp_path / "corpus.txt")), steps=100, batch_size=16,
                         seq_len=64, vocab_size=300, out=str(tmp_path / "run"), eval_every=1000, log_every=1000,
                         device="cuda", data_workers=2)
    assert not set(range(40, 91)) & set(timeline.snapshot_steps(config.steps))
    try:
        records = list(pretraining(config, control=control).run())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert records[-1]["reason"] == "finished", records[-1]


def test_inference_on_the_gpu_answers_as_on_the_cpu(shipped):
    on_cpu, tokenizer = load_pretrained(shipped, device="cpu")
    on_gpu, _ = load_pretrained(shipped, device="cuda")
    for text in SENTENCES:
        cpu, gpu = fill_mask(on_cpu, tokenizer, text), fill_mask(on_gpu, tokenizer, text)
        assert [token for token, _ in cpu[0]] == [token for token, _ in gpu[0]]
        assert max(abs(a - b) for (_, a), (_, b) in zip(cpu[0], gpu[0])) < 1e-3
    pair = ("The war ended in 1865.", "Lincoln was shot soon after.")
    assert abs(next_sentence(on_cpu, tokenizer, *pair) - next_sentence(on_gpu, tokenizer, *pair)) < 1e-3


def test_running_out_of_gpu_memory_ends_the_run_with_a_message_and_a_checkpoint(write_corpus, tmp_path):
    config = TrainConfig(preset="base", corpus=str(write_corpus(tmp_path / "corpus.txt")), steps=5, batch_size=64,
                         seq_len=512, vocab_size=300, out=str(tmp_path / "run"), device="cuda")
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(2**31 / torch.cuda.get_device_properties(0).total_memory)  # 2 GiB
    try:
        done = list(pretraining(config).run())[-1]
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert done["reason"] == "out of memory" and "smaller batch" in done["message"], done
    model, _ = load_pretrained(done["checkpoint"])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_timeline_step_is_kept_on_the_cpu_while_the_final_weights_sit_on_the_gpu(write_corpus, tmp_path):
    from bert_demo.app.registry import Registry

    config = TrainConfig(preset="tiny", corpus=str(write_corpus(tmp_path / "corpus.txt")), steps=12, batch_size=8,
                         seq_len=32, vocab_size=300, out=str(tmp_path / "runs" / "gpu-run"), device="cuda")
    list(pretraining(config).run())
    registry = Registry(checkpoints_dir=tmp_path / "none", runs_dir=tmp_path / "runs", device="cuda", allow_hub=False)
    final, early = registry.catalog.load_at("runs/gpu-run", None), registry.catalog.load_at("runs/gpu-run", 10)
    assert next(final.model.parameters()).is_cuda and not next(early.model.parameters()).is_cuda
    decoder, table = early.model.cls.predictions.decoder.weight, early.model.bert.embeddings.word_embeddings.weight
    assert decoder is table and not torch.equal(table, final.model.bert.embeddings.word_embeddings.weight.cpu())
