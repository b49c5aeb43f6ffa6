"""Figures for the lessons: built without pyplot, so nothing is shown twice.

A ``matplotlib.figure.Figure`` created directly is not registered with pyplot, so the inline
backend never auto-displays it; lessons and widgets ``display`` it exactly once.
"""
from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure


def _figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def register_figure_png() -> None:
    """Teach IPython's ``display`` to render a pyplot-free ``Figure`` as a PNG image.

    pyplot's inline backend normally registers this; our figures bypass pyplot, so without it
    ``display(fig)`` would show only ``<Figure size ...>``. A no-op outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return
    ip.display_formatter.formatters["image/png"].for_type(Figure, _figure_png)


def new_figure(ncols: int = 1, *, width: float = 6.0, height: float = 3.6, nrows: int = 1):
    """A figure and its axes (a single Axes when there is one panel)."""
    if ncols < 1 or nrows < 1:
        raise ValueError(f"ncols and nrows must be >= 1, got {ncols}, {nrows}")
    register_figure_png()
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True)
    return fig, axes


def length_histogram(lengths: Sequence[int], *, ax, bins: int = 60, title: str = "") -> None:
    a = np.asarray(list(lengths))
    ax.hist(a, bins=bins, color="#4C72B0", alpha=0.85)
    med = float(np.median(a))
    ax.axvline(med, color="k", ls="--", lw=1, label=f"median {med:.0f}")
    ax.axvline(np.percentile(a, 99), color="#C44E52", ls=":", lw=1.5,
               label=f"99th percentile {np.percentile(a, 99):.0f}")
    ax.set_xlabel("tokens per review")
    ax.set_ylabel("number of reviews")
    ax.set_title(title or "Review lengths")
    ax.legend(frameon=False)


def bar_compare(names: Sequence[str], values: Sequence[float], *, ax, ylabel: str,
                title: str = "", fmt: str = "{:.2f}") -> None:
    """Labelled bars with their values printed on top."""
    bars = ax.bar(list(names), list(values), color="#4C72B0")
    for b, v in zip(bars, values):
        ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def training_curve(losses: Sequence[float], *, ax, label: str = "", smooth: int = 10) -> None:
    y = np.asarray(losses, dtype=float)
    if smooth > 1 and len(y) >= smooth:
        y = np.convolve(y, np.ones(smooth) / smooth, mode="valid")
    ax.plot(np.arange(len(y)), y, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"loss (moving mean of {smooth})" if smooth > 1 else "loss")


def mask_picture(mask, *, ax, title: str = "") -> None:
    """One row per sequence of a batch, one column per position: blue = real token (True),
    white = padding. The picture of lessons 01 and 02."""
    ax.imshow(mask.cpu().numpy(), aspect="auto", cmap="Blues", vmin=0, vmax=1.4,
              interpolation="nearest")
    ax.set_xlabel("position in the padded batch")
    ax.set_ylabel("review in the batch")
    if title:
        ax.set_title(title)


def sparsity_bars(report: Sequence[dict], *, ax, title: str = "") -> None:
    """One bar per weight tensor of a ``pruning.sparsity_report``: its share of zeros (grey:
    a tensor left unpruned)."""
    names = [r["name"].replace("blocks.", "L").replace("attn.", "").replace("ff.", "")
             .replace(".weight", "") for r in report]
    ax.bar(range(len(report)), [r["sparsity"] for r in report],
           color=["#4C72B0" if r["pruned"] else "#BBBBBB" for r in report])
    ax.set_xticks(range(len(report)), names, rotation=90, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of weights that are zero")
    ax.set_xlabel("weight tensor (grey: not pruned)")
    ax.set_title(title)
