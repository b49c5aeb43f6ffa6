"""Lesson 12's measurements of the course's optimizers (``core.optimizers``): how far one step
moves a weight, and the state each allocates.

``single_step_delta`` runs the course's ``train_step`` on a loss whose gradient is given, so
the update rule alone shows (Adam's coupled L2 against AdamW's decoupled decay, LAMB's trust
ratio); ``state_bytes_after_one_step`` lets an optimizer create its state with one step of zero
gradients and counts it with ``core.optimizers.state_bytes``. Memory per parameter follows the
accounting of Rajbhandari et al., "ZeRO" (SC 2020): mixed-precision training keeps fp16/bf16
weights and gradients (2 + 2 bytes), an fp32 master copy (4) and fp32 optimizer states (4 per
state value), i.e. 16 bytes for Adam.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from course_lib.core.optimizers import make_optimizer, state_bytes
from course_lib.core.train import train_step

__all__ = ["single_step_delta", "state_bytes_after_one_step"]


class _Weight(nn.Module):
    """One weight tensor, trained through the course's step with a loss whose gradient is given."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone())


def _given_gradient(model: _Weight, batch: dict) -> torch.Tensor:
    return (model.weight * batch["grad"]).sum()   # d/dW of sum(W * g) is g, exactly


def single_step_delta(name: str, weight: torch.Tensor, grads: Sequence[torch.Tensor], *,
                      lr: float, weight_decay: float) -> torch.Tensor:
    """How much ``weight`` moves after one step per gradient in ``grads`` (new - old), each
    step the course's ``train_step`` on a loss whose gradient is that one (no clipping)."""
    holder = _Weight(weight)
    opt = make_optimizer(name, holder.parameters(), lr=lr, weight_decay=weight_decay)
    for g in grads:
        train_step(holder, {"grad": g.detach().to(holder.weight.dtype)}, opt, device=weight.device,
                   dtype=None, loss_fn=_given_gradient, grad_clip=None)
    return (holder.weight.detach() - weight).detach()


def state_bytes_after_one_step(name: str, model: nn.Module, *, lr: float = 1e-3) -> int:
    """Bytes of optimizer state ``name`` allocates for ``model`` (without 0-d scalars such as
    Adam's step count): one ``train_step`` with zero gradients creates the state and leaves
    the weights as they were, except for any weight decay."""
    opt = make_optimizer(name, model.parameters(), lr=lr)
    zero = lambda m, _: sum((p * 0).sum() for p in m.parameters())   # noqa: E731
    train_step(model, {}, opt, device=next(model.parameters()).device, dtype=None,
               loss_fn=zero, grad_clip=None)
    model.zero_grad(set_to_none=True)
    return state_bytes(opt, include_scalars=False)
