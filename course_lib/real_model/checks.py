"""What lesson 15 checks around the real model, one function each.

``real_model`` loads all-MiniLM-L6-v2 and embeds sentences; this module holds what the lesson
measures around it: timed calls (``embed_call``), the batch of typical sentences
(``typical_indices``), whether "eager attention" really ran another kernel (``attention_kernels``),
how much of a forward pass attention can be at a given length (``attention_flop_share``), what
nearest-neighbour agreement random noise of the same mean cosine keeps (``noise_at_cosine``, the
calibration the agreement figures need), and a held-out split that keeps each docstring on one
side (``split_by_group``: sentences of one docstring are near-duplicates of each other).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from unittest import mock

import torch
import torch.nn.functional as F

from course_lib.real_model import encoder as R

__all__ = ["embed_call", "typical_indices", "attention_kernels", "attention_flop_share",
           "noise_at_cosine", "split_by_group", "batches_of"]


def embed_call(model, ids: Sequence[torch.Tensor], *,
               batches: Sequence[Sequence[int]] | None = None,
               pad_id: int = 0, fixed_length: int | None = None,
               autocast_dtype: torch.dtype | None = None,
               device: torch.device | str = "cpu") -> Callable[[], torch.Tensor]:
    """A no-argument function that embeds ``ids`` with ``model`` (``real_model.encoder.embed``):
    what ``bench.compare`` times. ``batches`` defaults to one batch of every id."""
    plan = [list(range(len(ids)))] if batches is None else batches
    return lambda: R.embed(model, ids, batches=plan, pad_id=pad_id, fixed_length=fixed_length,
                           autocast_dtype=autocast_dtype, device=device)


def batches_of(indices: Sequence[int], size: int) -> list[list[int]]:
    """Positions ``0 .. len(indices) - 1`` in consecutive batches of ``size`` (the last may be
    shorter; nothing is dropped)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    n = len(indices)
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def typical_indices(lengths: Sequence[int], n: int) -> list[int]:
    """The ``n`` sentences whose length is closest to the median (ties in index order): one
    batch of typical sentences that every variant is timed on."""
    if not 1 <= n <= len(lengths):
        raise ValueError(f"n must be in [1, {len(lengths)}], got {n}")
    med = statistics.median(lengths)
    return sorted(range(len(lengths)), key=lambda i: (abs(lengths[i] - med), i))[:n]


def attention_kernels(model, ids: Sequence[torch.Tensor], *, pad_id: int = 0) -> dict:
    """Run one forward pass of ``model`` on ``ids`` and count the calls to PyTorch's fused
    ``scaled_dot_product_attention``: a model set to "eager" attention must make none and a
    "sdpa" one one per layer. Returns the count, the layers and the configured implementation, so
    a lesson can show that switching the implementation really changed the kernel."""
    bert = R._bert(model)
    real = F.scaled_dot_product_attention
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with mock.patch.object(F, "scaled_dot_product_attention", counting), \
            mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", counting):
        R.embed(bert, ids, batches=[list(range(len(ids)))], pad_id=pad_id)
    return {"implementation": getattr(bert.config, "_attn_implementation", None),
            "sdpa_calls": len(calls), "layers": bert.config.num_hidden_layers}


def attention_flop_share(*, d_model: int, d_ff: int, length: int) -> float:
    """Share of one encoder layer's multiply-adds spent in attention's two length-by-length
    products (scores ``QKᵀ`` and ``weights · V``) at ``length`` tokens, counted per token:
    ``2·L·d`` for attention against ``4·d²`` (Q, K, V, output projections) ``+ 2·d·d_ff`` (the
    feed-forward block). Softmax, layer norms and the like are left out. At short lengths the
    projections dominate, so the attention kernel hardly moves the total time."""
    for name, v in (("d_model", d_model), ("d_ff", d_ff), ("length", length)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    attn = 2 * length * d_model
    return attn / (attn + 4 * d_model ** 2 + 2 * d_model * d_ff)


def noise_at_cosine(reference: torch.Tensor, target: float, *, generator: torch.Generator,
                    tol: float = 1e-4) -> torch.Tensor:
    """``reference`` (N, d, rows L2-normalised) plus isotropic Gaussian noise, re-normalised,
    with the noise scale found by bisection so that the mean cosine to ``reference`` is
    ``target`` (within ``tol``). A variant's nearest-neighbour agreement means something only
    beside what random damage of the same size keeps. One noise draw is reused across the
    bisection, so the result is a deterministic function of the generator's state."""
    if not 0 < target < 1:
        raise ValueError(f"target cosine must be in (0, 1), got {target}")
    noise = torch.randn(reference.shape, generator=generator, dtype=reference.dtype)
    lo, hi = 0.0, 1.0

    def at(scale: float) -> torch.Tensor:
        return F.normalize(reference + scale * noise, dim=-1)

    while float((at(hi) * reference).sum(-1).mean()) > target:
        hi *= 2
        if hi > 1e6:
            raise ValueError("could not reach the target cosine")
    for _ in range(60):
        mid = (lo + hi) / 2
        c = float((at(mid) * reference).sum(-1).mean())
        if abs(c - target) <= tol:
            return at(mid)
        lo, hi = (mid, hi) if c > target else (lo, mid)
    return at((lo + hi) / 2)


def split_by_group(groups: Sequence[int], *, held_out: float = 0.5,
                   seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices split into (seen, unseen) so that all items of one group land on the same side:
    a seeded random ``held_out`` share of the groups is unseen. Sentences of one docstring
    share words and structure, so splitting them by position would leak."""
    if not 0 < held_out < 1:
        raise ValueError(f"held_out must be in (0, 1), got {held_out}")
    keys = sorted(set(groups))
    if len(keys) < 2:
        raise ValueError(f"need at least 2 groups to split, got {len(keys)}")
    order = torch.randperm(len(keys), generator=torch.Generator().manual_seed(seed)).tolist()
    n_out = min(len(keys) - 1, max(1, round(held_out * len(keys))))
    unseen_keys = {keys[i] for i in order[:n_out]}
    seen = [i for i, g in enumerate(groups) if g not in unseen_keys]
    unseen = [i for i, g in enumerate(groups) if g in unseen_keys]
    return seen, unseen
