"""What a dynamic int8 ``Linear`` computes, integer by integer: the activations quantized per
batch, the weights per tensor or per row, integer products accumulated and rescaled; and
FBGEMM's AVX2 kernel adding the products two by two into int16, which saturates on CPUs
without VNNI (lessons 07 and 15 show when it does).
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.quant.dynamic import quantize_dynamic_int8


def emulate_dynamic_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                           activation_bits: int = 7, per_channel: bool = False,
                           saturate_pairs: bool = False) -> torch.Tensor:
    """What a dynamic int8 ``Linear`` computes, written out in float arithmetic: the batch ``x``
    quantized to ``activation_bits`` unsigned levels over [min(x, 0), max(x, 0)] (one scale, one
    zero point), the weight to int8 symmetric (per tensor or per output row), integer products
    summed, rescaled. ``saturate_pairs``: FBGEMM's AVX2 kernel adds the products two by two into
    int16 (``vpmaddubsw``), which saturates at ±32,767; CPUs with VNNI accumulate in int32."""
    if activation_bits not in (7, 8):
        raise ValueError(f"activation_bits must be 7 or 8, got {activation_bits}")
    levels = 2 ** activation_bits - 1
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (hi - lo) / levels if hi > lo else 1.0
    zero = round(-lo / scale)
    xq = torch.clamp(torch.round(x / scale) + zero, 0, levels).double()
    # symmetric int8 as PyTorch's MinMaxObserver sets it: the largest magnitude over 255 / 2 levels
    w_scale = (weight.abs().amax(dim=1, keepdim=True) if per_channel
               else weight.abs().max()) / 127.5
    # an all-zero row (a pruned neuron) has no range: the observer's floor keeps 0 / 0 from NaN
    w_scale = w_scale.clamp_min(torch.finfo(torch.float32).eps)
    wq = torch.clamp(torch.round(weight / w_scale), -128, 127).double()
    if saturate_pairs:
        if x.shape[-1] % 2:
            raise ValueError("saturate_pairs needs an even number of input features, "
                             f"got {x.shape[-1]}")
        prod = xq.reshape(-1, 1, x.shape[-1]) * wq.unsqueeze(0)          # (rows, out, in)
        acc = prod.unflatten(-1, (-1, 2)).sum(-1).clamp(-32768, 32767).sum(-1)
        acc = acc.reshape(*x.shape[:-1], weight.shape[0])
    else:
        acc = xq @ wq.T
    y = (acc - zero * wq.sum(1)) * scale * w_scale.double().reshape(-1)
    return (y + (0 if bias is None else bias.double())).to(x.dtype)


def saturation_probe(features: int = 64) -> tuple[nn.Linear, torch.Tensor]:
    """A layer and an input built to overflow int16 pairs: every weight and every activation at
    the top of its int8 range, so each pair of products is 2 × 255 × 127 = 64,770 > 32,767."""
    if features < 2 or features % 2:
        raise ValueError(f"features must be even and >= 2, got {features}")
    layer = nn.Linear(features, 4, bias=False)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    return layer, torch.ones(2, features)


def int8_accumulation(linear: nn.Linear, x: torch.Tensor) -> dict:
    """How this CPU adds up int8 products when activations keep 8 bits: ``linear`` quantized
    per tensor with ``activation_bits=8`` runs on ``x`` and is compared with the arithmetic
    written out (``emulate_dynamic_linear``) both ways. Returns the largest difference from each
    and ``"sums"``: "int32" (VNNI: exact), "int16 pairs" (AVX2's saturating pairs), or "either"
    when ``x`` overflows no pair and both agree (``saturation_probe`` tells the CPU's way). With 7
    bits (PyTorch's default) no pair can overflow: 2 × 127 × 128 < 32,768."""
    with torch.no_grad():
        got = quantize_dynamic_int8(nn.Sequential(linear), activation_bits=8)(x)
        w, b = linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
        err = {k: float((got - emulate_dynamic_linear(x, w, b, activation_bits=8,
                                                      saturate_pairs=k == "int16 pairs"))
                        .abs().max())
               for k in ("int32", "int16 pairs")}
    tol = 1e-3 * max(float(got.abs().max()), 1e-6)
    both = all(e <= tol for e in err.values())
    return {"sums": "either" if both else min(err, key=err.get), "max_difference": err}


def overflowed_with_8_bits(linear: nn.Linear, x: torch.Tensor) -> float:
    """How far ``linear``'s int8 output with 8-bit activations on ``x`` departs from exact
    integer sums (``emulate_dynamic_linear``, int32 arithmetic), as a share of the output's
    largest magnitude: about 0 where no pair of products overflowed (always, on CPUs with VNNI),
    clearly above 0 where the CPU's int16 pairs saturated on this input. One matmul: cheap
    enough to check every layer of a model on a real batch."""
    with torch.no_grad():
        got = quantize_dynamic_int8(nn.Sequential(linear), activation_bits=8)(x)
        b = None if linear.bias is None else linear.bias.detach()
        exact = emulate_dynamic_linear(x, linear.weight.detach(), b, activation_bits=8)
    return float((got - exact).abs().max() / exact.abs().max().clamp_min(1e-12))
