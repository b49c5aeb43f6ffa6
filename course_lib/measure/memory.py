"""Where training memory goes: parameter state against the activations autograd stores.

Training keeps, per parameter, the weight, its gradient and the optimizer's state (AdamW: two
moments; ``memory_per_parameter``). It also keeps, until ``backward``, every tensor the
forward pass saved for the gradient computation: the activations. Those are counted exactly
with ``torch.autograd.graph.saved_tensors_hooks``: each saved tensor's storage is counted once
(several ops save the same tensor), parameters are left out (they are counted as parameter
state). Deterministic: no timing, no allocator noise.
"""
from __future__ import annotations

import io
import math

import torch
from torch import nn

from course_lib.core.model import count_parameters
from course_lib.core.optimizers import STATE_PER_ELEMENT
from course_lib.core.precision import autocast

__all__ = ["saved_activation_bytes", "parameter_state_bytes", "growth_exponent", "memory_by_width",
           "memory_by_length", "fitted_exponents"]


def saved_activation_bytes(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, *,
                           autocast_dtype: torch.dtype | None = None) -> int:
    """Bytes of the tensors a training forward pass of ``model`` on (``ids``, ``mask``) saves
    for backward, each storage once, parameters excluded. The model is left as it was.

    ``autocast_dtype``: the forward runs under ``torch.amp.autocast`` with it (on ``ids``'s
    device type); the low-precision copies autocast makes of the weights are saved for backward
    too, and counted here, since they are not the parameters' own storage."""
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
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                autocast(ids.device, autocast_dtype):
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
        raise ValueError("need 0 < length_small < length_large, "
                         f"got {length_small}, {length_large}")
    return math.log(large / small) / math.log(length_large / length_small)


def memory_by_width(vocab_size: int, widths, *, batch: int, length: int, n_layers: int = 4,
                    heads: int = 4, optimizer: str = "adamw") -> list[dict]:
    """Parameter state against stored activations (SDPA attention) for the teacher's shape at
    other widths (``d_ff`` = 2 × width, ``heads`` fixed), training on ``batch`` × ``length``.

    Exact without running the big models: with the heads fixed, every tensor a forward pass
    saves is either proportional to batch × width or shared by the batch (ALiBi's bias), so the
    saved bytes are ``(a + b·width)·batch + c``; they are counted at widths 64 and 128, batch 1
    and 2, and the four counts fix a, b and c (``tests/test_activation_memory.py`` checks the
    formula against a direct count). Parameters are counted on the meta device."""
    from course_lib.core.model import build_model

    if batch < 1 or length < 1 or not widths or min(widths) < 1:
        raise ValueError(f"batch, length and widths must be >= 1, got {batch}, {length}, {widths}")
    counts = {}
    for w in (64, 128):
        m = build_model(vocab_size, preset="teacher", seed=0, d_model=w, d_ff=2 * w,
                        n_heads=heads, n_layers=n_layers, max_len=max(512, length))
        for b in (1, 2):
            ids = torch.randint(2, vocab_size, (b, length),
                                generator=torch.Generator().manual_seed(0))
            counts[w, b] = saved_activation_bytes(m, ids, torch.ones_like(ids, dtype=torch.bool))
    per_batch = {w: counts[w, 2] - counts[w, 1] for w in (64, 128)}    # a + b·width
    shared = counts[64, 1] - per_batch[64]                               # c
    slope = (per_batch[128] - per_batch[64]) / 64
    rows = []
    for w in widths:
        if w % heads or (w // heads) % 2:
            raise ValueError(f"widths must be multiples of {2 * heads} "
                             f"({heads} heads of even size), got {w}")
        with torch.device("meta"):
            params = count_parameters(build_model(vocab_size, preset="teacher", d_model=w,
                                                  d_ff=2 * w, n_heads=heads, n_layers=n_layers))
        acts = (per_batch[64] + slope * (w - 64)) * batch + shared
        state = params * memory_per_parameter(optimizer, precision="fp32")["total"]
        rows.append({"width": w, "parameters": params, "parameter_state_bytes": state,
                     "activation_bytes": int(acts), "ratio": state / acts})
    return rows


def memory_by_length(model_or_cfg, lengths, *, batch: int) -> dict[int, int]:
    """Bytes of the activations a training forward pass of the model's shape stores on
    ``batch`` reviews of each length (random tokens, no padding), exact.

    Counted at batch 1 and 2 and extrapolated: everything a forward pass saves is either per
    review or shared by the batch (the ALiBi bias), so bytes = per_review · batch + shared,
    and a batch of 32 long reviews is counted without allocating it. ``model_or_cfg``: a model
    or its ``EncoderConfig``; the shape is rebuilt with ``max_len`` covering the lengths."""
    from dataclasses import replace

    from course_lib.core.model import EncoderClassifier

    cfg = getattr(model_or_cfg, "cfg", model_or_cfg)
    if batch < 1 or not lengths or min(lengths) < 1:
        raise ValueError(f"batch and lengths must be >= 1, got {batch}, {lengths}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = EncoderClassifier(replace(cfg, max_len=max(cfg.max_len, *lengths), dropout=0.0))
    out = {}
    gen = torch.Generator().manual_seed(0)
    for n in lengths:
        count = {}
        for b in (1, 2):
            ids = torch.randint(2, cfg.vocab_size, (b, n), generator=gen)
            count[b] = saved_activation_bytes(model, ids, torch.ones_like(ids, dtype=torch.bool))
        per_review, shared = count[2] - count[1], 2 * count[1] - count[2]
        out[int(n)] = per_review * batch + shared
    return out


def fitted_exponents(bytes_by_length: dict[int, int]) -> dict[int, float]:
    """``k`` in ``memory ∝ length^k`` at each length, from the curve the counts follow: a forward
    pass saves ``c + a·L + b·L²`` bytes at length ``L`` (a term per token, the ``L × L`` scores
    of attention as written, a constant), so the counts fix ``a``, ``b`` and ``c``, and the local
    exponent is ``d ln M / d ln L = (a·L + 2·b·L²) / (c + a·L + b·L²)``: 1 for linear growth, 2
    for quadratic. (A secant between two lengths mixes the two ends: from 256 to 512 tokens it
    reads the growth below 512.) Needs 3 lengths or more; with more than 3, counts off that
    curve are refused (3 counts fix the curve whatever they are)."""
    import numpy as np

    ls = sorted(bytes_by_length)
    if len(ls) < 3 or ls[0] < 1:
        raise ValueError(f"need 3 or more positive lengths, got {ls}")
    x = np.array(ls, dtype=np.float64)
    y = np.array([bytes_by_length[n] for n in ls], dtype=np.float64)
    design = np.stack([np.ones_like(x), x, x * x], axis=1)
    (c, a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    if np.abs(design @ np.array([c, a, b]) - y).max() > 1e-6 * y.max():
        raise ValueError("these counts are not c + a·L + b·L² (exact counts of a forward pass "
                         "are; a measured peak is not)")
    return {n: float((a * n + 2 * b * n * n) / (c + a * n + b * n * n)) for n in ls}


def memory_per_parameter(name: str, *, precision: str = "fp32") -> dict[str, int]:
    """Bytes per parameter for weights, gradients, an fp32 master copy and optimizer states.

    ``precision="fp32"``: everything fp32 (this is also what ``torch.autocast`` keeps: it casts
    on the fly and saves activation memory, not these). ``"mixed"``: 16-bit weights and
    gradients plus an fp32 master copy, the ZeRO paper's accounting.
    """
    if name not in STATE_PER_ELEMENT:   # Adafactor's state depends on the shapes: state_values
        raise ValueError(f"name must be one of {tuple(STATE_PER_ELEMENT)}, got {name!r}")
    if precision not in ("fp32", "mixed"):
        raise ValueError(f"precision must be 'fp32' or 'mixed', got {precision!r}")
    half = precision == "mixed"
    row = {"weights": 2 if half else 4, "gradients": 2 if half else 4,
           "master": 4 if half else 0, "states": 4 * STATE_PER_ELEMENT[name]}
    row["total"] = sum(row.values())
    return row


def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``: what a checkpoint really costs."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes
