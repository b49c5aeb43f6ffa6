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
from collections import defaultdict
from contextlib import contextmanager

import torch
import torch.nn.functional as F

__all__ = ["pooling", "lowrank_attention", "relative_error", "effective_rank",
           "attention_flops", "sharpness_sweep", "pooled_attention", "accuracy_over_pooling",
           "tradeoff_figure", "time_over_length", "evidence", "from_evidence"]


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
    shape ``(rank, L)``; no mask (a padded key would be mixed into every projected row). The
    attention over the ``rank`` projected rows runs in SDPA's fused kernel, the one the dense
    arm it is timed against uses: the comparison then changes the number of keys only."""
    if k.shape[-2] != e.shape[-1] or v.shape[-2] != f.shape[-1]:
        raise ValueError(f"projections are for length {e.shape[-1]}, keys have {k.shape[-2]}")
    e, f = e.to(k.device, k.dtype), f.to(v.device, v.dtype)
    k_low, v_low = e @ k, f @ v                                  # (..., rank, d)
    return F.scaled_dot_product_attention(q, k_low, v_low)       # scores (..., L, rank)


def time_over_length(lengths, *, rank: int, batch: int, heads: int, head_dim: int,
                     repeats: int, device: torch.device | str = "cpu", seed: int = 0) -> dict:
    """``{L: low-rank time ÷ dense SDPA's}`` at a fixed ``rank``, the way Linformer states its
    claim (linear in L for a fixed k): at each length both run on the same random inputs in one
    interleaved, rotated loop (``bench.compare``), the ratio a ``Ratio`` of the paired repeats."""
    from course_lib.attention.sdpa import sdpa_attention
    from course_lib.measure import bench
    from course_lib.measure.verdicts import speedup

    if any(L < rank for L in lengths):
        raise ValueError(f"every length must be >= rank={rank}, got {list(lengths)}")
    out, g = {}, torch.Generator().manual_seed(seed)
    for L in lengths:
        q, k, v = (torch.randn(batch, heads, L, head_dim, generator=g).to(device) for _ in range(3))
        p = pooling(L, rank).to(device)
        res = bench.compare({"dense SDPA": bench.forward_call(lambda: sdpa_attention(q, k, v)),
                             "low rank": bench.forward_call(
                                 lambda: lowrank_attention(q, k, v, p, p))},
                            warmup=1, repeats=repeats, device=device, rotate=True)
        out[L] = speedup(res["low rank"]["timing"].samples, res["dense SDPA"]["timing"].samples)
    return out


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
    """For each scale ``s`` (queries and keys drawn N(0, s²), so the scores spread as s²: larger
    means sharper attention), the attention matrices' effective rank, the mean largest weight a
    query gives one key (1/L when uniform, 1 when it looks at one key) and the relative error of
    pooled low-rank attention at ``rank`` against exact attention, on the same random inputs."""
    rows = []
    pool = pooling(length, rank)
    for s in scales:
        q, k = (s * torch.randn(1, heads, length, head_dim, generator=generator) for _ in range(2))
        v = torch.randn(1, heads, length, head_dim, generator=generator)
        exact = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        probs = (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).softmax(-1)
        rows.append({"scale": float(s), "effective_rank": effective_rank(q, k),
                     "top_weight": float(probs.amax(-1).mean()),
                     "error": relative_error(lowrank_attention(q, k, v, pool, pool), exact)})
    return rows


@contextmanager
def pooled_attention(model, *, factor: int):
    """Inside the block, every attention layer of the course's encoder (``core.model``) attends
    to its keys and values pooled to ``ceil(L / factor)`` segment means, with the ALiBi bias
    pooled the same way (query ``i``'s bias to a segment is its mean bias to the segment's
    keys); ``factor=1`` is exact attention. Batches must hold no padding (a padded key would be
    averaged into a segment): ``accuracy_over_pooling`` groups reviews of one length."""
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor must be an integer >= 1, got {factor!r}")
    from course_lib.core.model import Attention, alibi_bias, apply_rotary

    def forward(self, x, mask, *, rope=None):
        if mask is not None and not bool(mask.all()):
            raise ValueError("pooled attention needs batches without padding (mask all True)")
        B, L, _ = x.shape
        q, k, v = (t.view(B, L, self.n_heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        e = pooling(L, -(-L // factor), dtype=x.dtype).to(x.device)        # (rank, L)
        scores = q @ (e @ k).transpose(-2, -1) / math.sqrt(q.shape[-1])    # (B, H, L, rank)
        if self.alibi:
            scores = scores + alibi_bias(L, self.slopes).to(x.dtype) @ e.T
        y = scores.softmax(dim=-1) @ (e @ v)
        return self.proj(y.transpose(1, 2).reshape(B, L, -1))

    layers = [m for m in model.modules() if isinstance(m, Attention)]
    for m in layers:
        m.forward = forward.__get__(m)
    try:
        yield model
    finally:
        for m in layers:
            del m.forward                        # back to the class's own forward


def accuracy_over_pooling(model, dataset, factors, *, min_length: int = 64,
                          batch_size: int = 64) -> dict:
    """Test accuracy of ``model`` with its attention pooled by each factor (``pooled_attention``)
    on the reviews of ``dataset`` with at least ``min_length`` tokens, batched by exact length
    (no padding). Returns ``{"n", "lengths", "correct": {factor: [bool per review]}}``;
    ``verdicts.paired_accuracy_change(correct[1], correct[f])`` is the change from exact."""
    if not isinstance(min_length, int) or min_length < 1:
        raise ValueError(f"min_length must be an integer >= 1, got {min_length!r}")
    groups = defaultdict(list)
    for i in range(len(dataset)):
        item = dataset[i]
        if len(item["input_ids"]) >= min_length:
            groups[len(item["input_ids"])].append(item)
    if not groups:
        raise ValueError(f"no review of {min_length} tokens or more in the dataset")
    factors = sorted(set([1, *factors]))
    correct = {f: [] for f in factors}
    lengths = []
    model.eval()
    with torch.inference_mode():
        for length, items in sorted(groups.items()):
            for s in range(0, len(items), batch_size):
                chunk = items[s:s + batch_size]
                ids = torch.stack([torch.as_tensor(it["input_ids"]) for it in chunk])
                labels = torch.as_tensor([int(it["label"]) for it in chunk])
                lengths += [length] * len(chunk)
                for f in factors:
                    with pooled_attention(model, factor=f):
                        pred = model(ids).argmax(-1)
                    correct[f] += (pred == labels).tolist()
    return {"n": len(lengths), "lengths": lengths, "correct": correct}


def tradeoff_figure(time_ratio: dict, accuracy_change: dict, *, learner: int, length: int,
                    threshold: float = 0.5, device: str = "cpu"):
    """Left: low-rank attention's time ÷ dense SDPA's over the pooling factor (``Ratio``
    estimates, log scale) with the claim's bar; right: the trained model's accuracy change (points,
    ``Estimate``) at the same factors. The learner's factor is ringed on both."""
    from course_lib.ui.plots import new_figure

    fig, (ax, ax2) = new_figure(2, width=4.8, height=3.6)
    fs = sorted(time_ratio)
    ax.errorbar(fs, [time_ratio[f].value for f in fs],
                yerr=list(zip(*(time_ratio[f].errors for f in fs))), fmt="o-", capsize=3)
    ax.axhline(threshold, ls="--", color="k", lw=1)
    ax.annotate(f"the claim's bar, ≤ {threshold:g} (judged over length)", (fs[0], threshold),
                textcoords="offset points", xytext=(2, 4), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("pooling factor (rank = L / factor)")
    ax.set_ylabel("time ÷ dense SDPA's (×)")
    ax.set_title(f"Time at L = {length:,} ({device}, FP32)", fontsize=10)
    fa = sorted(accuracy_change)
    ax2.errorbar(fa, [accuracy_change[f].value for f in fa],
                 yerr=[accuracy_change[f].half_width for f in fa], fmt="o-", color="#C44E52",
                 capsize=3)
    ax2.axhline(0, ls=":", color="#8C8C8C", lw=1)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("pooling factor (rank = L / factor)")
    ax2.set_ylabel("test accuracy change (points)")
    ax2.set_title("The trained model, every layer pooled", fontsize=10)
    for a, d in ((ax, time_ratio), (ax2, accuracy_change)):
        if learner in d:
            a.plot([learner], [d[learner].value], "s", ms=12, mfc="none", mec="k",
                   label="your default")
        a.set_xticks(fs, [str(f) for f in fs])
        a.legend(frameon=False, fontsize=8, loc="best")
    return fig


def evidence(lengths, *, rank: int, rounds: int, repeats: int = 7, log=print, **shape) -> dict:
    """The evidence lesson 11's low-rank verdict rests on: ``rounds`` whole sweeps of
    ``time_over_length`` one after another, so that a load that comes and goes between runs
    of the lesson shows in the spread over rounds."""
    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 (a spread needs two), got {rounds}")
    out = {"recipe": {"lengths": list(lengths), "rank": rank, "repeats": repeats,
                      "threads": torch.get_num_threads(), **shape}, "rounds": []}
    for i in range(rounds):
        got = time_over_length(lengths, rank=rank, repeats=repeats, seed=i, **shape)
        out["rounds"].append({str(L): e.value for L, e in got.items()})
        log(f"round {i + 1}/{rounds}: " + ", ".join(f"{L} {x:.3f}x" for L, x in
                                                    out["rounds"][-1].items()))
    return out


def from_evidence(ev: dict) -> dict:
    """``{length: low-rank time ÷ dense SDPA's}``, the geometric mean over the evidence's
    rounds (``verdicts.across_rounds``: the spread between runs is the error)."""
    from course_lib.measure.verdicts import across_rounds

    return dict(sorted(across_rounds([{int(L): x for L, x in r.items()}
                                      for r in ev["rounds"]]).items()))
