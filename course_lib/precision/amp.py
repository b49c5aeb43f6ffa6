"""Automatic mixed precision done right: autocast, the gradient scaler, and what they did.

Follows PyTorch's "Automatic Mixed Precision" recipe and ``torch.amp`` docs: the forward pass
and the loss run under ``torch.amp.autocast(device_type, dtype)`` (matmuls in low precision,
reductions and normalisations kept in FP32 per autocast's op lists); with FP16 the loss is
multiplied by a scale before ``backward`` (``torch.amp.GradScaler``, Micikevicius et al. 2018,
"Mixed Precision Training") so small gradients do not underflow; the scaler unscales before
clipping, skips any step whose gradients hold inf/NaN and halves the scale, and doubles it after
``growth_interval`` clean steps. The ``torch.cuda.amp.*`` spellings are deprecated.

The precision rule is the course's one (``core.precision.choose_precision``): BF16 where the
hardware has BF16 instructions (CUDA compute capability >= 8, CPUs with avx512_bf16 or AMX),
FP16 with a scaler on other CUDA GPUs (Colab's T4), FP32 otherwise.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from course_lib.core.model import Attention
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import evaluate
from course_lib.core.precision import autocast, make_scaler, precision
from course_lib.core.task import to_device


@dataclass
class AmpHistory:
    precision: str
    loss: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)     # the scaler's scale after each step
    skipped: list[bool] = field(default_factory=list)    # steps the scaler skipped
    step_seconds: list[float] = field(default_factory=list)

    @property
    def skipped_steps(self) -> int:
        return sum(self.skipped)


def amp_train(model: nn.Module, loader: Iterable[dict], *, precision_name: str = "fp32",
              device: torch.device | str = "cpu", steps: int = 50, lr: float = 1e-3,
              task: str = "classification", init_scale: float = 2.0**16,
              growth_interval: int = 2000, inject_inf_at: Iterable[int] = (),
              warmup_frac: float = 0.05, seed: int = 0,
              callback: Callable[[int, float], None] | None = None) -> AmpHistory:
    """Train for ``steps`` steps (cycling over ``loader``) in one precision, recording the
    loss, the scaler's scale and the skipped steps: the course's loop (``core.train.train``)
    with the recipe of ``precision_name`` and a scaler whose start and growth you choose.
    ``inject_inf_at``: step numbers whose gradients get an inf (to watch the scaler react)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    prec = precision(precision_name)
    scaler = make_scaler(device, init_scale=init_scale, growth_interval=growth_interval) \
        if prec.use_scaler else None
    cfg = TrainConfig(epochs=math.ceil(steps / max(1, len(loader))), lr=lr, task=task,
                      warmup_frac=warmup_frac, seed=seed)
    hist = train(model, loader, cfg=cfg, device=device, autocast_dtype=prec.dtype, scaler=scaler,
                 max_steps=steps, inject_inf_at=inject_inf_at, progress=False,
                 callback=(None if callback is None
                           else (lambda step, loss, _: callback(step, loss))))
    return AmpHistory(prec.name, loss=hist.step_loss, scale=hist.step_scale,
                      skipped=hist.step_skipped, step_seconds=hist.step_seconds)


def evaluate_amp(model: nn.Module, loader, *, device: torch.device | str = "cpu",
                 task: str = "classification", precision_name: str = "fp32") -> dict[str, float]:
    """``course_lib.core.evaluate.evaluate`` under the autocast dtype of ``precision_name``."""
    dtype = precision(precision_name).dtype
    return evaluate(model, loader, device=device, task=task, autocast_dtype=dtype)


def layer_output_dtypes(model: nn.Module, batch: dict, *, device: torch.device | str,
                        dtype: torch.dtype | None) -> list[tuple[str, str, str]]:
    """(module name, module type, output dtype) of every leaf module (and attention) in a
    training-mode forward pass under autocast, followed by the loss."""
    device = torch.device(device)
    rows: list[tuple[str, str, str]] = []
    hooks = []
    for name, mod in model.named_modules():
        if name and (not list(mod.children())
                     or isinstance(mod, (nn.MultiheadAttention, Attention))):
            def hook(m, _inp, out, name=name):
                t = out[0] if isinstance(out, tuple) else out
                if torch.is_tensor(t):
                    rows.append((name, type(m).__name__, str(t.dtype).replace("torch.", "")))
            hooks.append(mod.register_forward_hook(hook))
    model.to(device).train()
    batch = to_device(batch, device)
    try:
        with autocast(device, dtype):
            out = model(batch["input_ids"], batch["attention_mask"])
            loss = nn.functional.cross_entropy(out, batch["labels"]) if out.dim() == 2 else \
                nn.functional.mse_loss(out, batch["ratings"])
    finally:
        for h in hooks:
            h.remove()
    rows.append(("loss", "cross_entropy" if out.dim() == 2 else "mse_loss",
                 str(loss.dtype).replace("torch.", "")))
    return rows


def op_output_dtypes(device: torch.device | str, dtype: torch.dtype,
                     *, seed: int = 0) -> list[tuple[str, str, str]]:
    """(operation, output dtype from FP32 inputs, output dtype from ``dtype`` inputs) under
    autocast on ``device``. Both columns are needed: an op that autocast forces to FP32 turns
    low-precision inputs into FP32, while an op autocast leaves alone keeps its inputs' dtype;
    from FP32 inputs alone the two look the same."""
    device = torch.device(device)
    g = torch.Generator().manual_seed(seed)
    base = (torch.randn(8, 16, generator=g), torch.randn(16, 16, generator=g))
    y = torch.randint(0, 16, (8,), generator=g).to(device)
    F = nn.functional

    def table(a, w):
        ops = {"matmul": lambda: a @ w, "linear": lambda: F.linear(a, w),
               "bmm": lambda: torch.bmm(a[None], w[None]),
               "softmax": lambda: torch.softmax(a, -1),
               "log_softmax": lambda: F.log_softmax(a, -1),
               "layer_norm": lambda: F.layer_norm(a, (16,)),
               "cross_entropy": lambda: F.cross_entropy(a, y),
               "mse_loss": lambda: F.mse_loss(a, a), "exp": lambda: a.exp(),
               "sum": lambda: a.sum(), "add": lambda: a + a, "relu": lambda: F.relu(a)}
        with autocast(device, dtype):
            return {k: str(f().dtype).replace("torch.", "") for k, f in ops.items()}

    from32 = table(*(t.to(device) for t in base))
    fromlow = table(*(t.to(device, dtype) for t in base))
    return [(k, from32[k], fromlow[k]) for k in from32]


def autocast_policy(from32: str, fromlow: str, low: str) -> str:
    """What autocast does with an operation, read from ``op_output_dtypes``'s two columns (the
    output dtype from FP32 inputs and from ``low`` inputs, e.g. "bfloat16")."""
    if from32 == low:
        return f"casts to {low}"
    return "forces FP32" if fromlow == "float32" else "follows its inputs"
