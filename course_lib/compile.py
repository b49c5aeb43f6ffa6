"""``torch.compile`` with a clean fallback, compile-time measurement and recompile counting.

Follows the PyTorch documentation of ``torch.compile`` (TorchDynamo captures a graph from the
Python bytecode on the first call, TorchInductor generates fused C++/OpenMP code on a CPU or
Triton kernels on a GPU) and of custom Dynamo backends: a backend is a callable
``backend(graph_module, example_inputs) -> callable`` that Dynamo calls once per captured
graph, which is how ``GraphCounter`` counts (re)compilations without paying for code
generation.

Compilation is lazy (it happens inside the first call), so ``compile_or_eager`` makes that first
call itself, times it, and falls back to the eager function, with the reason, when
``torch.compile`` is missing, disabled (``COURSE_NO_COMPILE=1``), has no C++ compiler to use on
a CPU, or fails.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from . import bench


def compile_support(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """Whether ``torch.compile`` with Inductor can be expected to work here, and why not."""
    if os.environ.get("COURSE_NO_COMPILE") == "1":
        return False, "disabled by COURSE_NO_COMPILE=1"
    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile (needs torch >= 2.0)"
    if sys.platform == "win32" and torch.device(device).type == "cpu":
        return False, "Inductor's CPU backend needs a C++ toolchain that is rarely set up on Windows"
    if torch.device(device).type == "cpu":
        cxx = os.environ.get("CXX")
        if not any(shutil.which(c) for c in filter(None, (cxx, "g++", "c++", "clang++"))):
            return False, "no C++ compiler (g++/clang++) found: Inductor's CPU backend needs one"
    return True, "available"


@dataclass
class Compiled:
    fn: Callable
    compiled: bool             # False: ``fn`` is the eager function
    reason: str                # why it fell back, or "compiled"
    first_call_seconds: float  # the first call (includes compilation when compiled)


def compile_or_eager(fn: Callable, example_args: Sequence, *, dynamic: bool | None = None,
                     backend: str | Callable = "inductor", mode: str | None = None,
                     device: torch.device | str = "cpu", enabled: bool = True) -> Compiled:
    """Compile ``fn`` and call it once on ``example_args``; on any failure, keep it eager."""
    if not enabled:
        return Compiled(fn, False, "compilation not requested", _timed(fn, example_args))
    ok, reason = compile_support(device) if backend == "inductor" else (hasattr(torch, "compile"),
                                                                        "no torch.compile")
    if not ok:
        return Compiled(fn, False, reason, _timed(fn, example_args))
    try:
        cfn = torch.compile(fn, dynamic=dynamic, backend=backend, mode=mode)
        seconds = _timed(cfn, example_args)
    except Exception as err:  # noqa: BLE001 - any compiler failure means: run eagerly
        torch.compiler.reset()
        msg = str(err).strip().splitlines()
        return Compiled(fn, False, f"torch.compile failed: {type(err).__name__}: "
                                   f"{msg[0][:200] if msg else ''}", _timed(fn, example_args))
    return Compiled(cfn, True, "compiled", seconds)


def _timed(fn: Callable, args: Sequence) -> float:
    """Seconds of one call, the device synchronized before and after (a GPU call returns when
    its work is queued, not done)."""
    devices = {t.device for t in args if torch.is_tensor(t)}
    for d in devices:
        bench.synchronize(d)
    t0 = time.perf_counter()
    fn(*args)
    for d in devices:
        bench.synchronize(d)
    return time.perf_counter() - t0


@dataclass
class GraphCounter:
    """A Dynamo backend that runs each captured graph eagerly and records its input shapes.

    ``len(counter.shapes)`` is the number of graphs compiled: one per distinct static shape
    (``dynamic=False``), or one graph reused for all shapes once a dimension is dynamic.
    """
    shapes: list[tuple] = field(default_factory=list)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        self.shapes.append(tuple(tuple(x.shape) for x in example_inputs if torch.is_tensor(x)))
        return gm.forward

    @property
    def graphs(self) -> int:
        return len(self.shapes)


def count_graphs(fn: Callable, calls: Sequence[Sequence], *, dynamic: bool | None) -> int:
    """Number of graphs Dynamo captures when ``fn`` is called with each argument tuple."""
    torch.compiler.reset()
    counter = GraphCounter()
    cfn = torch.compile(fn, backend=counter, dynamic=dynamic)
    for args in calls:
        cfn(*args)
    torch.compiler.reset()
    return counter.graphs
