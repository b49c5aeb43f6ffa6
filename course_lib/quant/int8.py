"""Quantization from first principles: the uniform quantizer, its error, and fake quantization.

Follows the uniform affine quantizer of Jacob et al. (2018), "Quantization and Training of
Neural Networks for Efficient Integer-Arithmetic-Only Inference", and the notation of
Nagel et al. (2021), "A White Paper on Neural Network Quantization":
``q = clamp(round(x / scale) + zero_point, qmin, qmax)`` and ``x_hat = (q - zero_point) * scale``.

* symmetric: ``zero_point = 0``, grid ``[-(2^(b-1) - 1), 2^(b-1) - 1]`` (restricted range, so
  the grid is symmetric around an exact zero); affine: grid ``[0, 2^b - 1]`` with a zero point,
  and the range always contains 0 so that zero (padding, ReLU outputs) is exact.
* per-tensor: one scale for the whole tensor; per-channel: one scale per slice along ``axis``
  (output channels of a Linear weight, axis 0).
* Inside the clipping range the error is rounding error, at most ``scale / 2``; outside it,
  clipping error, which grows with the distance to the range. ``clip < 1`` trades one for
  the other.

PyTorch's int8 paths for the course model are ``quant.dynamic`` (its dynamic int8 modules, their
recipes and their size) and ``quant.kernel`` (what the int8 kernel computes, integer by integer).
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

SCHEMES = ("symmetric", "affine")
GRANULARITIES = ("per_tensor", "per_channel")


def _check(bits: int, scheme: str, granularity: str) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an integer in [2, 8], got {bits!r}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")


def int_range(bits: int, scheme: str) -> tuple[int, int]:
    """The integer grid ``(qmin, qmax)`` of a scheme at ``bits`` bits."""
    _check(bits, scheme, "per_tensor")
    if scheme == "symmetric":
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2 ** bits - 1


@dataclass(frozen=True)
class QuantParams:
    scale: torch.Tensor        # shape () per tensor, or broadcastable along ``axis``
    zero_point: torch.Tensor   # same shape, integer values
    qmin: int
    qmax: int
    bits: int
    scheme: str
    granularity: str

    @property
    def low(self) -> torch.Tensor:
        """Smallest representable value (the lower end of the clipping range)."""
        return (self.qmin - self.zero_point) * self.scale

    @property
    def high(self) -> torch.Tensor:
        return (self.qmax - self.zero_point) * self.scale


def calibrate(x: torch.Tensor, *, bits: int = 8, scheme: str = "symmetric",
              granularity: str = "per_tensor", axis: int = 0,
              clip: float = 1.0) -> QuantParams:
    """Min/max calibration: the scale and zero point that cover ``clip`` times the range seen."""
    _check(bits, scheme, granularity)
    if not 0.0 < clip <= 1.0:
        raise ValueError(f"clip must be in (0, 1], got {clip}")
    x = x.detach().float()
    if granularity == "per_channel":
        if x.dim() < 1 or not -x.dim() <= axis < x.dim():
            raise ValueError(f"axis must be in [-{x.dim()}, {x.dim() - 1}], got {axis}")
        axis = axis % x.dim()
        dims = [d for d in range(x.dim()) if d != axis]
        shape = [x.shape[d] if d == axis else 1 for d in range(x.dim())]
        lo = x.amin(dim=dims).reshape(shape) if dims else x.clone()
        hi = x.amax(dim=dims).reshape(shape) if dims else x.clone()
    else:
        lo, hi = x.min(), x.max()
    lo, hi = lo.clamp(max=0.0) * clip, hi.clamp(min=0.0) * clip   # the range contains 0
    qmin, qmax = int_range(bits, scheme)
    tiny = torch.finfo(torch.float32).tiny
    if scheme == "symmetric":
        scale = (torch.maximum(-lo, hi) / qmax).clamp_min(tiny)
        zero = torch.zeros_like(scale)
    else:
        scale = ((hi - lo) / (qmax - qmin)).clamp_min(tiny)
        zero = (qmin - torch.round(lo / scale)).clamp(qmin, qmax)
    return QuantParams(scale, zero, qmin, qmax, bits, scheme, granularity)


def quantize(x: torch.Tensor, p: QuantParams) -> torch.Tensor:
    """Integers in ``[p.qmin, p.qmax]`` (dtype int32, wide enough for every scheme)."""
    q = torch.round(x.detach().float() / p.scale) + p.zero_point
    return q.clamp(p.qmin, p.qmax).to(torch.int32)


def dequantize(q: torch.Tensor, p: QuantParams) -> torch.Tensor:
    return (q.float() - p.zero_point) * p.scale


def fake_quantize(x: torch.Tensor, *, bits: int = 8, scheme: str = "symmetric",
                  granularity: str = "per_tensor", axis: int = 0,
                  clip: float = 1.0) -> torch.Tensor:
    """``dequantize(quantize(x))``: float values that lie on the integer grid."""
    p = calibrate(x, bits=bits, scheme=scheme, granularity=granularity, axis=axis, clip=clip)
    return dequantize(quantize(x, p), p).to(x.dtype)


def sqnr_db(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB (about 6 dB per bit for a uniform grid)."""
    noise = float(((x.float() - x_hat.float()) ** 2).sum())
    signal = float((x.float() ** 2).sum())
    return float("inf") if noise == 0 else 10.0 * torch.log10(torch.tensor(signal / noise)).item()


def within_range(x: torch.Tensor, p: QuantParams) -> torch.Tensor:
    """True where ``x`` rounds onto the grid (within half a step of its ends): there the
    error is rounding error only, at most ``scale / 2``; elsewhere it is clipped."""
    half = p.scale / 2
    return (x >= p.low - half) & (x <= p.high + half)


def error_breakdown(x: torch.Tensor, p: QuantParams) -> dict[str, float]:
    """Mean squared error split into rounding (inside the range) and clipping (outside)."""
    x = x.detach().float()
    err2 = (x - dequantize(quantize(x, p), p)) ** 2
    inside = within_range(x, p)
    return {"rounding_mse": float(err2[inside].sum()) / x.numel(),
            "clipping_mse": float(err2[~inside].sum()) / x.numel(),
            "clipped_fraction": float((~inside).float().mean()),
            "max_abs_error_inside": float(err2[inside].sqrt().max()) if inside.any() else 0.0}


def matmul_weights(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """Every weight matrix used in a matrix multiply: Linear weights and attention's
    ``in_proj_weight``; embeddings (lookup tables), norms and biases are left out."""
    for name, param in model.named_parameters():
        if param.dim() == 2 and (name.endswith("in_proj_weight") or (
                name.endswith(".weight") and isinstance(
                    model.get_submodule(name.rsplit(".", 1)[0]), nn.Linear))):
            yield name, param


def fake_quantize_model(model: nn.Module, *, bits: int, scheme: str = "symmetric",
                        granularity: str = "per_channel") -> nn.Module:
    """A copy whose matmul weights are fake-quantized (accuracy studies at 2-8 bits)."""
    _check(bits, scheme, granularity)
    out = copy.deepcopy(model)
    with torch.no_grad():
        for _, w in matmul_weights(out):
            w.copy_(fake_quantize(w, bits=bits, scheme=scheme, granularity=granularity))
    return out
