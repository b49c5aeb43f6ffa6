"""The course's one training step and the one loop around it, with the evaluation that goes
with them.

``train_step`` is the only step in the course: ``train`` calls it, and so do the DDP worker
(``distributed.ddp``), the timed steps of ``make_step_fn`` (lessons 04, 13, 14) and every
other place that updates weights. In the order nanoGPT's loop and PyTorch's AMP recipe use:

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
``"auto"`` trains in FP32 on a CPU and in the GPU's 16-bit format on CUDA: bf16 from compute
capability 8.0, fp16 with a gradient scaler below, the rule of ``core.device.amp_dtype``),
``scaler``, ``loss_fn`` (lesson 06 swaps in a distillation loss), ``callback`` (after every
step: pruning masks, logging) and ``inject_inf_at``. Deterministic for a given seed, device
and thread count.
"""
from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from course_lib.core.progress import tqdm

from course_lib.core.device import amp_dtype


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

    def validate(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must be in (0, 1), got {self.lr}")
        if not 0 <= self.warmup_frac < 1:
            raise ValueError(f"warmup_frac must be in [0, 1), got {self.warmup_frac}")
        _check_task(self.task)
        if not self.grad_clip >= 0:
            raise ValueError(f"grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


@dataclass
class History:
    step_loss: list[float] = field(default_factory=list)
    step_lr: list[float] = field(default_factory=list)
    step_skipped: list[bool] = field(default_factory=list)   # steps the GradScaler skipped
    step_scale: list[float] = field(default_factory=list)    # its loss scale after each step (1: none)
    step_seconds: list[float] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)   # per epoch: loss, seconds, val metrics
    seconds: float = 0.0

    @property
    def skipped_steps(self) -> int:
        return sum(self.step_skipped)


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v)
            for k, v in batch.items()}


TASKS = ("classification", "regression")


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def task_loss(task: str) -> LossFn:
    """The plain supervised loss: cross-entropy on labels, or MSE on ratings."""
    _check_task(task)
    def loss_fn(model: nn.Module, batch: dict) -> torch.Tensor:
        out = model(batch["input_ids"], batch["attention_mask"])
        if task == "regression":
            return nn.functional.mse_loss(out.float(), batch["ratings"])
        return nn.functional.cross_entropy(out.float(), batch["labels"])
    return loss_fn


def param_groups(model: nn.Module, *, weight_decay: float) -> list[dict]:
    """AdamW's two parameter groups (nanoGPT's rule): the weight matrices of ``nn.Linear`` layers
    decay; LayerNorm gains, biases and embeddings do not. Decay pulls a weight towards 0: a
    regulariser for a matrix, but for a norm's gain or an embedding row only a pull away from the
    scale the model needs. A pruned layer's trainable weight is ``weight_orig``."""
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    matrices = {id(getattr(m, "weight_orig", m.weight)) for m in model.modules()
                if isinstance(m, nn.Linear)}
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if id(p) in matrices], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in matrices], "weight_decay": 0.0}]


def adamw(model: nn.Module, *, lr: float, weight_decay: float = 0.01) -> torch.optim.AdamW:
    """The course's optimizer: AdamW over ``param_groups`` (no decay on norms, biases,
    embeddings)."""
    return torch.optim.AdamW(param_groups(model, weight_decay=weight_decay), lr=lr)


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate multiplier: linear warm-up, then cosine decay to zero."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def training_autocast(device: torch.device | str,
                      autocast_dtype: torch.dtype | None | str = "auto") -> torch.dtype | None:
    """The autocast dtype ``train`` uses: ``"auto"`` is None (FP32) off CUDA, and on a CUDA GPU
    bf16 (compute capability >= 8) or fp16 (older, e.g. a T4: ``train`` adds a GradScaler)."""
    if autocast_dtype != "auto":
        if autocast_dtype is not None and not isinstance(autocast_dtype, torch.dtype):
            raise ValueError(f"autocast_dtype must be 'auto', None or a torch.dtype, "
                             f"got {autocast_dtype!r}")
        return autocast_dtype
    device = torch.device(device)
    return amp_dtype(device) if device.type == "cuda" else None


def train(model: nn.Module, loader, *, cfg: TrainConfig = TrainConfig(),
          device: torch.device | str = "cpu", val_loader=None,
          optimizer: torch.optim.Optimizer | None = None, loss_fn: LossFn | None = None,
          autocast_dtype: torch.dtype | None | str = "auto",
          scaler: torch.amp.GradScaler | None = None,
          callback: Callable[[int, float, nn.Module], None] | None = None,
          max_steps: int | None = None, inject_inf_at: Iterable[int] = (),
          progress: bool = True) -> History:
    """Train ``model`` in place and return its history: the course's one loop around the one
    step (``train_step``). ``autocast_dtype``: see ``training_autocast``; None trains in FP32
    everywhere. ``inject_inf_at``: step numbers whose gradients get an inf (lesson 04 watches
    the scaler skip them). The learning-rate schedule advances only on steps the optimizer
    took: a step the scaler skipped leaves it where it was."""
    cfg.validate()
    device = torch.device(device)
    autocast_dtype = training_autocast(device, autocast_dtype)
    if autocast_dtype == torch.float16 and device.type == "cuda" and scaler is None:
        scaler = make_scaler(device)   # fp16 gradients underflow without one
    model.to(device)
    loss_fn = loss_fn or task_loss(cfg.task)
    opt = optimizer or adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if len(loader) == 0:
        raise ValueError("loader yields no batches: nothing to train on (is the dataset empty, "
                         "or smaller than a drop_last batch?)")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    total = cfg.epochs * len(loader) if max_steps is None else min(max_steps, cfg.epochs * len(loader))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_cosine(s, total, max(1, int(cfg.warmup_frac * total))))
    inject = set(inject_inf_at)
    with seeded(cfg.seed, device):   # dropout draws; the caller's generator is left as it was
        hist, step, t_start = History(), 0, time.perf_counter()
        bar = tqdm(total=total, desc="training", disable=not progress, leave=False)
        for epoch in range(cfg.epochs):
            model.train()
            t0, losses = time.perf_counter(), []
            for batch in loader:
                if step >= total:
                    break
                t_step = time.perf_counter()
                value, skipped = train_step(model, to_device(batch, device), opt, device=device,
                                            dtype=autocast_dtype, loss_fn=loss_fn, scaler=scaler,
                                            grad_clip=cfg.grad_clip, inject_inf=step in inject)
                if not skipped:   # a skipped step did not call opt.step(): keep the schedule
                    sched.step()
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


@torch.no_grad()
def predict(model: nn.Module, loader, *, device: torch.device | str = "cpu",
            autocast_dtype: torch.dtype | None = None,
            context: Callable[[], contextlib.AbstractContextManager] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Model outputs for every item, returned in dataset order with the dataset indices.

    ``context``, if given, is called once per batch and entered around the forward pass: how a
    caller runs the model its own way (lesson 14's rungs: their attention kernel and precision)
    without a loop of its own."""
    device = torch.device(device)
    model.eval().to(device)
    outs, idx = [], []
    with warnings.catch_warnings():
        # torch's nn.TransformerEncoder (lesson 01's nested-tensor copies) announces the
        # prototype status of nested tensors on every call.
        warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
        return _predict(model, loader, device, autocast_dtype, context, outs, idx)


def _predict(model, loader, device, autocast_dtype, context, outs, idx):
    for batch in loader:
        batch = to_device(batch, device)
        with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None), \
                (context() if context is not None else contextlib.nullcontext()):
            outs.append(model(batch["input_ids"], batch["attention_mask"]).float().cpu())
        idx.append(batch["index"].cpu())
    index = torch.cat(idx)
    order = torch.argsort(index)
    return torch.cat(outs)[order], index[order]


@torch.no_grad()
def correct(model: nn.Module, loader, *, device: torch.device | str = "cpu",
            use_mask: bool = True) -> torch.Tensor:
    """Whether ``model`` classifies each item of ``loader``'s dataset right, in dataset order
    (by the items' ``"index"``). ``use_mask=False`` passes an all-True mask: padding is attended
    like any token, as with a padding function that returns no mask (lesson 01)."""
    device = torch.device(device)
    model.eval().to(device)
    hits, idx = [], []
    for batch in loader:
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        out = model(ids, mask if use_mask else torch.ones_like(mask))
        hits.append(out.argmax(-1).cpu() == batch["labels"])
        idx.append(batch["index"].cpu())
    return torch.cat(hits)[torch.argsort(torch.cat(idx))]


def evaluate(model: nn.Module, loader, *, device: torch.device | str = "cpu",
             task: str = "classification", autocast_dtype: torch.dtype | None = None,
             context: Callable[[], contextlib.AbstractContextManager] | None = None
             ) -> dict[str, float]:
    """Accuracy (classification) or MSE and MAE (regression) over a loader (``context``: see
    ``predict``)."""
    _check_task(task)
    out, index = predict(model, loader, device=device, autocast_dtype=autocast_dtype,
                         context=context)
    ds = loader.dataset
    if task == "regression":
        target = torch.tensor([ds[int(i)]["rating"] for i in index], dtype=torch.float32)
        err = out - target
        return {"mse": float((err ** 2).mean()), "mae": float(err.abs().mean())}
    labels = torch.tensor([ds[int(i)]["label"] for i in index])
    # a count over a count, in Python floats: 1,987 of 2,000 prints as 99.4% everywhere
    if len(labels) == 0:
        raise ValueError("loader yields no examples: nothing to evaluate")
    return {"accuracy": int((out.argmax(-1) == labels).sum()) / len(labels)}


DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16,
                                         "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    name: str                   # "fp32", "bf16" or "fp16"
    dtype: torch.dtype | None   # autocast dtype; None = no autocast
    use_scaler: bool            # fp16 needs a GradScaler
    reason: str = ""


def precision(name: str, *, parameter: str = "precision_name") -> Precision:
    """The recipe for one of ``DTYPES``: FP16 always comes with a gradient scaler. A bad name
    is reported under ``parameter``, the caller's argument that carried it."""
    if name not in DTYPES:
        raise ValueError(f"{parameter} must be one of {list(DTYPES)}, got {name!r}")
    return Precision(name, DTYPES[name], name == "fp16")


def precision_of(dtype: torch.dtype | None) -> str:
    """The name in ``DTYPES`` of an autocast dtype (None: "fp32")."""
    names = {v: k for k, v in DTYPES.items()}
    if dtype not in names:
        raise ValueError(f"dtype must be one of {list(names)}, got {dtype!r}")
    return names[dtype]


def choose_precision(device: torch.device | str) -> Precision:
    """BF16 where the device has fast BF16, FP16 + scaler on older CUDA GPUs, else FP32."""
    device = torch.device(device)
    dt = amp_dtype(device)
    if dt == torch.bfloat16:
        return Precision("bf16", dt, False, f"{device.type} has bf16 instructions")
    if dt == torch.float16 and device.type == "cuda":
        return Precision("fp16", dt, True, "GPU without bf16 tensor cores: fp16 with a GradScaler")
    return Precision("fp32", None, False, f"no fast low-precision math on {device.type}")


def make_scaler(device: torch.device | str, *, enabled: bool = True, init_scale: float = 2.0**16,
                growth_interval: int = 2000) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for ``device`` (works on CPU too)."""
    if not init_scale > 0 or not math.isfinite(init_scale):
        raise ValueError(f"init_scale must be a finite number > 0, got {init_scale}")
    if growth_interval < 1:
        raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
    return torch.amp.GradScaler(torch.device(device).type, init_scale=init_scale,
                                growth_interval=growth_interval, enabled=enabled)


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
