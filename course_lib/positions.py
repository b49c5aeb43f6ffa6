"""Where a token is, told to attention (the course model, ``course_lib.models``): rotary
position embeddings (RoPE: queries and keys turned by an angle that grows with the position)
and ALiBi (a score penalty that grows with the distance between query and key).
"""
from __future__ import annotations

import torch

__all__ = ["rotary_tables", "apply_rotary", "alibi_bias", "alibi_slopes"]


def rotary_tables(length: int, head_dim: int, *, base: float = 10000.0,
                  device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(length, head_dim) cosines and sines: channel pair ``c`` of position ``p`` turns by
    ``p * base ** (-2c / head_dim)`` (RoFormer, eq. 15), in the rotate-half layout."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (..., L, head_dim) by the tables: channel ``c`` pairs with ``c + head_dim/2``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def alibi_bias(length: int, slopes: torch.Tensor) -> torch.Tensor:
    """ALiBi's (1, heads, length, length) score bias ``-slope_h * |i - j|`` (Press et al.,
    2022): one tensor for the whole batch, broadcast over it."""
    i = torch.arange(length, device=slopes.device, dtype=slopes.dtype)
    return (-slopes[:, None, None] * (i[None, :] - i[:, None]).abs())[None]


def alibi_slopes(n_heads: int, steepest: float) -> torch.Tensor:
    """One slope per head: ``steepest``, then 4x smaller for each next head."""
    return steepest * 0.25 ** torch.arange(n_heads, dtype=torch.float32)
