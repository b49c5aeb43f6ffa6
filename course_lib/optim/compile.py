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

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from course_lib.core.device import compile_support
from course_lib.measure import bench


@dataclass
class Compiled:
    fn: Callable
    compiled: bool             # False: ``fn`` is the eager function
    reason: str                # why it fell back, or "compiled"
    first_call_seconds: float  # the first call (includes compilation when compiled)


def compile_or_eager(fn: Callable, example_args: Sequence, *, dynamic: bool | None = None,
                     backend: str | Callable = "inductor", mode: str | None = None,
                     device: torch.device | str = "cpu", enabled: bool = True,
                     first_call: Callable[[Callable], object] | None = None) -> Compiled:
    """Compile ``fn`` and call it once on ``example_args``; on any failure, keep it eager.
    ``first_call(f)``, when given, is the timed first use instead of ``f(*example_args)``: a
    training step that calls the compiled loss, so that the backward graph (compiled at the
    first backward pass) is in the first call's time too."""
    first = first_call or (lambda f: f(*example_args))
    if not enabled:
        return Compiled(fn, False, "compilation not requested", _timed(first, fn, device))
    ok, reason = compile_support(device) if backend == "inductor" else (hasattr(torch, "compile"),
                                                                        "no torch.compile")
    if not ok:
        return Compiled(fn, False, reason, _timed(first, fn, device))
    try:
        cfn = torch.compile(fn, dynamic=dynamic, backend=backend, mode=mode)
        seconds = _timed(first, cfn, device)
    except Exception as err:  # noqa: BLE001 - any compiler failure means: run eagerly
        torch.compiler.reset()
        msg = str(err).strip().splitlines()
        return Compiled(fn, False, f"torch.compile failed: {type(err).__name__}: "
                                   f"{msg[0][:200] if msg else ''}", _timed(first, fn, device))
    return Compiled(cfn, True, "compiled", seconds)


@contextlib.contextmanager
def fresh_inductor_cache():
    """Inductor's on-disk cache pointed at a new, empty directory for the block (and put back
    after): a first compile inside is *cold*, whatever this machine compiled before. Without it
    the first call's time depends on the cache in ``TORCHINDUCTOR_CACHE_DIR`` (by default under
    the temp directory), which a previous run of the same model has filled."""
    import os
    import shutil
    import tempfile

    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    path = tempfile.mkdtemp(prefix="course_inductor_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
        shutil.rmtree(path, ignore_errors=True)


def _timed(first: Callable[[Callable], object], fn: Callable, device: torch.device | str) -> float:
    """Seconds of ``first(fn)``, the device synchronized before and after (a GPU call returns
    when its work is queued, not done)."""
    bench.synchronize(device)
    t0 = time.perf_counter()
    first(fn)
    bench.synchronize(device)
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


def count_graphs_limited(fn: Callable, calls: Sequence[Sequence], *, recompile_limit: int) -> dict:
    """``count_graphs`` with ``dynamic=False`` under Dynamo's recompile limit
    (``torch._dynamo.config.recompile_limit``, 8 by default): past it, Dynamo stops compiling
    that function and runs it eagerly, so a stream of new shapes silently loses the compiler.
    Returns the graphs compiled, the calls made, the limit and torch's default limit."""
    if recompile_limit < 1:
        raise ValueError(f"recompile_limit must be >= 1, got {recompile_limit}")
    import torch._dynamo.config as dynamo_config

    # torch 2.7 renamed cache_size_limit to recompile_limit
    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    default = getattr(dynamo_config, name)
    with _dynamo_quiet(), dynamo_config.patch(**{name: recompile_limit}):
        graphs = count_graphs(fn, calls, dynamic=False)
    return {"graphs": graphs, "calls": len(calls), "limit": recompile_limit, "default": default}


@contextlib.contextmanager
def _dynamo_quiet():
    """Dynamo logs a warning for each recompile limit hit and graph break: the functions below
    return what happened instead, so the log is held at ERROR while they run."""
    log = logging.getLogger("torch._dynamo")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def graph_breaks(fn: Callable, args: Sequence) -> dict:
    """What Dynamo captures from one call of ``fn(*args)`` (``torch._dynamo.explain``): the
    number of graphs, of graph breaks, and the first line of each break's reason. A break splits
    the function into separately compiled pieces with Python (and a device sync) between them."""
    torch.compiler.reset()
    try:
        with _dynamo_quiet():
            out = torch._dynamo.explain(fn)(*args)
    finally:
        torch.compiler.reset()
    reasons = [str(getattr(b, "reason", b)).strip().splitlines()[0][:160]
               for b in out.break_reasons]
    return {"graphs": out.graph_count, "breaks": out.graph_break_count, "reasons": reasons}


def trimmed_forward(model: torch.nn.Module) -> Callable:
    """``model(ids, mask)`` after cutting the batch to its longest real sequence, lesson 01's
    trim done inside the call: ``int(...)`` reads a value computed on the device, which Dynamo
    cannot trace, so compiling this function breaks the graph there."""
    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        longest = int(mask.sum(dim=1).max())
        return model(ids[:, :longest], mask[:, :longest])
    return forward
