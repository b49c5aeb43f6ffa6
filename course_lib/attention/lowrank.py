"""Low-rank ("factorized") attention, Linformer's way, and when it is a good approximation.

Wang et al., "Linformer: Self-Attention with Linear Complexity" (2020): the length-by-length
attention matrix ``softmax(QKᵀ/√d)`` is often close to low rank, so keys and values are first
projected along the sequence to ``rank`` rows (``K' = E K``, ``V' = F V`` with ``E, F`` of shape
``rank × L``) and attention runs against those: ``softmax(Q K'ᵀ/√d) V'``, an ``L × rank`` score
matrix instead of ``L × L``. Compute and memory grow linearly in ``L``.

Linformer *learns* ``E`` and ``F`` with the model. Without training, the natural choice is
pooling: row ``i`` of ``E = F`` averages the ``i``-th of ``rank`` equal segments of the sequence
(Nyströmformer's "landmarks" are these segment means). Random Gaussian projections would not
do: they keep inner products but not the average the softmax weights take, so an untrained model
with them computes something else entirely. How good pooling is depends on the attention matrix
itself, which ``effective_rank`` measures: diffuse attention (small scores) is nearly rank one
and survives; sharp attention (each query on a few keys) is full rank and does not.
"""
from __future__ import annotations

import math

import torch

__all__ = ["pooling", "lowrank_attention", "relative_error", "effective_rank",
           "attention_flops", "sharpness_sweep"]


def pooling(length: int, rank: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A ``(rank, length)`` matrix whose row ``i`` averages the ``i``-th of ``rank`` consecutive
    segments of the sequence (sizes differ by at most one when ``rank`` does not divide
    ``length``); ``P K`` holds the segment means of the keys."""
    if not 1 <= rank <= length:
        raise ValueError(f"rank must be in [1, length={length}], got {rank}")
    edges = torch.linspace(0, length, rank + 1).round().long()
    out = torch.zeros(rank, length, dtype=dtype)
    for i in range(rank):
        a, b = int(edges[i]), int(edges[i + 1])
        out[i, a:b] = 1.0 / (b - a)
    return out


def lowrank_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, e: torch.Tensor,
                      f: torch.Tensor) -> torch.Tensor:
    """``softmax(q (e k)ᵀ / √d) (f v)`` for ``q, k, v`` of shape ``(..., L, d)`` and ``e, f`` of
    shape ``(rank, L)``; no mask (a padded key would be mixed into every projected row)."""
    if k.shape[-2] != e.shape[-1] or v.shape[-2] != f.shape[-1]:
        raise ValueError(f"projections are for length {e.shape[-1]}, keys have {k.shape[-2]}")
    e, f = e.to(k.device, k.dtype), f.to(v.device, v.dtype)
    k_low, v_low = e @ k, f @ v                                  # (..., rank, d)
    scores = q @ k_low.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., L, rank)
    return scores.softmax(dim=-1) @ v_low


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """``‖approx − exact‖ / ‖exact‖`` (Frobenius, over everything)."""
    return float((approx - exact).norm() / exact.norm())


def effective_rank(q: torch.Tensor, k: torch.Tensor, *, energy: float = 0.9) -> float:
    """Mean over batch and heads of the number of singular values of ``softmax(qkᵀ/√d)`` that
    hold ``energy`` of its squared Frobenius norm: how many directions the attention matrix
    really has."""
    if not 0 < energy <= 1:
        raise ValueError(f"energy must be in (0, 1], got {energy}")
    p = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1).float()
    s2 = torch.linalg.svdvals(p) ** 2                           # (..., L)
    share = s2.cumsum(-1) / s2.sum(-1, keepdim=True)
    return float(((share < energy).sum(-1) + 1).float().mean())


def attention_flops(*, length: int, head_dim: int, rank: int | None = None) -> int:
    """Multiply-adds ×2 of one head's attention: ``4 L² d`` for the two ``L × L`` products, or
    ``4 L r d`` plus ``4 r L d`` for the projections of K and V when ``rank`` is given."""
    if length < 1 or head_dim < 1 or (rank is not None and rank < 1):
        raise ValueError("length, head_dim and rank must be >= 1")
    if rank is None:
        return 4 * length * length * head_dim
    return 4 * length * rank * head_dim + 4 * rank * length * head_dim


def sharpness_sweep(scales, *, length: int, heads: int, head_dim: int, rank: int,
                    generator: torch.Generator) -> list[dict]:
    """For each score scale (queries and keys drawn N(0, scale²): larger means sharper
    attention), the attention matrices' effective rank and the relative error of pooled low-rank
    attention at ``rank`` against exact attention, on the same random inputs."""
    rows = []
    pool = pooling(length, rank)
    for s in scales:
        q, k = (s * torch.randn(1, heads, length, head_dim, generator=generator) for _ in range(2))
        v = torch.randn(1, heads, length, head_dim, generator=generator)
        exact = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        rows.append({"scale": float(s), "effective_rank": effective_rank(q, k),
                     "error": relative_error(lowrank_attention(q, k, v, pool, pool), exact)})
    return rows
