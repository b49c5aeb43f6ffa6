"""The course's one precision rule: which autocast dtype to train in, and the gradient scaler.

``choose_precision`` is the only place that decides: BF16 where the device has BF16
instructions (a CUDA GPU of compute capability 8.0 or later; a CPU with avx512_bf16 or AMX),
FP16 with a ``GradScaler`` on older CUDA GPUs (7.x, e.g. Colab's T4: FP16 gradients underflow
without one), FP32 everywhere else (including Apple's MPS, where the course does not scale
gradients). ``train``'s default ``autocast_dtype="auto"`` follows it (``training_autocast``);
whether the chosen format is faster on a given machine is a measurement (lesson 04).

``autocast(device, dtype)`` is the context every forward pass runs under (``dtype`` None: no
autocast, FP32), as in PyTorch's "Automatic Mixed Precision" recipe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.core.device import capabilities

__all__ = ["DTYPES", "Precision", "precision", "precision_of", "choose_precision", "amp_dtype",
           "training_autocast", "autocast", "make_scaler"]

DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16,
                                         "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    name: str                   # "fp32", "bf16" or "fp16"
    dtype: torch.dtype | None   # autocast dtype; None = no autocast
    use_scaler: bool            # fp16 needs a GradScaler
    reason: str = ""


def precision(name: str, *, parameter: str = "precision_name") -> Precision:
    """The recipe for one of ``DTYPES``: FP16 always comes with a gradient scaler. A bad name
    is reported under ``parameter``, the caller's argument that carried it."""
    if name not in DTYPES:
        raise ValueError(f"{parameter} must be one of {list(DTYPES)}, got {name!r}")
    return Precision(name, DTYPES[name], name == "fp16")


def precision_of(dtype: torch.dtype | None) -> str:
    """The name in ``DTYPES`` of an autocast dtype (None: "fp32")."""
    names = {v: k for k, v in DTYPES.items()}
    if dtype not in names:
        raise ValueError(f"dtype must be one of {list(names)}, got {dtype!r}")
    return names[dtype]


def choose_precision(device: torch.device | str) -> Precision:
    """The rule (see the module's docstring), with the reason it gives."""
    device = torch.device(device)
    caps = capabilities(device)
    if device.type in ("cuda", "cpu") and caps.bf16_fast:
        return Precision("bf16", torch.bfloat16, False, f"{device.type} has bf16 instructions")
    if device.type == "cuda" and caps.fp16_fast:
        return Precision("fp16", torch.float16, True,
                         "GPU without bf16 tensor cores: fp16 with a GradScaler")
    return Precision("fp32", None, False, f"no fast 16-bit training on {device.type} here")


def amp_dtype(device: torch.device | str | None = None) -> torch.dtype | None:
    """The autocast dtype of ``choose_precision`` (None: FP32) on ``device`` (default: the
    device ``core.device.pick_device`` chooses)."""
    from course_lib.core.device import pick_device

    return choose_precision(device if device is not None else pick_device()).dtype


def training_autocast(device: torch.device | str,
                      autocast_dtype: torch.dtype | None | str = "auto") -> torch.dtype | None:
    """The autocast dtype ``train`` uses: ``"auto"`` is ``choose_precision``'s; None (FP32) or a
    dtype is taken as given."""
    if autocast_dtype == "auto":
        return amp_dtype(device)
    if autocast_dtype is not None and not isinstance(autocast_dtype, torch.dtype):
        raise ValueError(f"autocast_dtype must be 'auto', None or a torch.dtype, "
                         f"got {autocast_dtype!r}")
    return autocast_dtype


def autocast(device: torch.device | str, dtype: torch.dtype | None) -> torch.autocast:
    """``torch.autocast`` to ``dtype`` on ``device``'s kind; disabled (FP32) when None."""
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype or torch.float32,
                          enabled=dtype is not None)


def make_scaler(device: torch.device | str, *, enabled: bool = True, init_scale: float = 2.0**16,
                growth_interval: int = 2000) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for ``device`` (works on CPU too)."""
    if not init_scale > 0 or not math.isfinite(init_scale):
        raise ValueError(f"init_scale must be a finite number > 0, got {init_scale}")
    if growth_interval < 1:
        raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
    return torch.amp.GradScaler(torch.device(device).type, init_scale=init_scale,
                                growth_interval=growth_interval, enabled=enabled)
