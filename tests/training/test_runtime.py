"""Where a run executes: which GPU each torchrun rank takes, which precision `auto` means on which device, the order
of DDP and torch.compile, and that a training step reads nothing back from the device. Runs on a CPU: torch.cuda is
mocked where a GPU's answer is needed."""
from __future__ import annotations

import pytest
import torch

from bert_demo.config import PRESETS
from bert_demo.model import BertForPreTraining
from bert_demo.training import runtime
from bert_demo.training.loop import Window
from bert_demo.training.pretraining import micro_batch_loss
from bert_demo.training.runtime import Distributed, pick_device, resolve_precision, wrap_for_training
from bert_demo.training.settings import TrainConfig


@pytest.fixture
def four_gpus(monkeypatch) -> list[torch.device]:
    """torch.cuda as on a machine with four GPUs; returns the devices made current, in order."""
    made_current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    return made_current


@pytest.mark.parametrize("requested", ["cuda", None])
def test_cuda_without_an_index_under_torchrun_takes_this_ranks_gpu_and_makes_it_current(four_gpus, requested):
    rank_two = Distributed(rank=2, world_size=4, local_rank=2)
    assert pick_device(requested, rank_two) == torch.device("cuda", 2)
    assert four_gpus == [torch.device("cuda", 2)]


def test_an_explicit_gpu_is_kept_made_current_and_one_past_the_last_is_refused(four_gpus):
    assert pick_device("cuda:1", Distributed(local_rank=3)) == torch.device("cuda", 1)
    assert four_gpus == [torch.device("cuda", 1)]
    with pytest.raises(ValueError, match="device 'cuda:4' is not available on this machine \\(4 CUDA GPU"):
        pick_device("cuda:4", Distributed())


@pytest.mark.parametrize("capability, expected", [((7, 0), "fp32"), ((7, 5), "fp32"), ((8, 0), "bf16"),
                                                  ((9, 0), "bf16")])
def test_auto_precision_on_a_gpu_is_bf16_from_ampere_on_and_fp32_before(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", torch.device("cuda", 0)) == expected


@pytest.mark.parametrize("avx512_bf16, amx, expected", [(False, False, "fp32"), (True, False, "bf16"),
                                                        (False, True, "bf16")])
def test_auto_precision_on_a_cpu_is_bf16_only_with_native_bf16_instructions(cpu_with, avx512_bf16, amx, expected):
    cpu_with(avx512_bf16, amx)
    assert resolve_precision("auto", torch.device("cpu")) == expected


def test_an_explicit_precision_is_kept_and_an_unknown_one_is_refused_with_the_choices():
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    with pytest.raises(ValueError, match="unknown precision 'fp16': choose auto, fp32 or bf16"):
        resolve_precision("fp16", torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown precision 'fp16': choose one of auto, fp32, bf16"):
        TrainConfig(precision="fp16")


def test_autocast_computes_matmuls_in_bf16_only_when_the_precision_is_bf16():
    x = torch.randn(4, 4)
    with runtime.autocast(torch.device("cpu"), "bf16"):
        assert (x @ x).dtype == torch.bfloat16
    with runtime.autocast(torch.device("cpu"), "fp32"):
        assert (x @ x).dtype == torch.float32


def test_several_processes_wrap_the_model_in_ddp_first_then_compile_it(monkeypatch):
    wrapped = []
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel",
                        lambda module, device_ids: wrapped.append(("ddp", module, device_ids)) or "ddp")
    monkeypatch.setattr(torch, "compile", lambda module: wrapped.append(("compile", module)) or "compiled")
    model = torch.nn.Linear(2, 2)
    assert wrap_for_training(model, torch.device("cuda", 3), world_size=2, compile=True) == "compiled"
    assert wrapped == [("ddp", model, [3]), ("compile", "ddp")]
    assert wrap_for_training(model, torch.device("cpu"), world_size=1, compile=False) is model


class _NoReadBack:
    """Every way a tensor's value reaches Python raises, as a read from the GPU would make the step wait for it."""

    def __enter__(self):
        self.saved = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__bool__", "__float__",
                                                                     "__int__", "any")}

        def refuse(*_args, **_kwargs):
            raise AssertionError("a tensor's value was read back")

        for name in self.saved:
            setattr(torch.Tensor, name, refuse)
        return self

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(torch.Tensor, name, method)


def test_a_micro_steps_metrics_and_loss_read_nothing_back_until_a_record_is_written():
    torch.manual_seed(0)
    model = BertForPreTraining(PRESETS["tiny"].with_vocab(50))
    ids = torch.randint(5, 50, (3, 8))
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    nsp = torch.tensor([0, 1, 0])
    window, batch = Window(), {"mlm_labels": labels, "nsp_labels": nsp}
    with _NoReadBack():
        out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), mlm_labels=labels, nsp_labels=nsp)
        loss, metrics = micro_batch_loss(TrainConfig(), out, batch, batch)
        window.add(metrics, tokens=24)
    metrics = window.flush()
    assert metrics["mlm_loss"] == pytest.approx(float(out.mlm_loss.detach()))
    assert metrics["nsp_acc"] == pytest.approx(float((out.nsp_logits.argmax(-1) == nsp).float().mean()))
    assert metrics["mlm_acc"] == pytest.approx(float((out.mlm_logits.argmax(-1) == ids[:, 2]).float().mean()))


def test_a_batch_without_masked_tokens_has_a_zero_masked_lm_loss_not_nan():
    model = BertForPreTraining(PRESETS["tiny"].with_vocab(50))
    ids = torch.randint(5, 50, (2, 8))
    out = model(ids, mlm_labels=torch.full_like(ids, -100))
    assert float(out.mlm_loss.detach()) == 0.0
