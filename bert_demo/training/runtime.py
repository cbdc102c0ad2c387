"""Where and how a run executes: the device, its precision, CPU threads, torchrun ranks and the C heap.

The trainer asks these questions; none of them is about BERT. Kept apart so that the training loop reads as the
paper's recipe and nothing else.
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

Batch = dict[str, Tensor]
CPU_THREADS_ENV = "BERT_DEMO_CPU_THREADS"  # the CPU threads a run uses, where one per core is not what it may use


@dataclass(frozen=True, kw_only=True)
class Distributed:
    """Where this process stands in a torchrun job (rank 0 of 1 when run on its own)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Distributed":
        return cls(rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)),
                   local_rank=int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether any rank's `flag` is set (every rank must ask together); alone, the flag."""
        if self.world_size == 1:
            return flag
        tensor = torch.tensor([float(flag)], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def agree(self, value: int, choose: Callable[..., int], device: torch.device) -> int:
        """One value for every rank (`choose`: min or max of theirs; every rank must ask together); alone, `value`."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN if choose is min else dist.ReduceOp.MAX)
        return int(tensor.item())

    def end_group(self) -> None:
        """End the torchrun process group, where one is running."""
        if dist.is_initialized():
            dist.destroy_process_group()


def start_process_group(distributed: Distributed, device: torch.device) -> bool:
    """Join the torchrun job's process group (NCCL on GPUs, gloo on CPUs) unless alone or already in one; whether
    this call started it (its caller then ends it: `Distributed.end_group`)."""
    if distributed.world_size == 1 or dist.is_initialized():
        return False
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def pick_device(requested: str | None, distributed: Distributed) -> torch.device:
    """The requested device, else this process's GPU when there is one, else the CPU.

    A CUDA device is always made the current one. `cuda` without an index means this process's GPU (its torchrun
    `LOCAL_RANK`): left as index None, every rank would pick GPU 0 and NCCL would find the same GPU twice."""
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError:
            raise ValueError(f"unknown device {requested!r}: use cpu, cuda or cuda:N") from None
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"device {requested!r} is not supported: use cpu, cuda or cuda:N")
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        return device
    if device.index is None:
        device = torch.device("cuda", distributed.local_rank)
    if device.index >= torch.cuda.device_count():
        raise ValueError(f"device {requested or str(device)!r} is not available on this machine "
                         f"({torch.cuda.device_count()} CUDA GPU(s)): use --device cpu")
    torch.cuda.set_device(device)
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether the device computes bf16 in hardware, as PyTorch reports it: a GPU of compute capability 8.0 or
    higher (Ampere on; older cards emulate bf16 and the fused attention kernels refuse it), or a CPU with AVX-512
    BF16 (AMD Zen 4 on) or AMX (Intel Sapphire Rapids on). Elsewhere bf16 is emulated, and slower than fp32: a
    1024 x 1024 matmul on this project's Zen 3 EPYC ran at 1 GFLOP/s in bf16 against 81 in fp32."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_precision(requested: str, device: torch.device) -> str:
    """The precision a run computes in, "fp32" or "bf16": `auto` is bf16 where the device has it natively."""
    if requested == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if requested not in ("fp32", "bf16"):
        raise ValueError(f"unknown precision {requested!r}: choose auto, fp32 or bf16")
    return requested


def autocast(device: torch.device, precision: str):
    """bf16 autocast for the forward pass when the run computes in bf16: the matmuls run in bf16, while the master
    weights, the optimizer state and the losses (computed from `.float()` logits) stay fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def release_free_memory() -> None:
    """Return the free pages of the C heap to the operating system (glibc's malloc_trim; elsewhere nothing).

    A training step frees and reallocates about a gigabyte of tensors of slightly different sizes; glibc keeps the
    freed pages, so a process's memory grows with the run although its live data does not. Measured on a run of the
    shipped model (mini, news,wiki): 2.1 GB RSS, and 0.65 GB just after a malloc_trim called from a debugger.
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError, TypeError):  # not glibc (macOS, musl, Windows): nothing to hand back
        pass


def set_cpu_threads() -> None:
    """Compute on `cpu_threads()` threads."""
    torch.set_num_threads(cpu_threads())


def cpu_threads() -> int:
    """One thread per core this process may use, shared among the processes of a torchrun job; or as many as
    $BERT_DEMO_CPU_THREADS says (a ZeroGPU call says 1: see app/runs/gpu_call.py; an app's run on a busy machine starts
    on 1: see app/runs/run_process.py)."""
    threads = os.environ.get(CPU_THREADS_ENV)
    if threads:
        return int(threads)
    return max(1, _cores() // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def data_workers(requested: int | None, device: torch.device, world_size: int = 1) -> int:
    """How many processes build a run's batches ahead of its steps: as requested, else none on a CPU (the step
    needs every core, and a batch costs a few ms beside a step of hundreds) and, on a GPU, up to 8 of the cores
    this rank shares with the machine's other ranks (a GPU step of BERT-Small at batch 256 takes about 25 ms, the
    batch's examples and masks about as long in Python)."""
    if requested is not None:
        return requested
    if device.type != "cuda":
        return 0
    return max(1, min(8, _cores() // world_size - 1))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def describe_hardware(device: torch.device, world_size: int = 1) -> str:
    """What a run trains on, in words, for its model card: the GPU's name, or the CPU's model and the threads used."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{_cpu_model()} CPU, {torch.get_num_threads()} thread(s)"
    return f"{world_size} processes, each on {name}" if world_size > 1 else name


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):  # not Linux, or no model name given
        return "a"


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Move a batch to the device; on CUDA through pinned memory so the copy overlaps compute."""
    if device.type == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    return batch


def wrap_for_training(model: torch.nn.Module, device: torch.device, world_size: int, compile: bool
                      ) -> torch.nn.Module:
    """The module a training step calls: DistributedDataParallel across processes, then torch.compile, in that
    order. DDP wrapped around an already compiled model loses the overlap of the gradients' all-reduce with the
    backward pass (PyTorch's notes on DDP and torch.compile)."""
    forward = model
    if world_size > 1:
        device_ids = [device.index] if device.type == "cuda" else None
        forward = torch.nn.parallel.DistributedDataParallel(forward, device_ids=device_ids)
    return torch.compile(forward) if compile else forward
