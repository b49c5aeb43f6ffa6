"""Sparse attention over sequence length: from which length does skipping masked tiles pay?

A sliding window of ``±window`` keys touches about ``3 / n`` of the ``n x n`` tiles of an
``L x L`` score matrix (``n = L / block``): the share a skipping kernel computes shrinks as
``1 / L``, so its time grows about linearly in ``L`` while dense attention's grows as ``L^2``.
Whether it beats dense SDPA at a given length also depends on what a kept tile costs: a
compiled FlexAttention tile or a plain-torch tile is dearer than a tile of ATen's fused flash
kernel. ``sparse_sweep`` times, at each length and interleaved in one loop:

* ``sdpa``: dense SDPA without a mask (what a learner would otherwise run);
* ``sdpa, window mask``: dense SDPA given the window as a boolean mask (computes every score);
* ``flex, block mask``: FlexAttention with a *block mask*, skipping untouched tiles;
* ``flex, no block mask``: the same FlexAttention with the window as a ``score_mod`` (every tile
  computed): the per-tile cost of Flex's kernel, so the two Flex rows separate skipping from it;
* ``tiled, window mask``: the course's plain-torch tiled kernel, which skips empty tiles.

``slope`` fits ``time ~ L^p`` on a log-log scale: ``p`` near 2 for dense, near 1 for skipping.
"""
from __future__ import annotations

import math
import warnings
from functools import partial

import numpy as np
import torch

from course_lib.attention.sdpa import (flex_plan, sdpa_attention, sliding_window_mask,
                                       tiled_attention, window_tile_fraction)
from course_lib.measure import bench
from course_lib.measure.verdicts import Estimate, speedup

__all__ = ["FlexWindow", "sparse_sweep", "ratio_to_dense", "slope", "sparse_figure", "evidence",
           "from_evidence"]

DENSE = "sdpa"
SKIP = "flex, block mask"


class FlexWindow:
    """FlexAttention with a sliding window, compiled once with dynamic shapes (one compile
    serves every length; the first call of each variant compiles, ~5 s on a CPU)."""

    def __init__(self, *, window: int, block_size: int, device: torch.device | str = "cpu"):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1, got {window!r}")
        self.window, self.block_size, self.device = window, block_size, str(device)
        self._create = create_block_mask
        self._kernel = torch.compile(flex_attention, dynamic=True)

        def keep(b, h, q_idx, kv_idx):          # plain functions: Flex inspects their arguments
            return (q_idx - kv_idx).abs() <= window

        def score(s, b, h, q_idx, kv_idx):
            return torch.where((q_idx - kv_idx).abs() <= window, s, -math.inf)
        self._keep, self._score = keep, score

    def block_masked(self, length: int):
        """``(fn(q, k, v), share of tiles skipped)``: the kernel skips every untouched tile."""
        bm = self._create(self._keep, B=None, H=None, Q_LEN=length, KV_LEN=length,
                          BLOCK_SIZE=self.block_size, device=self.device)
        return (lambda q, k, v: self._kernel(q, k, v, block_mask=bm)), bm.sparsity() / 100

    def score_masked(self, q, k, v):
        """The window as a score modification: every tile computed, masked scores set to -inf."""
        return self._kernel(q, k, v, score_mod=self._score)


def sparse_sweep(lengths: list[int], *, window: int, block_size: int = 128, batch: int = 1,
                 heads: int = 4, head_dim: int = 64, repeats: int = 5, flex: bool = True,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 progress: bool = True) -> dict:
    """Time the kernels of the module docstring at every length, interleaved and rotated.

    Returns ``{"lengths", "window", "block_size", "rows": {length: bench.compare result},
    "tiles_kept": {length: share of tiles a skipping kernel computes}, "density": {length:
    share of scores the window keeps}, "flex_error": worst |flex - masked SDPA|, "flex":
    whether Flex ran (else why not)}``."""
    if len(lengths) < 2 or any(not isinstance(L, int) or L < 1 for L in lengths):
        raise ValueError(f"lengths must hold at least two integers >= 1, got {lengths!r}")
    if not isinstance(repeats, int) or repeats < 2:
        raise ValueError("repeats must be an integer >= 2 (an interval needs two), "
                         f"got {repeats!r}")
    from course_lib.core.progress import tqdm

    device = torch.device(device)
    skip = flex_plan(device) if flex else ("off", "flex=False")
    fw = FlexWindow(window=window, block_size=block_size, device=device) if skip is None else None
    out = {"lengths": list(lengths), "window": window, "block_size": block_size, "rows": {},
           "tiles_kept": {}, "density": {}, "flex_error": 0.0,
           "flex": True if fw is not None else skip[1]}
    for L in tqdm(lengths, desc="sparse over length", disable=not progress):
        g = torch.Generator().manual_seed(L)
        q, k, v = (torch.randn(batch, heads, L, head_dim, generator=g).to(device, dtype)
                   for _ in range(3))
        mask = sliding_window_mask(L, window=window, device=device)
        fns = {DENSE: partial(sdpa_attention, q, k, v),
               "sdpa, window mask": partial(sdpa_attention, q, k, v, mask=mask)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # torch's own compile internals
            if fw is not None:
                blocked, _ = fw.block_masked(L)
                with torch.inference_mode():                        # compile, untimed
                    ref = fns["sdpa, window mask"]().float()
                    for f in (blocked, fw.score_masked):
                        out["flex_error"] = max(out["flex_error"],
                                                (f(q, k, v).float() - ref).abs().max().item())
                fns[SKIP] = partial(blocked, q, k, v)
                fns["flex, no block mask"] = partial(fw.score_masked, q, k, v)
            fns["tiled, window mask"] = partial(tiled_attention, q, k, v, mask=mask,
                                                block_size=block_size)
            calls = {name: bench.forward_call(lambda f=f: f()) for name, f in fns.items()}
            out["rows"][L] = bench.compare(calls, warmup=1, repeats=repeats, device=device,
                                           rotate=True)
        out["tiles_kept"][L] = window_tile_fraction(L, window=window, block_size=block_size)
        out["density"][L] = float(mask.float().mean())
    return out


def ratio_to_dense(result: dict, kernel: str) -> dict[int, Estimate]:
    """``{length: kernel's time ÷ dense SDPA's}`` (``verdicts.speedup`` of the paired repeats)."""
    return {L: speedup(r[kernel]["timing"].samples, r[DENSE]["timing"].samples)
            for L, r in result["rows"].items() if kernel in r}


def slope(result: dict, kernel: str) -> float:
    """Exponent ``p`` of ``time ~ L^p``: the least-squares slope of log median time on log L."""
    pts = [(L, r[kernel]["timing"].median) for L, r in result["rows"].items() if kernel in r]
    if len(pts) < 2:
        raise ValueError(f"kernel {kernel!r} was timed at fewer than two lengths")
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def sparse_figure(result: dict, *, device: str):
    """Median time of every kernel over length (log-log), from ``sparse_sweep``; the verdict's
    own map (``ui.verdicts``) shows the skipping kernel's ratio to dense SDPA."""
    from matplotlib.ticker import NullLocator

    from course_lib.ui.plots import new_figure

    fig, ax = new_figure(width=6.4, height=3.9)
    lengths = result["lengths"]
    for name in next(iter(result["rows"].values())):
        ys = [result["rows"][L][name]["timing"].median * 1e3 for L in lengths]
        ax.loglog(lengths, ys, "o-" if name in (DENSE, SKIP) else "o--",
                  lw=2.2 if name in (DENSE, SKIP) else 1.2, label=name)
    ax.set_xlabel("sequence length L (tokens)")
    ax.set_ylabel(f"median time, forward (ms, {device})")
    ax.set_title(f"Window ±{result['window']}, tiles of {result['block_size']}: this run",
                 fontsize=10)
    ax.set_xticks(lengths, [f"{L:,}" for L in lengths])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(frameon=False, fontsize=7)
    return fig


def evidence(lengths: list[int], *, rounds: int, window: int, block_size: int = 128,
             repeats: int = 5, log=print, **shape) -> dict:
    """The evidence lesson 11's sparse verdict rests on: ``rounds`` whole sweeps
    (``sparse_sweep``), one after another, each kernel's time ÷ dense SDPA's per round, so that
    a load that comes and goes between runs of the lesson shows in the spread over rounds."""
    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 (a spread needs two), got {rounds}")
    out = {"recipe": {"lengths": list(lengths), "window": window, "block_size": block_size,
                      "repeats": repeats, "threads": torch.get_num_threads(), **{
                          k: str(v) for k, v in shape.items()}}, "rounds": []}
    for i in range(rounds):
        res = sparse_sweep(lengths, window=window, block_size=block_size, repeats=repeats,
                           progress=False, **shape)
        kernels = [k for k in res["rows"][lengths[0]] if k != DENSE]
        out["flex"] = res["flex"]
        out["rounds"].append({k: {str(L): e.value for L, e in ratio_to_dense(res, k).items()}
                              for k in kernels})
        log(f"round {i + 1}/{rounds}: " + "; ".join(
            f"{k}: " + ", ".join(f"{L} {x:.2f}x" for L, x in r.items())
            for k, r in out["rounds"][-1].items()))
    return out


def from_evidence(ev: dict, kernel: str) -> dict[int, Estimate]:
    """``{length: kernel's time ÷ dense SDPA's}``, the geometric mean over the evidence's
    rounds (``verdicts.across_rounds``: the spread between runs is the error)."""
    from course_lib.measure.verdicts import across_rounds

    rounds = [{int(L): x for L, x in r[kernel].items()} for r in ev["rounds"] if kernel in r]
    if not rounds:
        raise ValueError(f"kernel must be one the evidence timed, got {kernel!r}; it has "
                         f"{sorted(ev['rounds'][0])}")
    return dict(sorted(across_rounds(rounds).items()))
