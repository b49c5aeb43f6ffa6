"""One training step, the only one in the course: every loop calls it (``train.train``,
``amp.amp_train``, the DDP worker in ``distributed``, the timed steps of ``amp.make_step_fn``
that lessons 04, 10 and 11 time).

In the order nanoGPT's loop and PyTorch's AMP recipe use:

1. zero the gradients;
2. for each micro-batch (one, or several for gradient accumulation): the forward pass and loss
   under autocast (``dtype`` None: FP32), the loss divided by the number of micro-batches, its
   backward pass, scaled by the ``GradScaler`` when there is one (FP16); all but the last
   micro-batch inside ``no_sync()`` when given (DDP then all-reduces the gradients once, during
   the last backward);
3. unscale the gradients (so that clipping sees their true size), clip their norm;
4. the optimizer step, through the scaler when there is one: it skips the step if a gradient
   is inf or NaN and lowers its scale.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

LossFn = Callable[[nn.Module, dict], torch.Tensor]


def train_step(model: nn.Module, batches: dict | Sequence[dict], opt: torch.optim.Optimizer, *,
               device: torch.device | str, dtype: torch.dtype | None, loss_fn: LossFn,
               scaler: torch.amp.GradScaler | None = None, grad_clip: float | None = 1.0,
               inject_inf: bool = False,
               no_sync: Callable[[], contextlib.AbstractContextManager] | None = None
               ) -> tuple[float, bool]:
    """One optimizer step over ``batches`` (one batch, or a list of micro-batches already on
    ``device``). Returns (the loss, averaged over the micro-batches; whether the scaler skipped
    the step). ``inject_inf`` puts an inf in one gradient, as an FP16 overflow would."""
    micro = [batches] if isinstance(batches, dict) else list(batches)
    if not micro:
        raise ValueError("batches must hold at least one batch")
    if grad_clip is not None and grad_clip < 0:
        raise ValueError(f"grad_clip must be >= 0 or None, got {grad_clip}")
    device = torch.device(device)
    scaler = scaler if scaler is not None and scaler.is_enabled() else None
    params = [p for p in model.parameters() if p.requires_grad]
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for i, batch in enumerate(micro):
        last = i == len(micro) - 1
        with no_sync() if no_sync is not None and not last else contextlib.nullcontext():
            with torch.amp.autocast(device_type=device.type, dtype=dtype or torch.float32,
                                    enabled=dtype is not None):
                loss = loss_fn(model, batch) / len(micro)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        total += float(loss.detach())
    if inject_inf:
        _poison(params)
    if scaler is not None:
        before = scaler.get_scale()
        scaler.unscale_(opt)
    if grad_clip:
        nn.utils.clip_grad_norm_(params, grad_clip)
    if scaler is None:
        opt.step()   # without a scaler nothing stops an inf: the weights become NaN
        return total, False
    scaler.step(opt)
    scaler.update()
    return total, scaler.get_scale() < before


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | str = "cpu") -> Iterator[None]:
    """The block runs with torch's global generators seeded to ``seed`` (dropout, a DataLoader's
    worker seeds), and the caller's generator state comes back afterwards
    (``torch.random.fork_rng``): a training loop is reproducible without reseeding anything
    behind the caller's back."""
    device = torch.device(device)
    devices = ([device.index if device.index is not None else torch.cuda.current_device()]
               if device.type == "cuda" else [])
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _poison(params: list[torch.Tensor]) -> None:
    p = next(p for p in params if p.grad is not None)
    with torch.no_grad():
        p.grad.view(-1)[0] = math.inf
