"""The divergence guard of the training loop (`loop.train`): a step whose gradients are not finite is skipped, and
the run stopped with the weights from before it, without the host waiting on the GPU each step to ask."""
from __future__ import annotations

import torch
from torch import Tensor


class Divergence:
    """Gradients that are not finite, caught without making every step wait for the GPU. Asking each step ("is the
    norm finite?") stalls the host until the GPU has finished the backward pass, so the host cannot queue the next
    step while the GPU computes: on an H200 that left a run of BERT-Small at half its step's speed. Instead the first
    step whose gradients are not finite, and every step after it, is skipped on the device (fused AdamW's `found_inf`,
    as AMP's GradScaler skips steps), and the host reads the flag only every `every` steps (on the CPU, where reading
    costs nothing, every step): the weights and AdamW's moments stay those of the step before the first bad one."""

    def __init__(self, device: torch.device, every: int):
        self.every = every
        self.bad = torch.zeros((), device=device)  # 1.0 from the first step whose gradients were not finite
        self.first = torch.zeros((), dtype=torch.long, device=device)  # that step
        self.loss = torch.zeros((), device=device)  # and its loss

    def guard(self, optimizer: torch.optim.Optimizer, grad_norm: Tensor, loss: Tensor, step: int) -> bool:
        """Before the optimizer's step `step`: mark it if `grad_norm` is not finite, and have AdamW skip it then.
        Whether to call `optimizer.step()`: an optimizer that cannot skip on the device is asked now instead."""
        newly = ~torch.isfinite(grad_norm) & (self.bad == 0)
        self.first = torch.where(newly, step, self.first)
        self.loss = torch.where(newly, loss.detach().float(), self.loss)
        self.bad = torch.where(newly, 1.0, self.bad)
        if getattr(optimizer, "_step_supports_amp_scaling", False):  # fused AdamW: reads found_inf on the device
            optimizer.found_inf = self.bad
            return True
        self.every = 1
        return not self.bad.item()

    def found(self, step: int) -> tuple[int, float] | None:
        """After step `step`: the first bad step and its loss, if there was one, on the steps the host reads."""
        if step % self.every or not self.bad.item():
            return None
        return int(self.first), float(self.loss)
