"""Scaled dot-product attention three ways, and the masks that make it sparse.

* ``naive_attention`` materialises the full ``L x L`` score matrix, as in "Attention Is All
  You Need" (Vaswani et al., 2017, eq. 1): ``softmax(Q K^T / sqrt(d)) V``.
* ``sdpa_attention`` calls ``torch.nn.functional.scaled_dot_product_attention``; PyTorch picks
  a fused kernel (``sdpa_backend`` says which one would run on given inputs).
* ``tiled_attention`` is the FlashAttention idea in plain torch (Dao et al., 2022,
  "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", Algorithm 1,
  in the loop order of FlashAttention-2, Dao 2023): queries and keys in blocks, an *online
  softmax* (Milakov & Gimelshein, 2018) keeps a running maximum and sum per query row, so no
  more than one ``block x block`` tile of scores exists at a time. Blocks that a mask hides
  entirely are skipped: that is where block-sparse attention saves compute.

Masks follow SDPA's boolean convention: **True = may attend**. ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` use the opposite one (True = blocked); ``to_mha_mask`` converts.
Tensors are ``(batch, heads, length, head_dim)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

__all__ = ["naive_attention", "sdpa_attention", "tiled_attention", "sdpa_backend",
           "sdpa_backend_table", "causal_mask", "sliding_window_mask", "block_sparse_mask",
           "window_tile_fraction", "to_mha_mask",
           "ATTENTION_FUNCTIONS"]


# --------------------------------------------------------------------------- validation
def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None, is_causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, length, head_dim), "
                             f"got shape {tuple(t.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:2] != v.shape[:2]:
        raise ValueError(f"q, k, v must share batch and heads, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same head_dim, got {q.shape[-1]} and "
                         f"{k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length, got {k.shape[-2]} and {v.shape[-2]}")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        if mask.dim() < 2 or tuple(mask.shape[-2:]) != (q.shape[-2], k.shape[-2]):
            raise ValueError("mask must end in (q length, k length) = "
                             f"{(q.shape[-2], k.shape[-2])}, got shape {tuple(mask.shape)}")
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("is_causal needs q and k of the same length")


def _length(length: int, name: str = "length") -> None:
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {length!r}")


# --------------------------------------------------------------------------- kernels
def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    mask: torch.Tensor | None = None, is_causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """``softmax(Q K^T * scale) V`` with the ``(B, H, L, L)`` score matrix held in memory.

    Two full score-sized tensors are alive at the peak (the scores and the probabilities).
    """
    _check_qkv(q, k, v, mask, is_causal)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)                # (B, H, Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], device=q.device), float("-inf"))
    probs = scores.softmax(dim=-1)
    return probs @ v


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                   mask: torch.Tensor | None = None, is_causal: bool = False,
                   scale: float | None = None) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with the course's argument names.

    SDPA does not accept a mask together with ``is_causal=True``: the two are combined into
    one boolean mask here.
    """
    _check_qkv(q, k, v, mask, is_causal)
    if mask is not None and is_causal:
        mask, is_causal = mask & causal_mask(q.shape[-2], device=q.device), False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          scale=scale)


def _tiled_rows(qb: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask_rows: torch.Tensor | None,
                q_start: int, is_causal: bool, block_size: int) -> torch.Tensor:
    """Attention of one block of (pre-scaled) queries against all keys, by online softmax."""
    rows = qb.shape[-2]
    m = qb.new_full((*qb.shape[:-1], 1), float("-inf"))      # running row maximum
    den = qb.new_zeros((*qb.shape[:-1], 1))                   # running sum of exp
    acc = qb.new_zeros((*qb.shape[:-1], v.shape[-1]))         # running weighted sum of V
    q_idx = torch.arange(q_start, q_start + rows, device=qb.device)[:, None]
    for ks in range(0, k.shape[-2], block_size):
        if is_causal and ks > q_start + rows - 1:
            break                                             # the tile is above the diagonal
        ke = min(ks + block_size, k.shape[-2])
        keep = None if mask_rows is None else mask_rows[..., ks:ke]
        if keep is not None and not bool(keep.any()):
            continue                                          # block-sparse: skip empty tiles
        if is_causal and ke - 1 > q_start:                    # the tile crosses the diagonal
            diag = torch.arange(ks, ke, device=qb.device)[None, :] <= q_idx
            keep = diag if keep is None else keep & diag
        s = qb @ k[..., ks:ke, :].transpose(-2, -1)           # one (rows x block) tile
        if keep is not None:
            s = s.masked_fill(~keep, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_safe)
        alpha = torch.exp(m - m_safe)                         # rescales what was summed so far
        den = den * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ v[..., ks:ke, :]
        m = m_new
    return acc / den


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    mask: torch.Tensor | None = None, is_causal: bool = False,
                    scale: float | None = None, block_size: int = 128,
                    recompute: bool = False) -> torch.Tensor:
    """Exact attention computed tile by tile with an online softmax (FlashAttention's idea).

    Memory for scores is one ``block_size x block_size`` tile per (batch, head) instead of
    ``L x L``. Under autograd every tile is saved for the backward pass unless
    ``recompute=True``, which recomputes each block of rows during backward (activation
    checkpointing, the trick FlashAttention's backward pass uses).
    """
    _check_qkv(q, k, v, mask, is_causal)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs = []
    for qs in range(0, q.shape[-2], block_size):
        qe = min(qs + block_size, q.shape[-2])
        qb = q[..., qs:qe, :] * scale
        mask_rows = None if mask is None else mask[..., qs:qe, :]
        args = (qb, k, v, mask_rows, qs, is_causal, block_size)
        if recompute and torch.is_grad_enabled():
            outs.append(checkpoint(_tiled_rows, *args, use_reentrant=False))
        else:
            outs.append(_tiled_rows(*args))
    return torch.cat(outs, dim=-2)


ATTENTION_FUNCTIONS = {"naive": naive_attention, "sdpa": sdpa_attention, "tiled": tiled_attention}


# --------------------------------------------------------------------------- backends
def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                 mask: torch.Tensor | None = None, is_causal: bool = False) -> str:
    """Name of the SDPA kernel PyTorch would pick for these inputs ("FLASH_ATTENTION", ...).

    Uses ``torch._fused_sdp_choice`` (the dispatcher's own choice; a private API, so
    "unknown" is returned where it is missing).
    """
    _check_qkv(q, k, v, mask, is_causal)
    try:
        from torch.nn.attention import SDPBackend
        if mask is not None and is_causal:
            mask, is_causal = mask & causal_mask(q.shape[-2], device=q.device), False
        choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, is_causal)
        return SDPBackend(choice).name
    except (AttributeError, RuntimeError, TypeError, ValueError, ImportError):
        return "unknown"


def sdpa_backend_table(device: torch.device | str, *, length: int = 256, head_dim: int = 64,
                       dtypes: tuple[torch.dtype, ...] | None = None) -> list[tuple[str, str, str]]:
    """Rows ``(dtype, case, backend)``: which SDPA kernel runs on ``device`` for each dtype."""
    _length(length)
    device = torch.device(device)
    if dtypes is None:
        dtypes = ((torch.float32, torch.float16, torch.bfloat16) if device.type == "cuda"
                  else (torch.float32, torch.bfloat16))
    rows = []
    for dt in dtypes:
        x = torch.zeros(1, 2, length, head_dim, device=device, dtype=dt)
        m = sliding_window_mask(length, window=8, device=device)
        for case, kw in (("no mask", {}), ("causal", {"is_causal": True}),
                         ("bool mask", {"mask": m})):
            rows.append((str(dt).replace("torch.", ""), case, sdpa_backend(x, x, x, **kw)))
    return rows


# --------------------------------------------------------------------------- masks
def causal_mask(length: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """``(L, L)`` bool, True on and below the diagonal: token i sees tokens 0..i."""
    _length(length)
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def sliding_window_mask(length: int, *, window: int, causal: bool = False,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """Local attention (Longformer, Beltagy et al. 2020): token i sees j with ``|i - j| <= window``.

    With ``causal=True`` only the ``window`` previous tokens and itself (Mistral-style).
    """
    _length(length)
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    i = torch.arange(length, device=device)
    dist = i[:, None] - i[None, :]                            # query minus key position
    keep = dist.abs() <= window
    return keep & (dist >= 0) if causal else keep


def block_sparse_mask(length: int, *, block_size: int, neighbors: int = 1, global_tokens: int = 0,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """Block-sparse attention (BigBird's window + global parts, Zaheer et al. 2020).

    Positions are grouped in blocks of ``block_size``; a query block sees its own block and
    ``neighbors`` blocks on each side; the first ``global_tokens`` tokens see and are seen by
    every token.
    """
    _length(length)
    _length(block_size, "block_size")
    if not isinstance(neighbors, int) or neighbors < 0:
        raise ValueError(f"neighbors must be an integer >= 0, got {neighbors!r}")
    if not isinstance(global_tokens, int) or not 0 <= global_tokens <= length:
        raise ValueError(f"global_tokens must be an integer in [0, length={length}], "
                         f"got {global_tokens!r}")
    b = torch.arange(length, device=device) // block_size
    keep = (b[:, None] - b[None, :]).abs() <= neighbors
    keep[:global_tokens, :] = True
    keep[:, :global_tokens] = True
    return keep


def window_tile_fraction(length: int, *, window: int, block_size: int) -> float:
    """Share of the ``block_size`` x ``block_size`` score tiles that a sliding window of
    ``window`` touches: the work of a kernel that skips empty tiles (FlexAttention with a block
    mask, a block-sparse kernel), where dense SDPA with the same mask computes every tile.
    Counted without building the L x L mask: tiles ``d`` blocks apart hold pairs as close as
    ``(d - 1) * block_size + 1`` positions, so they are touched while that is ``<= window``."""
    _length(length)
    _length(block_size, "block_size")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    n = -(-length // block_size)
    reach = min(n - 1, (window - 1) // block_size + 1)   # farthest touched diagonal
    touched = n + 2 * sum(n - d for d in range(1, reach + 1))
    return touched / (n * n)


def flex_plan(device: torch.device | str, *, compiler: tuple[bool, str] | None = None
              ) -> tuple[str, str] | None:
    """None when FlexAttention can run (and compile) on ``device``; else ``(needs, reason)`` for
    ``Recorder.skip``. ``compiler`` overrides ``device.compile_support`` (tests)."""
    from course_lib.core.device import compile_support

    try:
        from torch.nn.attention import flex_attention  # noqa: F401  (not "import torch.…": that would make torch local)
    except ImportError:
        return "cuda", f"torch {torch.__version__} has no FlexAttention"
    ok, why = compiler if compiler is not None else compile_support(device)
    if ok:
        return None
    return (("compiler" if torch.device(device).type == "cpu" else "cuda"),
            f"FlexAttention is compiled: {why}")


def to_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """SDPA-convention mask (True = may attend) -> ``nn.MultiheadAttention``'s (True = blocked)."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    return ~mask
