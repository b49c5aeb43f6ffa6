"""Quantization from first principles, and PyTorch's int8 paths for the course model.

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

PyTorch's dynamic int8 (``torch.ao.quantization.quantize_dynamic``) is deprecated in favour of
torchao's ``quantize_``: its warnings are caught here (see ``quantize_dynamic_int8``). It maps
``nn.Linear`` modules; every matrix multiply of the course model is one (``qkv``, ``proj``,
``fc1``, ``fc2``, the head), so all of them are quantized. torch's own
``nn.MultiheadAttention`` keeps two of its four projections in FP32 (``size_report`` says why):
lesson 07 shows that on torch's module.
"""
from __future__ import annotations

import copy
import importlib.util
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.measure.verdicts import Estimate

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


def quantize_dynamic_int8(model: nn.Module, *, per_channel: bool = False,
                          activation_bits: int = 7) -> nn.Module:
    """PyTorch's dynamic int8 of every ``nn.Linear`` (weights int8 per tensor, or per output
    channel with ``per_channel=True``; activations quantized on the fly per batch), on a copy.

    ``activation_bits``: PyTorch's dynamic ``Linear`` quantizes each batch's activations to 7
    bits (``reduce_range=True`` in its ``forward``: 0..127 instead of 0..255), so that FBGEMM's
    int8 products summed in pairs cannot overflow int16 on CPUs without VNNI instructions. 8 takes
    the module's older code path (``version`` 3), which calls the same kernel with all 8 bits:
    half the activation rounding step, at the risk of that saturation where VNNI is missing. (A
    workaround: the module has no option for it; a test checks the arithmetic it gives.)
    Activations get one scale per call, over the whole batch (padded positions included), so a
    sentence's int8 result depends slightly on the batch it is in.
    Which is more accurate is a measurement per CPU.

    ``torch.ao.quantization`` emits a DeprecationWarning (it moves to torchao's ``quantize_``)
    and a UserWarning (quantized tensor dtypes are deprecated). The API still works in this
    torch; both warnings are expected and silenced here only, by message.
    """
    if activation_bits not in (7, 8):
        raise ValueError("activation_bits must be 7 (PyTorch's default) or 8, "
                         f"got {activation_bits}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated",
                                category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor.*deprecated",
                                category=UserWarning)
        spec = ({nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig} if per_channel
                else {nn.Linear})
        q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().eval(), spec,
                                                   dtype=torch.qint8)
    for m in q.modules():
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            m.register_forward_pre_hook(_float32_inputs)
            if activation_bits == 8:
                m.version = 3   # forward(): version < 4 calls linear_dynamic without reduce_range
    return q


# Dynamic int8 recipes by (weight scales, activation bits): PyTorch's default is one scale per
# weight tensor and 7-bit activations. Lesson 15 judges the accuracy claim over them.
DYNAMIC_RECIPES: dict[str, tuple[str, int]] = {
    "int8 per-tensor, 7-bit act. (default)": ("per-tensor weights", 7),
    "int8 per-tensor, 8-bit act.": ("per-tensor weights", 8),
    "int8 per-channel, 7-bit act.": ("per-channel weights", 7),
    "int8 per-channel, 8-bit act.": ("per-channel weights", 8),
}
BF16_STORED = "BF16 weights (stored)"


def dynamic_variants(model: nn.Module) -> dict[str, nn.Module]:
    """``model`` ("FP32"), a copy with its weights rounded to BF16 (``BF16_STORED``: stored in
    BF16 for half the bytes, computed in FP32 here, so the rounding is the only change) and one
    copy per recipe of ``DYNAMIC_RECIPES``."""
    out = {"FP32": model, BF16_STORED: cast_model(model, torch.bfloat16).float()}
    for name, (weights, bits) in DYNAMIC_RECIPES.items():
        out[name] = quantize_dynamic_int8(model, per_channel=weights == "per-channel weights",
                                          activation_bits=bits)
    return out


def recipe_sweep(differences: Mapping[str, Mapping[str, float]]) -> dict[str, dict[int, Estimate]]:
    """Each recipe's accuracy change (``diff_points`` and its ``diff_se``, by recipe name) as the
    series ``judging.judge_over`` takes: weight scales -> {activation bits: Estimate}."""
    sweep: dict[str, dict[int, Estimate]] = {}
    for name, (weights, bits) in DYNAMIC_RECIPES.items():
        if name in differences:
            d = differences[name]
            sweep.setdefault(weights, {})[bits] = Estimate(d["diff_points"], d["diff_se"])
    return sweep


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


def _float32_inputs(module, args):
    """The dynamic int8 kernels take FP32 activations: under BF16 autocast (mixed precision with
    int8, lesson 14) the layer before hands them BF16, so they are cast back on the way in."""
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def torchao_available() -> bool:
    return importlib.util.find_spec("torchao") is not None


def quantize_torchao_int8(model: nn.Module) -> nn.Module:
    """torchao's current API: ``quantize_(model, Int8DynamicActivationInt8WeightConfig())``
    on a copy. Raises ImportError when torchao is not installed (it is optional)."""
    if not torchao_available():
        raise ImportError("torchao is not installed (optional: pip install torchao)")
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    out = copy.deepcopy(model).cpu().eval()
    quantize_(out, Int8DynamicActivationInt8WeightConfig())
    return out


def cast_model(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """'Quantization to 16 bits': a copy with every floating tensor cast to ``dtype``."""
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"dtype must be float16, bfloat16 or float32, got {dtype}")
    return copy.deepcopy(model).to(dtype)


def count_quantized_linear(model: nn.Module) -> int:
    """Dynamically quantized ``Linear`` modules in ``model`` (not their packed-parameter
    holders, which ``modules()`` lists too): how many layers a conversion touched."""
    return sum(type(m).__name__ == "Linear" and "quantized" in type(m).__module__
               for m in model.modules())


_REASONS = {
    "int8": "nn.Linear -> DynamicQuantizedLinear: int8 weight, one fp32 scale",
    "embedding": "a lookup table, not a matmul; quantize_dynamic maps nn.Linear only",
    "in_proj": "a bare Parameter of MultiheadAttention, not an nn.Linear module",
    "out_proj": "NonDynamicallyQuantizableLinear: excluded on purpose, MHA's functional "
                "forward reads out_proj.weight as a plain tensor",
    "linear_fp": "nn.Linear weight, not quantized",
    "other": "norms and biases: tiny, and they need the precision",
}


def _qparam_bytes(wq: torch.Tensor) -> int:
    """Bytes of a quantized weight's scales and zero points: one of each per output row for a
    per-channel weight (the tensors themselves), 8 for a per-tensor one."""
    if wq.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        return sum(t.numel() * t.element_size()
                   for t in (wq.q_per_channel_scales(), wq.q_per_channel_zero_points()))
    return 8


def size_report(model: nn.Module) -> list[dict]:
    """Where the bytes are: one row per tensor group, with its dtype and why."""
    rows: dict[str, dict] = {}

    def add(group: str, dtype: torch.dtype, numel: int, nbytes: int) -> None:
        r = rows.setdefault(group, {"group": group, "dtype": str(dtype).replace("torch.", ""),
                                    "numel": 0, "bytes": 0, "why": _REASONS[group]})
        r["numel"] += numel
        r["bytes"] += nbytes

    for mod in model.modules():
        w = getattr(mod, "weight", None)
        if callable(w) and hasattr(mod, "_packed_params"):   # a DynamicQuantizedLinear
            wq = w()
            add("int8", wq.dtype, wq.numel(), wq.numel() * wq.element_size() + _qparam_bytes(wq))
            b = mod.bias()
            if b is not None:
                add("other", b.dtype, b.numel(), b.numel() * b.element_size())
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        if isinstance(owner, nn.Embedding):
            group = "embedding"
        elif leaf == "in_proj_weight":
            group = "in_proj"
        elif name.endswith("out_proj.weight"):
            group = "out_proj"
        elif p.dim() == 2 and isinstance(owner, nn.Linear):
            group = "int8" if p.dtype == torch.int8 else "linear_fp"
        else:
            group = "other"
        add(group, p.dtype, p.numel(), p.numel() * p.element_size())
    return list(rows.values())


