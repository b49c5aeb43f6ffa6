"""Optimizers compared on one budget: SGD, SGD + momentum, Adam, AdamW and LAMB.

* ``Lamb`` follows Algorithm 2 of You et al., "Large Batch Optimization for Deep Learning:
  Training BERT in 76 minutes" (ICLR 2020): Adam's bias-corrected moments give a direction
  ``r = m_hat / (sqrt(v_hat) + eps)``, decoupled weight decay is added (``u = r + wd * x``),
  and each parameter tensor (a "layer") takes a step of length ``lr * ||x|| / ||u||`` along
  ``u``, i.e. the update is rescaled by the layer-wise *trust ratio* ``||x|| / ||u||`` (the
  paper's scaling function phi is the identity here). Where ``||x|| = 0`` or ``||u|| = 0`` the
  ratio is undefined (0/0, or a freshly zero-initialised bias that would never move) and is set
  to 1, as in the reference implementations (NVIDIA apex ``FusedLAMB``, TensorFlow Addons).
* Adam with ``weight_decay`` adds ``wd * x`` to the gradient (coupled L2: the decay is then
  divided by ``sqrt(v)``); AdamW subtracts ``lr * wd * x`` from the weights directly
  (decoupled decay, Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019).
* Memory per parameter follows the accounting of Rajbhandari et al., "ZeRO" (SC 2020):
  mixed-precision training keeps fp16/bf16 weights and gradients (2 + 2 bytes), an fp32
  master copy (4) and fp32 optimizer states (4 per state value), i.e. 16 bytes for Adam.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .train import History, TrainConfig, evaluate, train

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw", "lamb")
IMPLEMENTATIONS = ("for_loop", "foreach", "fused")
# fp32 values of optimizer state kept per parameter element.
STATE_VALUES = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2, "lamb": 2}


def check_hyperparameters(*, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                          eps: float = 1e-6, weight_decay: float = 0.0) -> None:
    """Raise ``ValueError`` naming the bad hyperparameter and its allowed range."""
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and 0.0 < lr <= 10.0):
        raise ValueError(f"lr must be a finite number in (0, 10], got {lr!r}")
    if len(betas) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    for i, b in enumerate(betas):
        if not (isinstance(b, (int, float)) and 0.0 <= b < 1.0):
            raise ValueError(f"betas[{i}] must be in [0, 1), got {b!r}")
    if not (isinstance(eps, (int, float)) and eps > 0.0):
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0.0):
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2020, Algorithm 2) with trust ratio 1 for zero weights or updates.

    State per parameter: ``exp_avg`` and ``exp_avg_sq`` (two fp32 values per element, like
    Adam) and the integer ``step``. ``last_trust_ratio`` (per parameter, in ``state``) is kept
    for inspection: it is a Python float, not a tensor, so it costs no tensor memory.
    """

    def __init__(self, params: Iterable, *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, bias_correction: bool = True):
        check_hyperparameters(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults)

    @staticmethod
    def trust_ratio(weight_norm: torch.Tensor, update_norm: torch.Tensor) -> torch.Tensor:
        """``||x|| / ||u||``, and 1 where either norm is zero."""
        ok = (weight_norm > 0) & (update_norm > 0)
        return torch.where(ok, weight_norm / torch.where(ok, update_norm, 1.0),
                           torch.ones_like(weight_norm))

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                grad = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
                else:
                    m_hat, v_hat = m, v
                update = m_hat / (v_hat.sqrt() + group["eps"])
                x = p.float()
                if group["weight_decay"]:
                    update.add_(x, alpha=group["weight_decay"])
                ratio = self.trust_ratio(x.norm(), update.norm())
                state["last_trust_ratio"] = float(ratio)
                p.add_((update * (-group["lr"] * ratio)).to(p.dtype))
        return loss


def make_optimizer(name: str, params: Iterable, *, lr: float, weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                   momentum: float = 0.9, implementation: str = "for_loop"
                   ) -> torch.optim.Optimizer:
    """One of ``OPTIMIZERS``, built with a named kernel implementation.

    ``implementation``: ``for_loop`` (one small kernel per parameter tensor), ``foreach``
    (multi-tensor kernels over the whole list) or ``fused`` (one fused kernel; torch has it for
    SGD, Adam and AdamW). Our ``Lamb`` has the for-loop form only. ``adam`` applies
    ``weight_decay`` as coupled L2, ``adamw`` as decoupled decay.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"name must be one of {OPTIMIZERS}, got {name!r}")
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, "
                         f"got {implementation!r}")
    check_hyperparameters(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    if name == "lamb":
        if implementation != "for_loop":
            raise ValueError(f"implementation must be 'for_loop' for lamb, got {implementation!r}")
        return Lamb(params, lr=lr, betas=betas, eps=max(eps, 1e-6), weight_decay=weight_decay)
    impl = {"for_loop": dict(foreach=False), "foreach": dict(foreach=True),
            "fused": dict(fused=True)}[implementation]
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum if name == "sgd_momentum" else 0.0,
                               weight_decay=weight_decay, **impl)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **impl)


def state_bytes(optimizer: torch.optim.Optimizer, *, include_scalars: bool = True) -> int:
    """Bytes held by the optimizer's state tensors (``include_scalars``: also 0-d tensors
    such as Adam's ``step``)."""
    total = 0
    for st in optimizer.state.values():
        for value in st.values():
            if torch.is_tensor(value) and (include_scalars or value.dim() > 0):
                total += value.numel() * value.element_size()
    return total


def memory_per_parameter(name: str, *, precision: str = "fp32") -> dict[str, int]:
    """Bytes per parameter for weights, gradients, an fp32 master copy and optimizer states.

    ``precision="fp32"``: everything fp32 (this is also what ``torch.autocast`` keeps: it casts
    on the fly and saves activation memory, not these). ``"mixed"``: 16-bit weights and
    gradients plus an fp32 master copy, the ZeRO paper's accounting.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"name must be one of {OPTIMIZERS}, got {name!r}")
    if precision not in ("fp32", "mixed"):
        raise ValueError(f"precision must be 'fp32' or 'mixed', got {precision!r}")
    half = precision == "mixed"
    row = {"weights": 2 if half else 4, "gradients": 2 if half else 4,
           "master": 4 if half else 0, "states": 4 * STATE_VALUES[name]}
    row["total"] = sum(row.values())
    return row


def single_step_delta(name: str, weight: torch.Tensor, grads: Sequence[torch.Tensor], *,
                      lr: float, weight_decay: float) -> torch.Tensor:
    """How much ``weight`` moves after one step per gradient in ``grads`` (new - old)."""
    p = nn.Parameter(weight.detach().clone())
    opt = make_optimizer(name, [p], lr=lr, weight_decay=weight_decay)
    for g in grads:
        p.grad = g.detach().clone().to(p.dtype)
        opt.step()
    return (p.detach() - weight).detach()


@dataclass
class RunResult:
    optimizer: str
    seed: int
    history: History
    curve_steps: list[int] = field(default_factory=list)
    curve_accuracy: list[float] = field(default_factory=list)
    final_accuracy: float = float("nan")
    seconds: float = 0.0

    @property
    def curve_mean(self) -> float:
        """Mean validation accuracy over the evaluated steps: the area under the learning
        curve per step. Higher means it got good sooner (convergence speed in one number)."""
        return sum(self.curve_accuracy) / len(self.curve_accuracy) if self.curve_accuracy else float("nan")

    def steps_to(self, target: float) -> int | None:
        """First evaluated step whose validation accuracy reached ``target`` (None: never)."""
        for s, a in zip(self.curve_steps, self.curve_accuracy):
            if a >= target:
                return s
        return None


def run_budget(build_model: Callable[[int], nn.Module], make_loader: Callable[[int], object],
               val_loader, *, specs: dict[str, dict], seeds: Sequence[int] = (0, 1),
               epochs: int = 1, max_steps: int | None = None, eval_every: int = 10,
               device: torch.device | str = "cpu", progress: bool = False,
               on_run: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Train a fresh model per (optimizer, seed) with the same data, schedule and step budget.

    ``specs`` maps an optimizer name to ``make_optimizer`` keywords (``lr``, ``weight_decay``,
    ...); ``build_model(seed)`` and ``make_loader(seed)`` take the seed, so every optimizer
    sees the same initial weights and batch order for a given seed. The schedule is the
    course's warm-up + cosine (``course_lib.train``), applied to each optimizer's own ``lr``.
    Validation accuracy is measured every ``eval_every`` steps and at the end.
    """
    if not specs:
        raise ValueError("specs must name at least one optimizer")
    if eval_every < 1:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}")
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    results = []
    for seed in seeds:
        for name, kw in specs.items():
            kw = dict(kw)
            kind = kw.pop("optimizer", name)
            model = build_model(seed)
            opt = make_optimizer(kind, model.parameters(), **kw)
            res = RunResult(name, seed, History())

            def callback(step: int, loss: float, m: nn.Module, res=res) -> None:
                if (step + 1) % eval_every == 0:
                    res.curve_steps.append(step + 1)
                    res.curve_accuracy.append(evaluate(m, val_loader, device=device)["accuracy"])
                    m.train()

            t0 = time.perf_counter()
            res.history = train(model, make_loader(seed), device=device, optimizer=opt,
                                cfg=TrainConfig(epochs=epochs, lr=min(kw["lr"], 0.5), seed=seed),
                                callback=callback, max_steps=max_steps, progress=progress)
            res.seconds = time.perf_counter() - t0
            n_steps = len(res.history.step_loss)
            if not res.curve_steps or res.curve_steps[-1] != n_steps:
                res.curve_steps.append(n_steps)
                res.curve_accuracy.append(evaluate(model, val_loader, device=device)["accuracy"])
            res.final_accuracy = res.curve_accuracy[-1]
            results.append(res)
            if on_run is not None:
                on_run(res)
    return results


def summarize(results: Sequence[RunResult], *, target: float | None = None) -> dict[str, dict]:
    """Per optimizer: mean and spread (max - min) of final accuracy over seeds, and the mean
    number of steps to reach ``target`` accuracy (runs that never reach it count as None)."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.optimizer for r in results):
        runs = [r for r in results if r.optimizer == name]
        accs = [r.final_accuracy for r in runs]
        row = {"mean_accuracy": sum(accs) / len(accs), "spread": max(accs) - min(accs),
               "mean_curve_accuracy": sum(r.curve_mean for r in runs) / len(runs),
               "seeds": len(runs), "seconds": sum(r.seconds for r in runs) / len(runs)}
        if target is not None:
            steps = [r.steps_to(target) for r in runs]
            row["reached"] = sum(s is not None for s in steps)
            hit = [s for s in steps if s is not None]
            row["mean_steps_to_target"] = sum(hit) / len(hit) if hit else None
        out[name] = row
    return out


def lr_grid(grid: dict[str, Sequence[float]], **common) -> dict[str, dict]:
    """``run_budget`` specs for every (optimizer, learning rate) of ``grid``, named
    ``"<optimizer>@<lr>"``; ``common[optimizer]`` adds fixed keywords (e.g. weight decay)."""
    if not grid or any(not lrs for lrs in grid.values()):
        raise ValueError("grid must map each optimizer to at least one learning rate")
    return {f"{name}@{lr:g}": dict(optimizer=name, lr=lr, **common.get(name, {}))
            for name, lrs in grid.items() for lr in lrs}


def best_per_optimizer(summary: dict[str, dict], *, key: str = "mean_curve_accuracy") -> dict[str, str]:
    """For specs named ``"<optimizer>@<lr>"``, the spec with the highest ``key`` per optimizer."""
    best: dict[str, str] = {}
    for spec, row in summary.items():
        name = spec.split("@")[0]
        if name not in best or row[key] > summary[best[name]][key]:
            best[name] = spec
    return best
