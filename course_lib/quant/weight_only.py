"""Weight-only int8 (lesson 16, decoding one token at a time): every ``nn.Linear``'s weight
stored as int8 with one FP32 scale per output row, turned back into floats inside ``forward``;
the activations stay in floating point. It quarters what a matrix multiply reads from memory,
which is what decides the speed of generating one token at a time (a batch of one reads every
weight to do two FLOPs per weight), while lesson 07's dynamic int8 also rounds the activations
to run integer kernels, which pays where the arithmetic decides."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.quant.int8 import calibrate, quantize


class WeightOnlyInt8Linear(nn.Module):
    """``y = x (q · s)ᵀ + b``: ``q`` int8 ``(out, in)``, ``s`` one FP32 scale per output row
    (symmetric, min/max calibration: lesson 07's per-channel recipe), ``b`` kept as it was."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach().float()
        p = calibrate(w, bits=8, scheme="symmetric", granularity="per_channel", axis=0)
        self.register_buffer("weight_int8", quantize(w, p).to(torch.int8))
        self.register_buffer("scale", p.scale.reshape(-1, 1).float())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(),
                                                                  requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight_int8.to(x.dtype) * self.scale.to(x.dtype)   # back to floats, row by row
        return F.linear(x, w, None if self.bias is None else self.bias.to(x.dtype))


def quantize_weights_int8(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` replaced by a ``WeightOnlyInt8Linear``
    (embeddings and LayerNorms stay as they are), in eval mode."""
    out = copy.deepcopy(model).eval()
    for name, module in list(out.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, WeightOnlyInt8Linear(child))
    return out
