"""Which parts of a model can lose the most weights? A sensitivity scan (lesson 05).

Uniform sparsity treats every layer alike, and layers are not alike: pruning one block's
feed-forward weights may cost nothing while the same share of another block's attention
projections costs points. The usual first step of a pruning recipe (Han et al. 2015; NVIDIA's
and Intel's pruning toolkits call it sensitivity analysis) measures it: prune one group of
weights at a time, to each sparsity, without fine-tuning, and score the model. The groups that
barely move can take a higher sparsity than the ones that do.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from course_lib.pruning.masks import copy_model, prunable, prune_unstructured

__all__ = ["groups", "scan"]


def groups(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """The course model's prunable weights grouped by block and sub-layer: ``{"block 0,
    attention": ("blocks.0.attn.",), "block 0, feed-forward": ("blocks.0.ff.",), ...}``, in
    the model's order (only groups that hold prunable weights)."""
    names = [n for n, _, _ in prunable(model)]
    out: dict[str, tuple[str, ...]] = {}
    for n in names:
        parts = n.split(".")
        if len(parts) >= 3 and parts[0] == "blocks" and parts[2] in ("attn", "ff"):
            label = f"block {parts[1]}, {'attention' if parts[2] == 'attn' else 'feed-forward'}"
            out.setdefault(label, (".".join(parts[:3]) + ".",))
    if not out:
        raise ValueError(f"model has no blocks.N.attn / blocks.N.ff weights to group, got {names}")
    return out


def scan(model: nn.Module, score: Callable[[nn.Module], float], *, amounts: Sequence[float],
         method: str = "magnitude", progress: Callable = iter) -> dict[str, list[float]]:
    """``{group: [score after pruning only that group to each of amounts]}`` (``groups``;
    each tensor of the group to the amount, no fine-tuning; ``model`` is left as it was)."""
    if not amounts:
        raise ValueError("amounts must hold at least one sparsity")
    out: dict[str, list[float]] = {}
    for label, prefixes in progress(groups(model).items()):
        out[label] = []
        for amount in amounts:
            m = copy_model(model)
            prune_unstructured(m, amount=amount, method=method, scope="layer", only=prefixes)
            out[label].append(score(m))
    return out
