"""PyTorch's int8 paths for the course model: dynamic int8 ``Linear`` modules, their recipes
(weight scales per tensor or per channel, 7- or 8-bit activations), torchao's current API, the
16-bit casts beside them, and where a quantized model's bytes are.

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
from collections.abc import Mapping

import torch
from torch import nn

from course_lib.measure.verdicts import Estimate


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
