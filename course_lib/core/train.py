"""The course's one training step and the one loop around it.

``train_step`` is the only step in the course: ``train`` calls it (and ``train`` is the only
loop: the lessons' models, the decoders of lesson 16, the DDP worker, the sharding runs), and so
do the timed steps of ``make_step_fn`` (lessons 04, 13, 14) and every other place that updates
weights. In the order nanoGPT's loop and PyTorch's AMP recipe use:

1. zero the gradients;
2. for each micro-batch (one, or several for gradient accumulation): the forward pass and loss
   under autocast (``dtype`` None: FP32), the loss divided by the number of micro-batches, its
   backward pass, scaled by the ``GradScaler`` when there is one (FP16); all but the last
   micro-batch inside ``no_sync()`` when given (DDP then all-reduces the gradients once, during
   the last backward);
3. unscale the gradients (so that clipping sees their true size), clip their norm;
4. the optimizer step, through the scaler when there is one: it skips the step if a gradient
   is inf or NaN and lowers its scale.

``train`` runs epochs of it with the hooks later lessons need: ``autocast_dtype`` (the default
``"auto"`` follows the course's one precision rule, ``core.precision.choose_precision``: bf16
where the device has bf16 instructions, fp16 with a gradient scaler on older CUDA GPUs, else
FP32), ``scaler``, ``loss_fn`` (lesson 06 swaps in a distillation loss), ``callback`` (after every
step: pruning masks, logging) and ``inject_inf_at``. Deterministic for a given seed, device
and thread count.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from course_lib.core.device import synchronize
from course_lib.core.evaluate import evaluate
from course_lib.core.optimizers import adamw
from course_lib.core.precision import autocast, make_scaler, precision, training_autocast
from course_lib.core.progress import tqdm
from course_lib.core.task import LossFn, check_task, task_loss, to_device


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
            with autocast(device, dtype):
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


SCHEDULES = ("warmup_cosine", "constant")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 6
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_frac: float = 0.05   # Adam's second moments start near zero: a short linear
                                # warm-up keeps the first steps from being too large
    grad_clip: float = 1.0      # max gradient norm; 0 disables clipping
    task: str = "classification"  # or "regression" (MSE on the rating)
    seed: int = 0
    accum: int = 1              # batches per optimizer step (gradient accumulation, lesson 08)
    schedule: str = "warmup_cosine"   # or "constant": a comparison of steps (DDP against one
                                      # process, lesson 08) is cleaner at a fixed rate

    def validate(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not 0 < self.lr <= 1:
            raise ValueError(f"lr must be in (0, 1], got {self.lr}")
        if not 0 <= self.warmup_frac < 1:
            raise ValueError(f"warmup_frac must be in [0, 1), got {self.warmup_frac}")
        check_task(self.task)
        if not self.grad_clip >= 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not isinstance(self.accum, int) or self.accum < 1:
            raise ValueError(f"accum must be an integer >= 1, got {self.accum!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")


@dataclass
class History:
    step_loss: list[float] = field(default_factory=list)
    step_lr: list[float] = field(default_factory=list)
    step_skipped: list[bool] = field(default_factory=list)   # steps the GradScaler skipped
    step_scale: list[float] = field(default_factory=list)    # its loss scale after each step
                                                             # (1: none)
    step_seconds: list[float] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)   # per epoch: loss, seconds, val metrics
    seconds: float = 0.0

    @property
    def skipped_steps(self) -> int:
        return sum(self.step_skipped)


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

def train(model: nn.Module, loader, *, cfg: TrainConfig = TrainConfig(),
          device: torch.device | str = "cpu", val_loader=None,
          optimizer: torch.optim.Optimizer | None = None, loss_fn: LossFn | None = None,
          autocast_dtype: torch.dtype | None | str = "auto",
          scaler: torch.amp.GradScaler | None = None,
          callback: Callable[[int, float, nn.Module], None] | None = None,
          max_steps: int | None = None, inject_inf_at: Iterable[int] = (),
          no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
          step_context: Callable[[int], contextlib.AbstractContextManager] | None = None,
          set_epoch: bool = False, progress: bool = True, desc: str = "training") -> History:
    """Train ``model`` in place and return its history: the course's one loop around the one
    step (``train_step``), ``cfg.accum`` batches of ``loader`` per step.

    ``optimizer``: default the course's AdamW (``core.optimizers.adamw``: decay on the weight
    matrices only). ``autocast_dtype``: see ``core.precision.training_autocast``; None trains in
    FP32 everywhere. ``inject_inf_at``: step numbers whose gradients get an inf (lesson 04
    watches the scaler skip them). ``no_sync``: DDP's ``no_sync`` (the ranks all-reduce once per
    step, in its last backward). ``step_context(step)``: a context the step runs in (lesson 09
    counts the collectives of one step). ``set_epoch``: give the loader's sampler each epoch's
    number (DDP's ``DistributedSampler`` shuffles anew per epoch that way, the same on every
    rank); off, a sampler keeps drawing from its own generator. Batches left over at the end of
    an epoch (fewer than ``accum``) are dropped. ``History.step_seconds`` times each step from
    its batches' move to the device to the optimizer's update (loading them is not in it). The
    learning-rate schedule advances only on steps the optimizer took: a step the scaler
    skipped leaves it where it was."""
    cfg.validate()
    device = torch.device(device)
    autocast_dtype = training_autocast(device, autocast_dtype)
    if autocast_dtype == torch.float16 and device.type == "cuda" and scaler is None:
        scaler = make_scaler(device)   # fp16 gradients underflow without one
    model.to(device)
    loss_fn = loss_fn or task_loss(cfg.task)
    opt = optimizer or adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_epoch = len(loader) // cfg.accum
    if per_epoch == 0:
        raise ValueError("loader yields no batches: nothing to train on (is the dataset empty, "
                         "or smaller than a drop_last batch?)" if len(loader) == 0 else
                         f"loader yields {len(loader)} batches, fewer than accum={cfg.accum}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    total = cfg.epochs * per_epoch if max_steps is None else min(max_steps, cfg.epochs * per_epoch)
    warm = max(1, int(cfg.warmup_frac * total))
    rate = (lambda s: warmup_cosine(s, total, warm)) if cfg.schedule == "warmup_cosine" \
        else (lambda s: 1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    inject = set(inject_inf_at)
    with seeded(cfg.seed, device):   # dropout draws; the caller's generator is left as it was
        hist, step, t_start = History(), 0, time.perf_counter()
        bar = tqdm(total=total, desc=desc, disable=not progress, leave=False)
        for epoch in range(cfg.epochs):
            model.train()
            if set_epoch:   # DistributedSampler: the same new shuffle on every rank
                for sampler in (getattr(loader, "sampler", None),
                                getattr(loader, "batch_sampler", None)):
                    if hasattr(sampler, "set_epoch"):
                        sampler.set_epoch(epoch)
            t0, losses, micro = time.perf_counter(), [], []
            for batch in loader:   # a sampler may yield more or fewer batches than len() said
                if step >= total:
                    break
                micro.append(batch)
                if len(micro) < cfg.accum:
                    continue
                synchronize(device)
                t_step = time.perf_counter()
                micro = [to_device(b, device) for b in micro]
                with step_context(step) if step_context is not None else contextlib.nullcontext():
                    value, skipped = train_step(
                        model, micro if cfg.accum > 1 else micro[0], opt, device=device,
                        dtype=autocast_dtype, loss_fn=loss_fn, scaler=scaler,
                        grad_clip=cfg.grad_clip, inject_inf=step in inject, no_sync=no_sync)
                micro = []
                if not skipped:   # a skipped step did not call opt.step(): keep the schedule
                    sched.step()
                synchronize(device)
                hist.step_seconds.append(time.perf_counter() - t_step)
                losses.append(value)
                hist.step_loss.append(value)
                hist.step_lr.append(sched.get_last_lr()[0])
                hist.step_skipped.append(skipped)
                hist.step_scale.append(scaler.get_scale() if scaler is not None
                                       and scaler.is_enabled() else 1.0)
                if callback is not None:
                    callback(step, value, model)
                step += 1
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{value:.3f}")
            record = {"epoch": epoch + 1, "loss": sum(losses) / max(1, len(losses)),
                      "seconds": time.perf_counter() - t0}
            if val_loader is not None:
                record.update({f"val_{k}": v for k, v in evaluate(
                    model, val_loader, device=device, task=cfg.task,
                    autocast_dtype=autocast_dtype).items()})
            hist.epochs.append(record)
            if step >= total:
                break
        bar.close()
        hist.seconds = time.perf_counter() - t_start
        return hist


def make_step_fn(model: nn.Module, batch: dict, *, precision_name: str,
                 device: torch.device | str, lr: float = 1e-4,
                 loss_fn: LossFn | None = None) -> Callable[[], None]:
    """A zero-argument full training step (forward, backward, optimizer: ``core.train.train_step``)
    for timing; ``loss_fn`` defaults to cross-entropy on the labels."""
    prec, device = precision(precision_name), torch.device(device)
    model.to(device).train()
    batch = to_device(batch, device)
    opt = adamw(model, lr=lr)
    scaler = make_scaler(device) if prec.use_scaler else None
    loss_fn = loss_fn or task_loss("classification")

    def step() -> None:
        train_step(model, batch, opt, device=device, dtype=prec.dtype, scaler=scaler,
                   loss_fn=loss_fn)
    return step
