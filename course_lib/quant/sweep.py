"""Where int8 and BF16 pay: FP32 against ``quantize_dynamic`` and a BF16 cast, over width and
batch (lesson 07).

Dynamic int8 quantizes each batch's activations on the fly, multiplies in int8 and rescales the
result. The int8 matmul is cheaper, the quantize and rescale steps are extra, and both scale
differently: small matrices and single rows are dominated by the extra steps, wide matrices
and big batches by the matmul. Which width is "wide enough" depends on the CPU (its int8
instructions: AVX-512 VNNI, AMX), so the course measures it instead of quoting it.

BF16 (the block and its input cast) halves the bytes every matmul reads; whether it is also
faster depends on BF16 matrix instructions (AVX-512 BF16, AMX) and on the matrices being large
enough for the multiply to outweigh the conversions.

The block timed is a feed-forward block of width ``d`` at the course model's ratio
(``d -> 2d -> d``, GELU), random weights (speed does not depend on what the weights learned),
on ``batch x tokens`` rows; FP32 and each format are timed interleaved (``bench.compare``).
"""
from __future__ import annotations

import math

from collections.abc import Sequence

import torch
from torch import nn

from course_lib.measure import bench
from course_lib.quant.dynamic import quantize_dynamic_int8
from course_lib.measure.verdicts import Rule, speedup

__all__ = ["FORMATS", "feed_forward_block", "speedups", "first_width_holding", "as_sweep",
           "sweep_figure", "evidence", "from_evidence"]

FORMATS = ("int8", "bf16")   # dynamic int8 (quantize_dynamic), and the BF16 cast


def feed_forward_block(width: int, *, seed: int = 0) -> nn.Module:
    """``Linear(width, 2 width) -> GELU -> Linear(2 width, width)`` with seeded weights."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                             nn.Linear(2 * width, width)).eval()


def speedups(widths: Sequence[int], batches: Sequence[int], *, formats: Sequence[str] = FORMATS,
             tokens: int = 64, warmup: int = 2, repeats: int = 5, seed: int = 0) -> list[dict]:
    """One row per (format, width, batch): FP32 and the format's median milliseconds (CPU) and
    the speed-up (geometric mean of the per-repeat ratios FP32 time / format time, above 1
    means the format is faster) with its standard error and degrees of freedom. All formats of
    a (width, batch) are timed in one interleaved loop with FP32."""
    if not widths or not batches:
        raise ValueError("widths and batches must each hold at least one value")
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    if not formats or any(f not in FORMATS for f in formats):
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {formats!r}")
    rows = []
    gen = torch.Generator().manual_seed(seed)
    for width in widths:
        fp32 = feed_forward_block(width, seed=seed)
        low = {f: quantize_dynamic_int8(fp32) if f == "int8" else
               feed_forward_block(width, seed=seed).to(torch.bfloat16) for f in formats}
        for batch in batches:
            if batch < 1:
                raise ValueError(f"batches must be >= 1, got {batch}")
            x = torch.randn(batch, tokens, width, generator=gen)
            calls = {"fp32": bench.forward_call(fp32, x)}
            calls |= {f: bench.forward_call(m, x.to(torch.bfloat16) if f == "bf16" else x)
                      for f, m in low.items()}
            res = bench.compare(calls, warmup=warmup, repeats=repeats, device="cpu")
            for f in formats:
                ratio = speedup(res["fp32"]["timing"].samples, res[f]["timing"].samples)
                rows.append({"format": f, "width": width, "batch": batch,
                             "fp32_ms": res["fp32"]["timing"].median * 1e3,
                             "low_ms": res[f]["timing"].median * 1e3,
                             "speedup": ratio.value, "se": ratio.se, "dof": ratio.dof})
    return rows


def first_width_holding(rows: list[dict], *, batch: int, rule: Rule,
                        format: str = "int8") -> int | None:
    """The smallest width from which ``rule`` holds on ``format``'s speed-up at ``batch`` (its
    interval clears the threshold) at that width and every wider one measured; None if the
    widest does not hold. A width whose interval straddles the threshold stops the run."""
    at = sorted((r["width"], r) for r in rows if r["batch"] == batch and r["format"] == format)
    if not at:
        raise ValueError(f"no {format} rows measured at batch {batch}")
    found = None
    for width, r in reversed(at):
        if rule.judge(r["speedup"], r["se"], r["dof"]) != "holds":
            break
        found = width
    return found


def as_sweep(rows: list[dict], *, formats: Sequence[str], names: dict[str, str]) -> dict:
    """``speedups``' rows as ``judging.judge_over`` takes them: one series per format of
    ``formats`` and batch, ``"{names[format]} block, batch {b}"``, mapping each width to its
    speed-up (a ``Ratio`` with its error and degrees of freedom)."""
    from course_lib.measure.verdicts import Ratio

    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ValueError(f"formats must be among {FORMATS}, got {sorted(unknown)}")
    out: dict[str, dict[int, Ratio]] = {}
    for r in sorted(rows, key=lambda r: (FORMATS.index(r["format"]), r["batch"], r["width"])):
        if r["format"] in formats:
            out.setdefault(f"{names[r['format']]} block, batch {r['batch']}", {})[r["width"]] = (
                Ratio(r["speedup"], r["se"], r["dof"]))
    return out


def sweep_figure(rows: list[dict], *, names: dict[str, str], threshold: float,
                 model_width: int, model_speedup: float | None = None):
    """``speedups``' rows drawn over width, one line per format and batch with its 95%
    interval (log-log), the claim's bar, the course model's width and, when given, its own
    int8 speed-up at batch 32 as a point; y ticks only inside the data's range."""
    from course_lib.measure.verdicts import Ratio
    from course_lib.ui.plots import new_figure, spaced_log_ticks

    fig, ax = new_figure(width=6.5)
    for f, ls in zip(FORMATS, ("-", "--")):
        for b in sorted({r["batch"] for r in rows if r["format"] == f}):
            at = sorted((r for r in rows if r["batch"] == b and r["format"] == f),
                        key=lambda r: r["width"])
            errs = [Ratio(r["speedup"], r["se"], r["dof"]).errors if math.isfinite(r["se"])
                    else (0.0, 0.0) for r in at]
            ax.errorbar([r["width"] for r in at], [r["speedup"] for r in at], capsize=3,
                        fmt="o" + ls, label=f"{names[f]}, batch {b} × 64 tokens",
                        yerr=[[e[0] for e in errs], [e[1] for e in errs]])
    ax.axhline(threshold, color="k", ls=":", lw=1, label=f"the claim's bar ({threshold:g}×)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(model_width, color="grey", ls="--", lw=1,
               label=f"the course model's width ({model_width})")
    if model_speedup is not None:
        ax.plot([model_width], [model_speedup], "*", ms=12, color="k",
                label="the course model, int8, batch 32")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ticks = spaced_log_ticks(lo, hi)
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter("")
    ax.set(xlabel="width d of the feed-forward block (d → 2d → d)",
           ylabel="speed-up over FP32 (×, CPU, log scale)",
           title="int8 and BF16 against FP32, by width (95% intervals)")
    ax.legend(frameon=False, fontsize=7)
    return fig


def evidence(widths: Sequence[int], batches: Sequence[int], *, rounds: int,
             formats: Sequence[str] = FORMATS, repeats: int = 5, warmup: int = 3,
             log=print) -> dict:
    """The evidence lesson 07's throughput verdict rests on: ``rounds`` whole sweeps
    (``speedups``), one after another, so that a load that comes and goes between runs of the
    lesson shows in the spread over rounds. Returns the recipe and every round's rows."""
    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 (a spread needs two), got {rounds}")
    out = {"recipe": {"widths": list(widths), "batches": list(batches), "formats": list(formats),
                      "repeats": repeats, "warmup": warmup, "tokens": 64,
                      "threads": torch.get_num_threads()}, "rounds": []}
    for i in range(rounds):
        out["rounds"].append(speedups(widths, batches, formats=formats, warmup=warmup,
                                      repeats=repeats, seed=0))
        log(f"round {i + 1}/{rounds}: " + ", ".join(
            f"{r['format']} w{r['width']} b{r['batch']} {r['speedup']:.2f}x"
            for r in out["rounds"][-1]))
    return out


def from_evidence(ev: dict) -> list[dict]:
    """The evidence's rows, one per (format, width, batch), each speed-up the geometric mean of
    its rounds (``verdicts.across_rounds``: the spread between runs is the error)."""
    from course_lib.measure.verdicts import across_rounds

    key = lambda r: (r["format"], r["width"], r["batch"])   # noqa: E731
    combined = across_rounds([{key(r): r["speedup"] for r in rows} for rows in ev["rounds"]])
    return [{"format": f, "width": w, "batch": b, "speedup": e.value, "se": e.se, "dof": e.dof,
             "rounds": len(ev["rounds"])} for (f, w, b), e in combined.items()]
