"""Where a step's time goes: the profiler's operator table, grouped into what a technique speeds up.

``torch.profiler`` records every ATen operator a function runs with its *self* time (its own
kernels, not its children's). ``time_shares`` runs the function a few times under the profiler
and adds those self times into groups: the matrix multiplies (the work 16-bit formats and int8
speed up), the fused attention kernel, and everything else (normalisations, element-wise ops,
the optimizer, casts). The matmul share ``f`` bounds any technique that only speeds the matmuls
by ``s``: the step cannot run faster than ``1 / ((1 - f) + f / s)`` (Amdahl's law).
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["GROUPS", "time_shares", "amdahl_bound"]

# operator name -> group; an operator in no group counts as "other"
GROUPS: Mapping[str, tuple[str, ...]] = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_int_mm",
               "quantized::linear_dynamic", "aten::_weight_int8pack_mm"),
    "attention kernel": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                         "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                         "aten::_scaled_dot_product_flash_attention",
                         "aten::_scaled_dot_product_flash_attention_backward",
                         "aten::_scaled_dot_product_efficient_attention",
                         "aten::_scaled_dot_product_efficient_attention_backward",
                         "aten::_scaled_dot_product_cudnn_attention",
                         "aten::_scaled_dot_product_cudnn_attention_backward"),
}


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Send the process's native stderr (file descriptor 2) to /dev/null for the block: some
    torch builds print a "profiler_start"/"profiler_stop" line there on every profile, which a
    notebook would show as a stray output. Python's own ``sys.stderr`` is left alone."""
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        saved = os.dup(fd)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)


def time_shares(fn: Callable[[], object], *, device: torch.device | str = "cpu",
                warmup: int = 1, repeats: int = 3, top: int = 5) -> dict:
    """Profile ``repeats`` calls of ``fn`` (after ``warmup`` unprofiled ones) and return
    {"shares": {group: share of the self time}, "seconds": total self time per call,
    "top": the ``top`` operators by self time as (name, share)}. On CUDA the kernels' device
    time is counted, elsewhere the CPU time."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with _quiet_native_stderr(), profile(activities=activities) as prof:
        for _ in range(repeats):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    times = {e.key: getattr(e, attr) for e in prof.key_averages()}
    total = sum(times.values())
    if total <= 0:
        raise ValueError("fn ran no profiled operators")
    group_of = {op: g for g, ops in GROUPS.items() for op in ops}
    shares = {g: 0.0 for g in (*GROUPS, "other")}
    for op, t in times.items():
        shares[group_of.get(op, "other")] += t / total
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:top]
    return {"shares": shares, "seconds": total / 1e6 / repeats,
            "top": [(op, t / total) for op, t in ranked]}


def amdahl_bound(share: float, speedup: float) -> float:
    """The whole step's speed-up when a ``share`` of its time runs ``speedup`` times faster
    and the rest not at all."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    return 1 / ((1 - share) + share / speedup)
