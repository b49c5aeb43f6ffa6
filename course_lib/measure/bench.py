"""Timing and memory measurements done right.

The rules (see e.g. PyTorch's ``torch.utils.benchmark`` docs): warm up first (allocator,
kernel selection, caches), synchronize the device before reading the clock (CUDA launches are
asynchronous), repeat and report the median with its spread, and compare alternatives
interleaved in one run so that drift (thermal, other processes) hits all of them equally.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated``. On the CPU there is no allocator
counter, so ``peak_rss`` runs the work in a fresh Python subprocess, resets the kernel's
peak-RSS counter after imports and set-up (Linux ``/proc/self/clear_refs``), and reads the
peak resident set size (``VmHWM``) after the work; elsewhere it falls back to ``ru_maxrss``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from course_lib.core.device import synchronize  # noqa: F401  (bench.synchronize: every timer's wait)


def forward_call(model: torch.nn.Module, *inputs: torch.Tensor,
                 context: Callable[[], object] | None = None) -> Callable[[], object]:
    """A no-argument function that runs ``model(*inputs)`` in inference mode (inside
    ``context()`` when given: an attention kernel, an autocast): what ``compare`` times when
    the alternatives are models."""
    def run():
        with torch.inference_mode():
            if context is None:
                return model(*inputs)
            with context():
                return model(*inputs)
    return run


def backward_call(model: torch.nn.Module, *inputs: torch.Tensor) -> Callable[[], tuple]:
    """A no-argument function that runs ``model(*inputs)``, sums the output to a scalar and
    computes the gradients of ``model``'s parameters (``torch.autograd.grad``: returned, not
    accumulated into ``.grad``): the arithmetic of a training step without the optimizer, what
    ``compare`` times when the alternatives are models to train. Training itself is
    ``core.train.train_step``'s job."""
    params = [p for p in model.parameters() if p.requires_grad]

    def run() -> tuple:
        return torch.autograd.grad(model(*inputs).float().sum(), params)
    return run


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]   # seconds, one per repeat

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Interquartile range in seconds; with fewer than 4 samples, max - min."""
        s = sorted(self.samples)
        if len(s) < 4:
            return s[-1] - s[0]
        q = statistics.quantiles(s, n=4)
        return q[2] - q[0]

    @property
    def noisy(self) -> bool:
        """The spread exceeds the median: the repeats disagree more than they measure."""
        return self.spread > self.median

    def __str__(self) -> str:
        text = f"{self.median * 1e3:.2f} ms (IQR {self.spread * 1e3:.2f} ms, n={len(self.samples)})"
        return text + (" [noisy: the spread exceeds the median; was the machine busy? rerun it]"
                       if self.noisy else "")


def _check(warmup: int, repeats: int) -> None:
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")


def time_fn(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7,
            device: torch.device | str | None = None) -> Timing:
    """Median-of-repeats wall time of ``fn()``, with warm-up and device synchronization."""
    _check(warmup, repeats)
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return Timing(tuple(samples))


def time_naive(fn: Callable[[], object]) -> float:
    """How timing is often done, wrongly: one cold call, no warm-up, no synchronization."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(fns: dict[str, Callable[[], object]], *, warmup: int = 2, repeats: int = 7,
            device: torch.device | str | None = None,
            baseline: str | None = None, rotate: bool = True) -> dict[str, dict]:
    """Time several alternatives interleaved in one run, each repeat starting one alternative
    later (A B C, B C A, C A B ...), so that none always runs first or right after the same
    neighbour (a cache it warmed, a clock it raised); ``rotate=False`` keeps the order A B C
    every repeat (for alternatives that must run in order).

    Returns ``{name: {"timing": Timing, "speedup": Estimate}}``: how many times faster than the
    baseline (the first entry unless named), the course's one statistic (``verdicts.speedup``:
    the geometric mean of the paired ratios, with its error). ``timing.samples[i]`` of every
    alternative come from repeat i.
    """
    if not fns:
        raise ValueError("fns must hold at least one function")
    _check(warmup, repeats)
    baseline = baseline or next(iter(fns))
    if baseline not in fns:
        raise ValueError(f"baseline must be one of {list(fns)}, got {baseline!r}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    items = list(fns.items())
    for i in range(repeats):
        shift = i % len(items) if rotate else 0
        for name, fn in items[shift:] + items[:shift]:
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            samples[name].append(time.perf_counter() - t0)
    from course_lib.measure.verdicts import speedup
    return {k: {"timing": Timing(tuple(v)), "speedup": speedup(samples[baseline], v)}
            for k, v in samples.items()}


def compare_over(inputs: Sequence, make: Callable[[object], dict[str, Callable[[], object]]], *,
                 warmup: int = 1, repeats: int = 3, device: torch.device | str | None = None,
                 rotate: bool = True) -> dict[str, dict]:
    """``compare`` on each of several inputs (batches drawn at random, say): one speed-up per
    input and alternative (``verdicts.speedup`` within the input), then their geometric mean
    with its error over the inputs (``n - 1`` degrees of freedom: the inputs are the samples).
    The same statistic as ``compare``'s, one level up.

    ``make(x)`` returns the alternatives for input ``x``, the baseline first. Returns
    ``{name: {"speedups": [...], "speedup": Estimate, "median_s": [...]}}``.
    """
    from course_lib.measure.verdicts import geometric_mean
    if not inputs:
        raise ValueError("inputs must hold at least one input")
    out: dict[str, dict] = {}
    for x in inputs:
        for name, r in compare(make(x), warmup=warmup, repeats=repeats, device=device,
                               rotate=rotate).items():
            d = out.setdefault(name, {"speedups": [], "median_s": []})
            d["speedups"].append(r["speedup"].value)
            d["median_s"].append(r["timing"].median)
    if any(len(d["speedups"]) != len(inputs) for d in out.values()):
        raise ValueError("make(x) must return the same alternatives for every input")
    for d in out.values():
        d["speedup"] = geometric_mean(d["speedups"])
    return out


def tokens_per_second(n_tokens: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return n_tokens / seconds


def cuda_peak_memory(fn: Callable[[], object], device: torch.device | str = "cuda") -> int:
    """Peak bytes allocated by torch on a CUDA device while ``fn()`` runs (above the start)."""
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start


_CHILD = r"""
import importlib, json, resource, sys
spec = json.loads(sys.argv[1])
mod, _, name = spec["target"].partition(":")
fn = getattr(importlib.import_module(mod), name)
setup = fn(**spec["kwargs"], prepare=True) if spec["prepare"] else None

def reset_peak():
    # Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS, so the
    # peak of the import phase does not hide the work's own peak.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False

def rss(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024

reset_peak()
before = rss("VmRSS")
fn(**spec["kwargs"]) if setup is None else setup()
print(json.dumps({"before": before, "after": rss("VmHWM")}))
"""


@dataclass(frozen=True)
class PeakMemory:
    baseline_bytes: int   # peak RSS after imports and set-up
    peak_bytes: int       # peak RSS after the work

    @property
    def extra_bytes(self) -> int:
        return max(0, self.peak_bytes - self.baseline_bytes)


def peak_rss(target: str, kwargs: dict | None = None, *, prepare: bool = False,
             timeout: float = 300.0, env: dict[str, str] | None = None) -> PeakMemory:
    """Run ``module:function(**kwargs)`` in a fresh interpreter and report its peak RSS.

    With ``prepare=True`` the function is first called with ``prepare=True`` and must return a
    zero-argument callable: inputs are built before the baseline is read, so only the work's
    own memory shows in ``extra_bytes``. ``env``: variables added to the child's environment.
    """
    if ":" not in target:
        raise ValueError(f"target must look like 'package.module:function', got {target!r}")
    spec = json.dumps({"target": target, "kwargs": kwargs or {}, "prepare": prepare})
    proc = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else {**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"peak_rss child for {target} failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return PeakMemory(out["before"], out["after"])


def _probe_allocate(*, mib: int) -> None:
    """Allocate and touch ``mib`` MiB (used by the tests of ``peak_rss``)."""
    torch.ones(mib * 2**20 // 4, dtype=torch.float32).sum()
