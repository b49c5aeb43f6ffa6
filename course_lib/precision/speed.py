"""Where 16-bit training pays: step time of FP32, BF16 and FP16 autocast against batch size.

A training step of a small model on a small batch is bound by kernel launches and by the work
autocast leaves in FP32 (normalisations, the loss, the optimizer), so 16-bit matmuls cannot
show. Only as the batch grows do the matmuls, the part 16 bits speeds up, take over the step;
on a GPU that means hundreds of sequences, not eight. ``by_batch`` times one full step
(``train.make_step_fn``) per precision, interleaved (``bench.compare``), at each batch size, and
reports tokens per second and the paired speed-up over FP32 with its standard error.
``by_width`` does the same at one batch for models of growing width: the matmuls' share of the
step grows with the width (their work as width², the rest as width), so this is the sweep that
finds where the low-precision step starts to pay. ``measured_recipe`` turns one row into the
recipe this device's measurement supports, which is what the course trains with, rather than
what the hardware's instruction list promises.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from course_lib.core.model import build_model
from course_lib.core.train import make_step_fn
from course_lib.core.precision import precision
from course_lib.measure.bench import compare
from course_lib.measure.verdicts import speedup

__all__ = ["by_batch", "by_width", "measured_recipe", "tokens_per_second"]


def tokens_per_second(batch: dict, seconds: float) -> float:
    """Real (unpadded) tokens in ``batch`` processed per second."""
    return float(batch["attention_mask"].sum()) / seconds


def by_batch(build: Callable[[], nn.Module], batches: Mapping[int, dict], *,
             device: torch.device | str, precisions: Iterable[str] = ("fp32", "bf16", "fp16"),
             repeats: int = 3, warmup: int = 1,
             progress: Callable[[Iterable], Iterable] = iter) -> list[dict]:
    """One row per batch size in ``batches`` (size -> a batch of that many sequences): the
    median step time (ms), tokens per second and the speed-up over FP32 (``verdicts.Estimate``
    of the paired per-repeat ratios) of each precision. ``build()`` returns a fresh model with
    the same initial weights for every precision."""
    precisions = list(precisions)
    for p in precisions:
        precision(p, parameter="precisions")
    if precisions[:1] != ["fp32"]:
        raise ValueError(f"precisions must start with 'fp32' (the baseline), got {precisions}")
    if not batches:
        raise ValueError("batches must hold at least one batch")
    rows = []
    for size in progress(list(batches)):
        batch = batches[size]
        if batch["input_ids"].shape[0] != size:
            raise ValueError(f"batches[{size}] holds {batch['input_ids'].shape[0]} sequences")
        fns = {p: make_step_fn(build(), batch, precision_name=p, device=device) for p in precisions}
        res = compare(fns, warmup=warmup, repeats=repeats, device=device, rotate=True)
        base = res["fp32"]["timing"].samples
        row: dict = {"batch": size, "tokens": int(batch["attention_mask"].sum())}
        for p, r in res.items():
            t = r["timing"]
            row[p] = {"ms": t.median * 1e3, "tokens_per_s": tokens_per_second(batch, t.median),
                      "speedup": speedup(base, t.samples)}
        rows.append(row)
    return rows


def by_width(vocab_size: int, widths: Iterable[int], batch: dict, *, device: torch.device | str,
             precisions: Iterable[str] = ("fp32", "bf16", "fp16"), n_layers: int = 2,
             repeats: int = 3, warmup: int = 1, seed: int = 0,
             progress: Callable[[Iterable], Iterable] = iter) -> list[dict]:
    """``by_batch``'s row for a model of each width in ``widths`` (the teacher's shape: 4
    heads, feed-forward 2 × width, ``n_layers`` blocks) training on the one ``batch``; each
    row also holds its ``"width"``."""
    widths = list(widths)
    if not widths or min(widths) < 8 or any(w % 4 for w in widths):
        raise ValueError("widths must be multiples of 4 (the teacher's 4 heads), at least 8, "
                         f"got {widths}")
    size = batch["input_ids"].shape[0]
    rows = []
    for w in progress(widths):
        def build(w: int = w) -> nn.Module:
            return build_model(vocab_size, preset="teacher", d_model=w, d_ff=2 * w,
                               n_layers=n_layers, seed=seed)
        row = by_batch(build, {size: batch}, device=device, precisions=precisions,
                       repeats=repeats, warmup=warmup)[0]
        rows.append({"width": w, **row})
    return rows


def measured_recipe(row: dict, *, threshold: float = 1.0) -> str:
    """The precision one row of ``by_batch``/``by_width`` supports: the fastest 16-bit recipe
    whose whole 95% interval of the speed-up over FP32 lies above ``threshold``, else ``"fp32"``
    (a recipe that is not measurably faster is not worth its rounding)."""
    best, best_x = "fp32", threshold
    for p, cell in row.items():
        if not isinstance(cell, dict) or p == "fp32" or "speedup" not in cell:
            continue
        est = cell["speedup"]
        if est.interval[0] > threshold and est.value > best_x:
            best, best_x = p, est.value
    return best
