"""Pictures of the tiled attention kernels: which tiles a FlashAttention pass visits, and how
the online softmax's running maximum and sum reach the row's log-sum-exp."""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["kept_tiles", "masks_figure", "online_softmax_trace", "tiling_figure"]


def online_softmax_trace(scores: torch.Tensor, block: int) -> list[dict]:
    """For one row of scores read ``block`` at a time: after each block, the running maximum
    ``m``, the running sum ``l`` (``row_sum``) of ``exp(s - m)`` and the running log-sum-exp
    ``m + log l``, and the factor ``exp(m_old - m_new)`` that rescaled what was summed before."""
    if scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be one non-empty row (1-D), got shape {tuple(scores.shape)}")
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    m, row_sum, rows = -math.inf, 0.0, []
    for j, chunk in enumerate(scores.double().split(block)):
        m_new = max(m, float(chunk.max()))
        rescale = math.exp(m - m_new) if m > -math.inf else 0.0
        row_sum = row_sum * rescale + float(torch.exp(chunk - m_new).sum())
        m = m_new
        rows.append({"block": j, "max": m, "sum": row_sum, "lse": m + math.log(row_sum),
                     "rescale": rescale})
    return rows


def tiling_figure(*, n_blocks: int = 8, query_block: int = 5, causal: bool = True,
                  block: int = 64, seed: int = 0):
    """Left: the ``n_blocks x n_blocks`` tiles of a score matrix; one block of query rows is
    walked left to right (the numbers give the order), tiles above the diagonal are skipped when
    ``causal``. Right: for one query row of random scores, the running maximum and running
    log-sum-exp after each tile, against the row's exact log-sum-exp."""
    from matplotlib.patches import Rectangle

    from course_lib.ui.plots import new_figure

    if not 0 <= query_block < n_blocks:
        raise ValueError(f"query_block must be in [0, n_blocks={n_blocks}), got {query_block!r}")
    fig, (ax, ax2) = new_figure(2, width=5.0, height=4.2)
    for i in range(n_blocks):
        for j in range(n_blocks):
            skipped = causal and j > i
            here = i == query_block and not skipped
            face = "#4C72B0" if here else ("#EEEEEE" if skipped else "#C6D3E8")
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=face, edgecolor="white", lw=1.5))
            if here:
                ax.text(j + 0.5, i + 0.5, str(j + 1), ha="center", va="center", color="white",
                        fontsize=9, fontweight="bold")
    ax.set_xlim(0, n_blocks)
    ax.set_ylim(n_blocks, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel(f"key blocks ({block} keys each) →")
    ax.set_ylabel(f"← query blocks ({block} rows each)")
    ax.set_title("One query block walks its key tiles" + (" (grey: skipped, causal)" if causal
                                                          else ""), fontsize=9)
    g = torch.Generator().manual_seed(seed)
    length = (query_block + 1) * block if causal else n_blocks * block
    scores = torch.randn(length, generator=g, dtype=torch.float64) * 2.0
    scores[int(0.7 * length)] += 6.0                        # a late, large score raises the max
    trace = online_softmax_trace(scores, block)
    xs = [r["block"] + 1 for r in trace]
    ax2.step(xs, [r["max"] for r in trace], where="post", label="running max m")
    ax2.plot(xs, [r["lse"] for r in trace], "o-", label="running m + log l")
    ax2.axhline(float(torch.logsumexp(scores, 0)), ls="--", color="k", lw=1,
                label="exact log-sum-exp of the row")
    ax2.set_xlabel("key tiles read so far")
    ax2.set_ylabel("value (log scale of the scores)")
    ax2.set_xticks(xs)
    ax2.set_title("Online softmax: one row, tile by tile", fontsize=9)
    ax2.legend(frameon=False, fontsize=8, loc="center right")
    return fig, trace


def kept_tiles(mask: torch.Tensor, block: int) -> torch.Tensor:
    """``(n, n)`` bool: which ``block x block`` tiles of an ``(L, L)`` mask hold any allowed
    pair (the last tile of a row may be partial), the tiles a skipping kernel computes."""
    if mask.dim() != 2 or mask.shape[0] != mask.shape[1] or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a square (L, L) bool tensor (True = may attend), got "
                         f"{mask.dtype} of shape {tuple(mask.shape)}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    n = -(-mask.shape[0] // block)
    padded = torch.zeros(n * block, n * block, dtype=torch.bool)
    padded[:mask.shape[0], :mask.shape[1]] = mask.cpu()
    return padded.view(n, block, n, block).any(dim=3).any(dim=1)


def masks_figure(masks: dict[str, torch.Tensor], *, block: int):
    """One panel per ``(L, L)`` mask (True = may attend, dark): the pairs it allows, the
    ``block``-token tile grid over them, and the tiles a skipping kernel computes shaded, with
    their share in the title."""
    from course_lib.ui.plots import new_figure

    fig, axes = new_figure(len(masks), width=3.3, height=3.6)
    axes = np.atleast_1d(axes)
    for ax, (name, m) in zip(axes, masks.items()):
        tiles = kept_tiles(m, block)
        length = m.shape[0]
        shade = tiles.repeat_interleave(block, 0).repeat_interleave(block, 1)[:length, :length]
        ax.imshow(shade.float().numpy() * 0.25 + m.float().cpu().numpy() * 0.75, cmap="Blues",
                  vmin=0, vmax=1, interpolation="nearest")
        for k in range(0, length + 1, block):
            ax.axhline(k - 0.5, color="#888888", lw=0.5)
            ax.axvline(k - 0.5, color="#888888", lw=0.5)
        ax.set_title(f"{name}\n{float(tiles.float().mean()):.0%} of the tiles computed", fontsize=9)
        ax.set_xlabel("key position")
    axes[0].set_ylabel("query position")
    fig.suptitle(f"Allowed pairs (dark) and the {block} × {block} tiles a skipping kernel computes "
                 "(shaded)", fontsize=9)
    return fig
