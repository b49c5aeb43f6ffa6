"""The course's optimizers, built in one place, and what their state costs.

``make_optimizer`` builds every optimizer a lesson uses by name (``OPTIMIZERS``): torch's SGD
(with or without momentum), Adam, AdamW and Adafactor, and the course's ``Lamb``, each with a
named kernel implementation (lesson 12). ``adamw`` is the course's default recipe: AdamW over
``param_groups``, nanoGPT's rule of decaying only the weight matrices. ``optimizer_class`` gives
the class and options for wrappers that build the optimizer themselves (ZeRO's
``ZeroRedundancyOptimizer``, lesson 09).

What the state costs, on paper and measured: ``state_values`` counts the FP32 values an
optimizer keeps for parameters of given shapes (Rajbhandari et al., "ZeRO", SC 2020: Adam keeps
two per element; Adafactor factors a matrix's second moment into a row and a column), and
``state_bytes`` counts the bytes of a live optimizer's state tensors; lessons 09 and 12 use both.

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
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

__all__ = ["OPTIMIZERS", "IMPLEMENTATIONS", "STATE_PER_ELEMENT", "check_hyperparameters", "Lamb",
           "param_groups", "adamw", "make_optimizer", "optimizer_class", "state_values",
           "state_bytes"]

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw", "adafactor", "lamb")
IMPLEMENTATIONS = ("default", "for_loop", "foreach", "fused")
# FP32 state values kept per parameter element (Adafactor's depend on the shapes: state_values)
STATE_PER_ELEMENT = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2, "lamb": 2}

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


def make_optimizer(name: str, params: Iterable, *, lr: float, weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                   momentum: float = 0.9, implementation: str = "default"
                   ) -> torch.optim.Optimizer:
    """One of ``OPTIMIZERS``, built with a named kernel implementation.

    ``implementation``: ``default`` (torch's own choice: multi-tensor kernels when every
    parameter is on a GPU, the for-loop on a CPU), ``for_loop`` (one small kernel per parameter
    tensor), ``foreach`` (multi-tensor kernels over the whole list) or ``fused`` (one fused
    kernel; torch has it for SGD, Adam and AdamW). Our ``Lamb`` has the for-loop form only,
    Adafactor no fused form.
    ``adam`` applies ``weight_decay`` as coupled L2, ``adamw`` and ``adafactor`` as decoupled
    decay. ``params`` may be ``param_groups``: a group's own ``weight_decay`` wins.
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
        if implementation not in ("default", "for_loop"):
            raise ValueError("implementation must be 'default' or 'for_loop' for lamb, "
                             f"got {implementation!r}")
        return Lamb(params, lr=lr, betas=betas, eps=max(eps, 1e-6), weight_decay=weight_decay)
    if name == "adafactor":
        if implementation == "fused":
            raise ValueError("implementation must be 'default', 'for_loop' or 'foreach' for "
                             "adafactor (torch has no fused Adafactor), got 'fused'")
        foreach = None if implementation == "default" else implementation == "foreach"
        return torch.optim.Adafactor(params, lr=lr, weight_decay=weight_decay, foreach=foreach)
    impl = {"default": {}, "for_loop": dict(foreach=False), "foreach": dict(foreach=True),
            "fused": dict(fused=True)}[implementation]
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum if name == "sgd_momentum" else 0.0,
                               weight_decay=weight_decay, **impl)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **impl)


def optimizer_class(name: str) -> tuple[type[torch.optim.Optimizer], dict]:
    """The class and the options (besides ``lr``) that ``make_optimizer(name, ...)`` builds with
    its defaults: ``cls(params, lr=lr, **options)`` is the same optimizer (for wrappers such as
    ``ZeroRedundancyOptimizer(params, optimizer_class=cls, lr=lr, **options)``)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"name must be one of {OPTIMIZERS}, got {name!r}")
    probe = make_optimizer(name, [nn.Parameter(torch.zeros(1))], lr=1e-3)
    accepted = inspect.signature(type(probe)).parameters
    options = {k: v for k, v in probe.defaults.items() if k != "lr" and k in accepted}
    return type(probe), options


def state_values(name: str, shapes: Sequence[tuple[int, ...]]) -> int:
    """FP32 values of optimizer state ``name`` keeps for parameters of these shapes (0-d step
    counters aside). Adafactor (``torch.optim.Adafactor``, no first moment by default) keeps a
    row and a column factor of a matrix's second moment, a vector's in full."""
    if name not in OPTIMIZERS:
        raise ValueError(f"name must be one of {OPTIMIZERS}, got {name!r}")
    numel = [math.prod(s) for s in shapes]
    if name == "adafactor":
        return sum(s[0] + s[1] if len(s) == 2 else n for s, n in zip(shapes, numel))
    return STATE_PER_ELEMENT[name] * sum(numel)


def state_bytes(optimizer: torch.optim.Optimizer, *, include_scalars: bool = True) -> int:
    """Bytes held by the optimizer's state tensors (``include_scalars``: also 0-d tensors
    such as Adam's ``step``)."""
    total = 0
    for st in optimizer.state.values():
        for value in st.values():
            if torch.is_tensor(value) and (include_scalars or value.dim() > 0):
                total += value.numel() * value.element_size()
    return total
