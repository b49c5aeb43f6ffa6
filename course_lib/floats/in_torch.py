"""The float formats of ``course_lib.floats.formats`` as torch stores and computes them (lesson 03):
torch's own answers to compare the exact derivation with (``check_finfo``,
``torch_e4m3_overflow``), and tensors rounded to a format or summed in it (``simulate_tf32``,
``round_tensor``, ``running_sum``).
"""
from __future__ import annotations

import math

import torch

from course_lib.floats.formats import FloatFormat, get_format

__all__ = ["check_finfo", "torch_e4m3_overflow", "simulate_tf32", "round_tensor",
           "running_sum", "accumulator_probe", "stochastic_round_bf16", "repeated_updates"]


def check_finfo(fmt: str | FloatFormat) -> dict[str, tuple[float, float]]:
    """``{quantity: (derived, torch)}`` for a format torch stores (ValueError for tf32).

    torch.finfo has no smallest subnormal; it is read from the bit pattern 0...01 instead.
    """
    f = get_format(fmt)
    if f.dtype is None:
        raise ValueError(f"fmt must have a torch dtype; {f.name} has none ({f.note})")
    fi = torch.finfo(f.dtype)
    one = torch.tensor([1], dtype=_int_dtype(f.bits)).view(f.dtype).float().item()
    return {"bits": (f.bits, fi.bits), "eps": (f.eps, fi.eps), "max": (f.max, fi.max),
            "smallest normal": (f.smallest_normal, fi.smallest_normal),
            "resolution": (f.resolution, fi.resolution),
            "smallest subnormal": (f.smallest_subnormal, one if f.bits < 64 else
                                   torch.tensor([1], dtype=torch.int64).view(torch.float64).item())}


def _int_dtype(bits: int) -> torch.dtype:
    return {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]


def torch_e4m3_overflow() -> str:
    """What the installed torch makes of a finite FP32 value beyond E4M3's range (1000.0):
    "saturates" (+-448, OCP's saturating mode, like ``encode``) or "nan" (non-saturating)."""
    out = float(torch.tensor([1000.0]).to(torch.float8_e4m3fn).float().item())
    if out == 448.0:
        return "saturates"
    if math.isnan(out):
        return "nan"
    raise RuntimeError(f"torch cast 1000.0 to float8_e4m3fn as {out}: neither OCP mode")


def simulate_tf32(x: torch.Tensor) -> torch.Tensor:
    """FP32 values rounded (nearest, ties to even) to TF32's 10 mantissa bits, kept in FP32."""
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    bits = x.view(torch.int32)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + lsb) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def round_tensor(x: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """A float tensor rounded to ``fmt`` and returned in FP32 (FP64 for fp64)."""
    f = get_format(fmt)
    if f.name == "tf32":
        return simulate_tf32(x.float())
    out = torch.float64 if f.name == "fp64" else torch.float32
    return x.to(f.dtype).to(out)


def running_sum(values: torch.Tensor, fmt: str | FloatFormat) -> torch.Tensor:
    """Sum ``values`` one by one with an accumulator stored in ``fmt`` (every partial sum).

    This is what a naive low-precision loop does; matmul kernels instead keep an FP32
    accumulator. Returns the partial sums in FP32 (FP64 for fp64).
    """
    f = get_format(fmt)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"values must be a non-empty 1-d tensor, got shape {tuple(values.shape)}")
    v = round_tensor(values, f).tolist()
    acc = torch.zeros((), dtype=torch.float64)
    out = torch.empty(len(v), dtype=torch.float64)
    for i, x in enumerate(v):   # each partial sum rounded to fmt, as a loop in fmt would
        acc = round_tensor((acc + x).reshape(1), f)[0].double()
        out[i] = acc
    return out if f.name == "fp64" else out.float()


def accumulator_probe(*, n: int = 4096, trials: int = 20, device: torch.device | str = "cpu",
                      generator: torch.Generator) -> dict:
    """Which accumulator torch's FP16 dot product uses on ``device``, decided against an FP64
    reference: ``trials`` pairs of random FP16 vectors of ``n`` values (normal, so partial sums
    are rarely exact, unlike a sum of ones), their dot product by torch (``x @ y`` in FP16), and
    three hypotheses for it, each rounded to FP16 at the end as torch's result is: an FP32 (or
    wider) accumulator (the FP64 dot of the FP16 values: an FP32 sum of 4,096 terms is off it by
    far less than an FP16 step, so at most half a step after the final rounding, with an exact
    match in almost every trial), an FP16 running sum (every product and
    partial sum rounded to FP16) and an FP16 pairwise sum (a tree, rounded at every level).
    Returns, per hypothesis, in how many trials it equals torch's result exactly, and each
    one's (and torch's) mean error against the FP64 reference, in units of FP16's relative
    precision (``eps × |reference|``: 1 is about one FP16 step)."""
    if n < 2 or trials < 1:
        raise ValueError(f"n must be >= 2 and trials >= 1, got n={n}, trials={trials}")
    names = ("fp32 accumulator", "fp16 running sum", "fp16 pairwise sum")
    hits = dict.fromkeys(("torch", *names), 0)
    err = dict.fromkeys(("torch", *names), 0.0)
    for _ in range(trials):
        x = torch.randn(n, generator=generator).half()
        y = torch.randn(n, generator=generator).half()
        ref = float((x.double() * y.double()).sum())
        prods = (x.float() * y.float()).half()               # each product rounded to FP16
        pair = prods
        while pair.numel() > 1:                              # a tree, FP16 at every level
            if pair.numel() % 2:
                pair = torch.cat([pair, pair.new_zeros(1)])
            pair = (pair[0::2].float() + pair[1::2].float()).half()
        got = {"torch": float((x.to(device) @ y.to(device)).cpu()),
               "fp32 accumulator": float(torch.tensor(ref).half()),
               "fp16 running sum": float(running_sum(prods.float(), "fp16")[-1]),
               "fp16 pairwise sum": float(pair[0])}
        step = float(torch.finfo(torch.float16).eps) * max(abs(ref), 2.0 ** -14)
        for k, v in got.items():
            hits[k] += v == got["torch"]
            err[k] += abs(v - ref) / step / trials
    return {"trials": trials, "n": n, "matches": {k: hits[k] for k in names},
            "error_in_steps": err}


def gradient_magnitudes(model: torch.nn.Module, loader, *, batches: int, loss_fn) -> torch.Tensor:
    """|gradient| of every parameter, over the first ``batches`` batches of ``loader`` (one
    backward each, from zeroed gradients; training mode), flattened, exact zeros dropped:
    the values an FP16 gradient would have to represent (lesson 03's histogram)."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    was_training = model.training
    model.train()
    grads = []
    try:
        for i, batch in enumerate(loader):
            if i >= batches:
                break
            params = [p for p in model.parameters() if p.requires_grad]
            got = torch.autograd.grad(loss_fn(model, batch), params, allow_unused=True)
            grads.append(torch.cat([g.flatten() for g in got if g is not None]))
    finally:
        model.train(was_training)
    if not grads:
        raise ValueError("loader yielded no batch")
    g = torch.cat(grads).abs()
    return g[g > 0]


def stochastic_round_bf16(x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
    """FP32 ``x`` rounded to BF16 *stochastically*: up or down to a neighbouring BF16 value with
    probabilities that make the result exact on average (E[round(x)] = x).

    BF16 is FP32's top 16 bits. Adding a uniform random integer in [0, 2^16) to the 32-bit
    pattern and dropping the low 16 bits rounds up exactly when the random number exceeds the
    distance to the next BF16 value: with the probability the distance implies. Finite inputs
    only (the sign is carried by the bit pattern, so negatives work the same way)."""
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, generator=generator, dtype=torch.int32)
    rounded = (bits + noise) & ~0xFFFF           # two's complement: ~0xFFFF keeps the top 16 bits
    return rounded.view(torch.float32).to(torch.bfloat16)


def repeated_updates(start: float, update: float, steps: int, *, generator: torch.Generator
                     ) -> dict[str, float]:
    """``start`` + ``update``, ``steps`` times, with the weight kept in FP32, in BF16 (round to
    nearest, what ``w.add_(u)`` does on a BF16 tensor) and in BF16 with stochastic rounding.
    The demonstration of why mixed precision keeps FP32 master weights: an update smaller
    than half BF16's gap at ``start`` is rounded away every time."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    w32 = torch.tensor(start, dtype=torch.float32)
    w16 = torch.tensor(start, dtype=torch.bfloat16)
    wsr = torch.tensor(start, dtype=torch.bfloat16)
    u = torch.tensor(update, dtype=torch.float32)
    for _ in range(steps):
        w32 += u
        w16 += u.to(torch.bfloat16)
        wsr = stochastic_round_bf16(wsr.float() + u, generator=generator)
    return {"fp32": w32.item(), "bf16": w16.item(), "bf16_stochastic": wsr.item(),
            "exact": start + steps * update}
