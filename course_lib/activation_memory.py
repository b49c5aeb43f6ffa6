"""Where training memory goes: parameter state against the activations autograd stores.

Training keeps, per parameter, the weight, its gradient and the optimizer's state (AdamW: two
moments; ``optim.memory_per_parameter``). It also keeps, until ``backward``, every tensor the
forward pass saved for the gradient computation: the activations. Those are counted exactly
with ``torch.autograd.graph.saved_tensors_hooks``: each saved tensor's storage is counted once
(several ops save the same tensor), parameters are left out (they are counted as parameter
state). Deterministic: no timing, no allocator noise.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .models import count_parameters
from .optim import memory_per_parameter

__all__ = ["saved_activation_bytes", "parameter_state_bytes", "growth_exponent"]


def saved_activation_bytes(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> int:
    """Bytes of the tensors a training forward pass of ``model`` on (``ids``, ``mask``) saves
    for backward, each storage once, parameters excluded. The model is left as it was."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr != 0:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    was_training = model.training
    model.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(ids, mask)
        del out   # the graph (and what it saved) is freed here; nothing runs backward
    finally:
        model.train(was_training)
    return sum(seen.values())


def parameter_state_bytes(model: nn.Module, *, optimizer: str = "adamw") -> int:
    """Weights + gradients + optimizer state of ``model`` trained in FP32 with ``optimizer``."""
    per = memory_per_parameter(optimizer, precision="fp32")["total"]
    return per * count_parameters(model, trainable_only=True)


def growth_exponent(small: float, large: float, *, length_small: int, length_large: int) -> float:
    """``k`` in ``memory ∝ length^k`` from two measurements (1 = linear, 2 = quadratic)."""
    if not (small > 0 and large > 0):
        raise ValueError(f"memory values must be > 0, got {small} and {large}")
    if not 0 < length_small < length_large:
        raise ValueError(f"need 0 < length_small < length_large, got {length_small}, {length_large}")
    return math.log(large / small) / math.log(length_large / length_small)
