"""Eager against compiled, timed the same way (lesson 13).

The functions a lesson compiles: ``inference_fn`` for inference; for training, the forward pass
and loss (``core.task.task_loss``), run inside the course's one step (``core.train.make_step_fn``:
the backward pass goes through the compiled graph, the optimizer update stays outside it). One
interleaved timing of both versions
(``eager_vs_compiled``), and the number of calls that pays the compile time back
(``payback_calls``). Autocast follows the device the way the course trains there
(``core.precision.training_autocast``: the course's one precision rule).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib.core.precision import autocast, precision_of
from course_lib.core.train import make_step_fn
from course_lib.measure import bench
from course_lib.measure.verdicts import Estimate

__all__ = ["inference_fn", "training_step", "eager_vs_compiled",
           "payback_calls"]


def inference_fn(model: torch.nn.Module, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None) -> Callable:
    """``fn(ids, mask) -> logits`` without gradients, under autocast to ``dtype``."""
    def infer(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), autocast(device, dtype):
            return model(ids, mask)
    return infer


def training_step(model: torch.nn.Module, batch: dict, loss_fn: Callable, *,
                  device: torch.device | str, dtype: torch.dtype | None) -> Callable[[], None]:
    """A no-argument training step: the course's own (``core.train.make_step_fn``: autocast to
    ``dtype``, ``loss_fn``, backward, clipping, AdamW), with the forward pass and loss that
    ``loss_fn`` computes (eager, or compiled)."""
    return make_step_fn(model, batch, precision_name=precision_of(dtype), device=device,
                        loss_fn=loss_fn)


def eager_vs_compiled(eager: Callable[[], object], compiled: Callable[[], object] | None, *,
                      model: torch.nn.Module, train_mode: bool, repeats: int,
                      device: torch.device | str = "cpu") -> dict:
    """``bench.compare`` of the two (interleaved), ``model`` put in train or eval mode first.
    With nothing compiled (``compiled`` None), eager is timed alone and reported for both at 1×."""
    model.train(train_mode)
    if compiled is None:
        t = bench.time_fn(eager, warmup=1, repeats=repeats, device=device)
        same = Estimate(1.0, 0.0)
        return {"eager": {"timing": t, "speedup": same}, "compiled": {"timing": t, "speedup": same}}
    return bench.compare({"eager": eager, "compiled": compiled}, repeats=repeats, device=device)


def payback_calls(first_call_seconds: float, eager_seconds: float, compiled_seconds: float
                  ) -> float | None:
    """Calls after which compiling has paid for itself: the first call's cost over the time
    saved per call (None when the compiled call saves nothing: it never pays back)."""
    if first_call_seconds < 0 or eager_seconds <= 0 or compiled_seconds <= 0:
        raise ValueError("times must be positive (first_call_seconds may be 0)")
    saved = eager_seconds - compiled_seconds
    return first_call_seconds / saved if saved > 0 else None
