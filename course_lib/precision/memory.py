"""What mixed precision saves in training memory, counted exactly rather than read off a meter.

Training memory has two parts (lesson 00): the **parameter state** (weights, gradients and
AdamW's two moments) and the **activations** the forward pass stores for backward. Autocast
keeps the whole parameter state in FP32, the "master weights", 16 bytes per parameter with
AdamW whatever the autocast dtype. It stores most activations in 16 bits, and it also stores a
16-bit copy of every weight it casts (``measure.memory.saved_activation_bytes`` counts
those with the activations). Training entirely in FP16 (``model.half()``) halves the parameter
state as well, but loses the FP32 master weights (``half_train``, lesson 04's regression arm).

So whether FP16 "saves memory" depends on which part dominates: at a small batch the parameter
state does, and autocast saves little; at a large batch or long sequences the activations do.
``by_batch`` finds the crossover. Deterministic counts: no timing, no allocator noise, no
process set-up in the figure (peak RSS includes all three).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.measure.memory import parameter_state_bytes, saved_activation_bytes
from course_lib.core.precision import precision

__all__ = ["TrainingMemory", "training_memory", "memory_ratio", "by_batch"]


@dataclass(frozen=True)
class TrainingMemory:
    precision: str
    parameter_state_bytes: int   # FP32 weights, gradients, AdamW moments (autocast leaves them
                                 # FP32)
    activation_bytes: int        # saved for backward under autocast, weight casts included

    @property
    def total_bytes(self) -> int:
        return self.parameter_state_bytes + self.activation_bytes


def training_memory(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *,
                    precision_name: str) -> TrainingMemory:
    """Parameter state + saved activations of one AdamW training step of ``model`` on
    (``ids``, ``mask``) under the autocast recipe ``precision_name`` ("fp32", "bf16", "fp16")."""
    dtype = precision(precision_name).dtype
    return TrainingMemory(precision_name, parameter_state_bytes(model),
                          saved_activation_bytes(model, ids, mask, autocast_dtype=dtype))


def memory_ratio(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *,
                 precision_name: str = "fp16") -> tuple[float, TrainingMemory, TrainingMemory]:
    """(total under ``precision_name`` ÷ total in FP32, the low-precision count, the FP32 count)."""
    low = training_memory(model, ids, mask, precision_name=precision_name)
    full = training_memory(model, ids, mask, precision_name="fp32")
    return low.total_bytes / full.total_bytes, low, full


def by_batch(model: nn.Module, *, vocab_size: int, batches, length: int,
             precision_name: str = "fp16", seed: int = 0) -> list[dict]:
    """``memory_ratio`` at each batch size in ``batches`` for sequences of ``length`` random
    tokens (every position real): where the saving starts to show."""
    if not batches or min(batches) < 1 or length < 1:
        raise ValueError(f"batches and length must be >= 1, got {batches} and {length}")
    device = next(model.parameters()).device
    rows = []
    for b in batches:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(2, vocab_size, (b, length), generator=g).to(device)
        ratio, low, full = memory_ratio(model, ids, torch.ones_like(ids, dtype=torch.bool),
                                        precision_name=precision_name)
        rows.append({"batch": b, "ratio": ratio, "fp32_mib": full.total_bytes / 2**20,
                     "low_mib": low.total_bytes / 2**20,
                     "activation_share_fp32": full.activation_bytes / full.total_bytes})
    return rows
