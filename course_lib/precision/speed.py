"""Where 16-bit training pays: step time of FP32, BF16 and FP16 autocast against batch size.

A training step of a small model on a small batch is bound by kernel launches and by the work
autocast leaves in FP32 (normalisations, the loss, the optimizer), so 16-bit matmuls cannot
show. Only as the batch grows do the matmuls, the part 16 bits speeds up, take over the step;
on a GPU that means hundreds of sequences, not eight. ``by_batch`` times one full step
(``train.make_step_fn``) per precision, interleaved (``bench.compare``), at each batch size, and
reports tokens per second and the paired speed-up over FP32 with its standard error.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from course_lib.core.train import make_step_fn, precision
from course_lib.measure.bench import compare
from course_lib.measure.verdicts import speedup

__all__ = ["by_batch", "tokens_per_second"]


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
