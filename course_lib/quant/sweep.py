"""Where dynamic int8 pays: FP32 against ``quantize_dynamic`` over width and batch (lesson 07).

Dynamic int8 quantizes each batch's activations on the fly, multiplies in int8 and rescales the
result. The int8 matmul is cheaper, the quantize and rescale steps are extra, and both scale
differently: small matrices and single rows are dominated by the extra steps, wide matrices
and big batches by the matmul. Which width is "wide enough" depends on the CPU (its int8
instructions: AVX-512 VNNI, AMX), so the course measures it instead of quoting it.

The block timed is a feed-forward block of width ``d`` at the course model's ratio
(``d -> 2d -> d``, GELU), random weights (speed does not depend on what the weights learned),
on ``batch x tokens`` rows; FP32 and int8 are timed interleaved (``bench.compare``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from course_lib.measure import bench
from course_lib.quant.int8 import quantize_dynamic_int8
from course_lib.measure.verdicts import Rule, speedup

__all__ = ["feed_forward_block", "int8_speedups", "first_width_holding"]


def feed_forward_block(width: int, *, seed: int = 0) -> nn.Module:
    """``Linear(width, 2 width) -> GELU -> Linear(2 width, width)`` with seeded weights."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                             nn.Linear(2 * width, width)).eval()


def int8_speedups(widths: Sequence[int], batches: Sequence[int], *, tokens: int = 64,
                  warmup: int = 2, repeats: int = 5, seed: int = 0) -> list[dict]:
    """One row per (width, batch): FP32 and int8 median milliseconds (CPU) and the speed-up
    (geometric mean of the per-repeat ratios FP32 time / int8 time, above 1 means int8 is faster) with
    its standard error and degrees of freedom."""
    if not widths or not batches:
        raise ValueError("widths and batches must each hold at least one value")
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    rows = []
    gen = torch.Generator().manual_seed(seed)
    for width in widths:
        fp32 = feed_forward_block(width, seed=seed)
        int8 = quantize_dynamic_int8(fp32)
        for batch in batches:
            if batch < 1:
                raise ValueError(f"batches must be >= 1, got {batch}")
            x = torch.randn(batch, tokens, width, generator=gen)
            res = bench.compare({"fp32": bench.forward_call(fp32, x),
                                 "int8": bench.forward_call(int8, x)}, warmup=warmup,
                                repeats=repeats, device="cpu")
            ratio = speedup(res["fp32"]["timing"].samples, res["int8"]["timing"].samples)
            rows.append({"width": width, "batch": batch,
                         "fp32_ms": res["fp32"]["timing"].median * 1e3,
                         "int8_ms": res["int8"]["timing"].median * 1e3,
                         "speedup": ratio.value, "se": ratio.se, "dof": ratio.dof})
    return rows


def first_width_holding(rows: list[dict], *, batch: int, rule: Rule) -> int | None:
    """The smallest width from which ``rule`` holds on the speed-up at ``batch`` (its interval
    clears the threshold) at that width and every wider one measured; None if the widest does
    not hold. A width whose interval straddles the threshold stops the run: not proven."""
    at = sorted((r["width"], r) for r in rows if r["batch"] == batch)
    if not at:
        raise ValueError(f"no rows measured at batch {batch}")
    found = None
    for width, r in reversed(at):
        if rule.judge(r["speedup"], r["se"], r["dof"]) != "holds":
            break
        found = width
    return found
