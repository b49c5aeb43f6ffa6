"""Pruning the course encoder: masks (unstructured) and smaller dense models (structured).

Unstructured pruning uses ``torch.nn.utils.prune`` (PyTorch's pruning tutorial): a mask
``weight_mask`` and the original ``weight_orig`` are stored, and a forward pre-hook recomputes
``weight = weight_orig * weight_mask`` before each call. Magnitude pruning is L1 (Han et al.,
2015, "Learning both weights and connections"), random pruning draws the mask at random;
both work per layer or globally (one threshold over every pruned tensor).

The course model's matrices are all ``nn.Linear`` modules (``qkv``, ``proj``, ``fc1``, ``fc2``,
the head), so each owns its weight and calls it through its own forward: the hook always runs.
Pitfalls handled here (each shown in lesson 05):

* ``prune.*`` works on a module that *owns* the parameter; ``nn.Transformer`` has no
  ``weight``, so the pruned tensors are listed explicitly (``prunable``).
* torch's ``nn.MultiheadAttention`` (not the course model's attention) reads
  ``out_proj.weight`` directly without calling ``out_proj``, so the hook never refreshes it and
  the second backward fails. It is excluded by default; ``include_out_proj=True`` adds a hook
  on the attention module that refreshes it.
* ``copy.deepcopy`` fails on a model whose ``weight`` is a computed (non-leaf) tensor:
  ``copy_model`` recomputes those tensors without autograd first.
* ``amount`` in ``torch.nn.utils.prune`` is a share of the weights *still unpruned*; here it is
  the total sparsity to reach, so pruning 50% then 75% gives 75%, not 87.5%.

Structured pruning (whole neurons, heads and layers removed: a smaller dense model) is in
``course_lib.pruning.structured``.
"""
from __future__ import annotations

import copy
import math
import warnings

import torch
from torch import nn
from torch.nn.utils import prune

from course_lib.core.train import History, TrainConfig, train

METHODS = ("magnitude", "random")
SCOPES = ("layer", "global")



def _check_amount(amount: float, name: str = "amount") -> float:
    if not isinstance(amount, (int, float)) or not 0.0 <= float(amount) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {amount!r}")
    return float(amount)


def _check_choice(value: str, name: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def prunable(model: nn.Module, *, include_out_proj: bool = False,
             include_head: bool = False) -> list[tuple[str, nn.Module, str]]:
    """``(qualified name, owning module, parameter name)`` of every weight pruning applies to.

    Every ``nn.Linear`` weight (the course model's ``qkv``, ``proj``, ``fc1``, ``fc2``; the head
    only with ``include_head``). In torch's ``nn.MultiheadAttention``: ``in_proj_weight``, and
    ``out_proj.weight`` only with ``include_out_proj`` (see the module docstring). Embeddings
    are never pruned.
    """
    out: list[tuple[str, nn.Module, str]] = []
    attn_children: set[int] = set()
    for name, mod in model.named_modules():
        if isinstance(mod, nn.MultiheadAttention):
            attn_children.add(id(mod.out_proj))
            if mod.in_proj_weight is not None or hasattr(mod, "in_proj_weight_orig"):
                out.append((f"{name}.in_proj_weight", mod, "in_proj_weight"))
            if include_out_proj:
                out.append((f"{name}.out_proj.weight", mod.out_proj, "weight"))
        elif isinstance(mod, nn.Linear) and id(mod) not in attn_children:
            if name == "head" and not include_head:
                continue
            out.append((f"{name}.weight", mod, "weight"))
    return out


def is_pruned(module: nn.Module, pname: str = "weight") -> bool:
    return hasattr(module, f"{pname}_mask")


def effective_weight(module: nn.Module, pname: str = "weight") -> torch.Tensor:
    """The weight a forward pass uses (``orig * mask`` when pruned), detached."""
    if is_pruned(module, pname):
        return (getattr(module, f"{pname}_orig") * getattr(module, f"{pname}_mask")).detach()
    return getattr(module, pname).detach()


class _RefreshOutProj:
    """Pre-hook on ``nn.MultiheadAttention``: recompute its pruned ``out_proj.weight``.

    Stateless (no reference to a module), so ``copy_model`` can deep-copy it.
    """

    def __call__(self, mha: nn.Module, _args) -> None:
        out = mha.out_proj
        for hook in out._forward_pre_hooks.values():
            if isinstance(hook, prune.BasePruningMethod):
                hook(out, None)


def _attach_out_proj_refresh(model: nn.Module) -> None:
    for mod in model.modules():
        if isinstance(mod, nn.MultiheadAttention) and is_pruned(mod.out_proj):
            if not any(isinstance(h, _RefreshOutProj) for h in mod._forward_pre_hooks.values()):
                mod.register_forward_pre_hook(_RefreshOutProj())


def _sparsity(t: torch.Tensor) -> float:
    return float((t == 0).sum()) / t.numel()


def prune_unstructured(model: nn.Module, *, amount: float, method: str = "magnitude",
                       scope: str = "layer", include_out_proj: bool = False,
                       include_head: bool = False, seed: int = 0,
                       only: tuple[str, ...] | None = None) -> list[dict]:
    """Mask ``amount`` of the prunable weights (in every layer, or globally) in place.

    ``amount`` is the *total* sparsity to reach (already-pruned weights count), so calling this
    again with a larger amount prunes iteratively. ``only``: prune just the weights whose
    qualified name starts with one of these prefixes (``("blocks.2.ff.",)``; a sensitivity
    scan). Returns ``sparsity_report(model)``.
    """
    amount = _check_amount(amount)
    _check_choice(method, "method", METHODS)
    _check_choice(scope, "scope", SCOPES)
    targets = prunable(model, include_out_proj=include_out_proj, include_head=include_head)
    if only is not None:
        prefixes = (only,) if isinstance(only, str) else tuple(only)
        names = [t[0] for t in targets]
        targets = [t for t in targets if t[0].startswith(prefixes)]
        if not targets:
            raise ValueError(f"only must name prefixes of prunable weights, got {only!r}; they are "
                             f"{names}")
    if not targets:
        raise ValueError("model has no prunable weights (nn.Linear or nn.MultiheadAttention)")
    fn = prune.l1_unstructured if method == "magnitude" else prune.random_unstructured
    cls = prune.L1Unstructured if method == "magnitude" else prune.RandomUnstructured
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)   # random pruning draws from the global generator
        if scope == "layer":
            for name, mod, pname in targets:
                current = _sparsity(effective_weight(mod, pname))
                fn(mod, pname, amount=_increment(amount, current, name))
        else:
            zeros = sum(int((effective_weight(m, p) == 0).sum()) for _, m, p in targets)
            total = sum(getattr(m, p if not is_pruned(m, p) else f"{p}_orig").numel()
                        for _, m, p in targets)
            prune.global_unstructured([(m, p) for _, m, p in targets], pruning_method=cls,
                                      amount=_increment(amount, zeros / total, "global"))
    if include_out_proj:
        _attach_out_proj_refresh(model)
    return sparsity_report(model, include_out_proj=True, include_head=include_head)


def _increment(target: float, current: float, where: str) -> float:
    """Share of the still-unpruned weights to prune so that ``target`` of all are pruned."""
    if target + 1e-9 < current:
        raise ValueError(f"amount ({target:.3f}) is below the sparsity {where} already has "
                         f"({current:.3f}): pruning cannot restore weights")
    return 0.0 if current >= 1.0 else min(1.0, max(0.0, (target - current) / (1.0 - current)))


def sparsity_report(model: nn.Module, *, include_out_proj: bool = True,
                    include_head: bool = True) -> list[dict]:
    """The real sparsity of every prunable weight: ``name, zeros, numel, sparsity, pruned``."""
    rows = []
    for name, mod, pname in prunable(model, include_out_proj=include_out_proj,
                                     include_head=include_head):
        w = effective_weight(mod, pname)
        zeros = int((w == 0).sum())
        rows.append({"name": name, "zeros": zeros, "numel": w.numel(),
                     "sparsity": zeros / w.numel(), "pruned": is_pruned(mod, pname)})
    return rows


def global_sparsity(report: list[dict]) -> float:
    """Zeros over all weights of a ``sparsity_report``."""
    total = sum(r["numel"] for r in report)
    if total == 0:
        raise ValueError("report must list at least one non-empty weight")
    return sum(r["zeros"] for r in report) / total


def make_permanent(model: nn.Module) -> int:
    """``prune.remove`` on every pruned tensor (zeros stay, masks and hooks go); returns count."""
    n = 0
    for mod in list(model.modules()):
        for key, hook in list(mod._forward_pre_hooks.items()):
            if isinstance(hook, _RefreshOutProj):
                del mod._forward_pre_hooks[key]
        for hook in list(mod._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                prune.remove(mod, hook._tensor_name)
                n += 1
    return n


def copy_model(model: nn.Module) -> nn.Module:
    """``copy.deepcopy`` that also works while pruning hooks are attached.

    The pruned ``weight`` attributes are non-leaf tensors (``orig * mask`` with autograd
    history), which deepcopy refuses; they are recomputed without autograd first (the hook
    recomputes them, with autograd, at the next forward pass anyway).
    """
    with torch.no_grad():
        for mod in model.modules():
            for hook in mod._forward_pre_hooks.values():
                if isinstance(hook, prune.BasePruningMethod):
                    setattr(mod, hook._tensor_name, hook.apply_mask(mod))
    return copy.deepcopy(model)


# ---- storage, 2:4 sparsity, fine-tuning --------------------------------------------------------

def csr_nbytes(t: torch.Tensor) -> int:
    """Bytes of a 2-D tensor stored as CSR (values + column indices + row pointers)."""
    if t.dim() != 2:
        raise ValueError(f"t must be 2-D, got shape {tuple(t.shape)}")
    with warnings.catch_warnings():   # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        s = t.detach().to_sparse_csr()
    return sum(x.numel() * x.element_size()
               for x in (s.values(), s.col_indices(), s.crow_indices()))


def csr_formula_bytes(t: torch.Tensor, *, index_bytes: int = 8) -> int:
    """Bytes a 2-D tensor takes as CSR by the formula: 4 per kept FP32 value, ``index_bytes``
    per kept value's column index and per row pointer (rows + 1); torch stores int64
    (``index_bytes=8``, equal to ``csr_nbytes``), int32 halves the indices."""
    if t.dim() != 2:
        raise ValueError(f"t must be 2-D, got shape {tuple(t.shape)}")
    if index_bytes not in (4, 8):
        raise ValueError(f"index_bytes must be 4 (int32) or 8 (int64), got {index_bytes}")
    nnz = int((t != 0).sum())
    return t.element_size() * nnz + index_bytes * (nnz + t.shape[0] + 1)


def storage(model: nn.Module) -> dict[str, int]:
    """Dense vs CSR bytes of every prunable weight (out_proj and head included)."""
    dense = csr = nnz = numel = 0
    for _, mod, pname in prunable(model, include_out_proj=True, include_head=True):
        w = effective_weight(mod, pname)
        dense += w.numel() * w.element_size()
        csr += csr_nbytes(w)
        nnz += int((w != 0).sum())
        numel += w.numel()
    return {"dense_bytes": dense, "csr_bytes": csr, "nonzeros": nnz, "numel": numel}


def semi_structured_mask(weight: torch.Tensor, *, n: int = 2, m: int = 4) -> torch.Tensor:
    """Boolean mask keeping the ``n`` largest |w| in every ``m`` consecutive inputs (2:4).

    The pattern NVIDIA sparse tensor cores accelerate (Mishra et al., 2021, "Accelerating
    Sparse Deep Neural Networks"); ``torch.sparse.to_sparse_semi_structured`` needs it.
    """
    if not 1 <= n <= m:
        raise ValueError(f"n must be in [1, m={m}], got {n}")
    if weight.dim() != 2 or weight.shape[1] % m:
        raise ValueError(f"weight must be 2-D with columns divisible by m={m}, "
                         f"got shape {tuple(weight.shape)}")
    groups = weight.detach().abs().reshape(weight.shape[0], -1, m)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(n, dim=-1).indices, True)
    return keep.reshape(weight.shape)


def fine_tune(model: nn.Module, loader, *, steps: int, lr: float = 5e-4,
              device: torch.device | str = "cpu", seed: int = 0,
              progress: bool = False) -> History:
    """A short fine-tune with ``course_lib.core.train.train``: ``steps`` steps, warm-up then cosine.

    Masks stay applied: the pruning hooks recompute ``orig * mask`` at every step, so pruned
    weights stay exactly zero while the others adapt.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    epochs = max(1, math.ceil(steps / max(1, len(loader))))
    cfg = TrainConfig(epochs=epochs, lr=lr, warmup_frac=0.1, seed=seed)
    return train(model, loader, cfg=cfg, device=device, max_steps=steps, progress=progress)


def sparse_model_bytes(model: nn.Module) -> dict[str, float]:
    """The whole model's parameter bytes with every prunable weight (``storage``'s) stored as
    CSR and everything else dense, against all of it dense: ``"csr_bytes"``, ``"dense_bytes"``,
    ``"ratio"``, and ``"removed"``, the share of all parameters that are zero in those weights."""
    s = storage(model)
    owned = {id(getattr(m, f"{n}_orig" if hasattr(m, f"{n}_orig") else n))
             for _, m, n in prunable(model, include_out_proj=True, include_head=True)}
    others = [p for p in model.parameters() if id(p) not in owned]
    other_bytes = sum(p.numel() * p.element_size() for p in others)
    numel = s["numel"] + sum(p.numel() for p in others)
    dense = s["dense_bytes"] + other_bytes
    csr = s["csr_bytes"] + other_bytes
    return {"csr_bytes": csr, "dense_bytes": dense, "ratio": csr / dense,
            "removed": (s["numel"] - s["nonzeros"]) / numel}
