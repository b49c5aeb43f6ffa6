"""Scoring quantized models against the FP32 one on the same test reviews (lesson 07).

Every quantized variant is judged by one rule (the claim's: test accuracy change in points,
paired over the same reviews, with its Student-t interval), whether it is a fake-quantized
bit width or PyTorch's int8: so "holds down to b bits" and the int8 verdict mean the same thing.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from course_lib.quant.int8 import fake_quantize_model
from course_lib.measure.scoring import Scored, compare_to, score
from course_lib.measure.verdicts import Rule

__all__ = ["Scored", "score", "compare_to", "bit_sweep", "lowest_holding", "rounded_to_zero"]


def bit_sweep(model: nn.Module, loader, labels: torch.Tensor, *, bits: Iterable[int],
              granularities: Iterable[str], rule: Rule, ref: Scored | None = None,
              progress=lambda it: it) -> dict[tuple[str, int], dict]:
    """``compare_to`` for every (granularity, bits) fake-quantized copy of ``model`` (symmetric
    grids), against ``ref`` (the FP32 model's score; computed when not given)."""
    ref = ref or score(model, loader, labels)
    out = {}
    for gran in progress(list(granularities)):
        for b in bits:
            fq = fake_quantize_model(model, bits=b, scheme="symmetric", granularity=gran)
            out[gran, b] = compare_to(ref, score(fq, loader, labels), rule)
    return out


def lowest_holding(sweep: dict[tuple[str, int], dict], granularity: str) -> int | None:
    """The fewest bits at which the claim holds for ``granularity`` and at every wider width
    measured (a claim that breaks at 6 bits is not rescued by 4 bits holding); None if the
    widest width measured does not hold."""
    widths = sorted((b for g, b in sweep if g == granularity), reverse=True)
    if not widths:
        raise ValueError(f"no rows measured for granularity {granularity!r}")
    lowest = None
    for b in widths:
        if sweep[granularity, b]["outcome"] != "holds":
            break
        lowest = b
    return lowest


def rounded_to_zero(model: nn.Module, *, bits: int, granularity: str) -> float:
    """Share of the matmul weights that a symmetric ``bits`` grid rounds to exactly 0: at 2
    bits the grid is {-s, 0, s}, so with one step per tensor every row whose weights are small
    next to the tensor's largest one is wiped out, while a step per row keeps each row's own."""
    from course_lib.quant.int8 import fake_quantize, matmul_weights

    zero = total = 0
    for _, w in matmul_weights(model):
        wq = fake_quantize(w.detach(), bits=bits, scheme="symmetric", granularity=granularity)
        zero += int(((wq == 0) & (w.detach() != 0)).sum())
        total += w.numel()
    return zero / total
