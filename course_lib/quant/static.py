"""Post-training *static* int8 quantization of every ``nn.Linear`` (lesson 07).

Dynamic int8 (``quant.dynamic.quantize_dynamic_int8``) measures each batch's activation range at run
time. Static quantization measures it once, ahead of time: observers watch the activations
entering and leaving every ``Linear`` on a few calibration batches, and their ranges become
fixed scales and zero points. At run time each ``Linear`` then quantizes its input with the
stored scale (no range to compute), multiplies in int8, and returns int8 output on the stored
output scale, which is dequantized for the FP32 ops around it (LayerNorm, softmax, GELU and
attention's own matrix products stay FP32 in this eager-mode version: quantizing them too needs
a graph-level tool such as torchao's PT2E flow).

Two things differ from dynamic int8, and lesson 07 measures both: a range fixed in advance
clips an activation that exceeds it (calibration data must look like real data), and the
per-batch range computation is gone (speed).

Built with ``torch.ao.quantization`` eager mode (QuantStub, prepare, calibrate, convert), which
warns that it is deprecated in favour of torchao; the warnings are silenced here, by message.
"""
from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["StaticLinear", "quantize_static_int8"]

_SILENCED = (r"torch\.ao\.quantization is deprecated", r"Please use quant_min and quant_max",
             r"torch\.quantize_per_tensor.*deprecated")


class StaticLinear(nn.Module):
    """``Linear`` between a quantize and a dequantize step: the unit that static quantization
    converts (its observers see the input and the output of ``linear``)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.linear = linear
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.linear(self.quant(x.float())))


def _wrap(module: nn.Module, qconfig) -> int:
    n = 0
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            wrapped = StaticLinear(child)
            wrapped.qconfig = qconfig
            setattr(module, name, wrapped)
            n += 1
        else:
            n += _wrap(child, qconfig)
    return n


def quantize_static_int8(model: nn.Module, calibration: Iterable[dict], *,
                         max_batches: int = 16, backend: str = "x86") -> nn.Module:
    """A copy of ``model`` (CPU) with every ``nn.Linear`` statically quantized to int8 (weights
    per output channel, activations per tensor), calibrated on up to ``max_batches`` batches of
    ``calibration`` (dicts with ``input_ids`` and ``attention_mask``, as the course's loaders
    give). ``backend``: torch's quantized engine, ``"x86"`` (fbgemm + onednn) or ``"qnnpack"``."""
    if max_batches < 1:
        raise ValueError(f"max_batches must be >= 1, got {max_batches}")
    if backend not in ("x86", "fbgemm", "qnnpack"):
        raise ValueError(f"backend must be 'x86', 'fbgemm' or 'qnnpack', got {backend!r}")
    q = copy.deepcopy(model).cpu().eval()
    with warnings.catch_warnings():
        for message in _SILENCED:
            warnings.filterwarnings("ignore", message=message)
        if _wrap(q, torch.ao.quantization.get_default_qconfig(backend)) == 0:
            raise ValueError("model has no nn.Linear to quantize")
        torch.ao.quantization.prepare(q, inplace=True)
        seen = 0
        with torch.no_grad():
            for batch in calibration:
                q(batch["input_ids"], batch["attention_mask"])
                seen += 1
                if seen == max_batches:
                    break
        if seen == 0:
            raise ValueError("calibration yielded no batches: the observers saw nothing")
        torch.ao.quantization.convert(q, inplace=True)
    return q
