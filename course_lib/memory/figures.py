"""Lesson 09's pictures: a step's memory by component, and checkpointing's trade-off."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from course_lib.memory.anatomy import Plan

__all__ = ["COMPONENTS", "anatomy_figure", "tradeoff_figure", "share_figure"]

COMPONENTS = (("weights", "#4C72B0"), ("gradients", "#55A868"), ("optimizer", "#C44E52"),
              ("activations", "#8172B2"))
MIB = 2 ** 20


def anatomy_figure(plans: Mapping[str, Plan], *, title: str, ax=None):
    """Stacked bars: weights, gradients, optimizer state and activations of each plan (MiB)."""
    from course_lib.ui.plots import new_figure

    fig = None
    if ax is None:
        fig, ax = new_figure(width=max(5.0, 1.1 * len(plans) + 2.5))
    bottom = [0.0] * len(plans)
    names = list(plans)
    labels = [n.replace("_", "\n") for n in names]          # "sgd_momentum" on two lines
    for comp, colour in COMPONENTS:
        vals = [getattr(plans[n], comp) / MIB for n in names]
        ax.bar(labels, vals, bottom=bottom, color=colour, label=comp)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("MiB per rank")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def tradeoff_figure(rows: Sequence[dict], *, device: str, time_at: str, memory_at: str):
    """Each checkpointing policy: the activations it keeps against its step time (both relative
    to no checkpointing; ``time_at``/``memory_at`` name the sizes each was taken at), with the
    policy's name beside its point."""
    from course_lib.ui.plots import new_figure

    fig, ax = new_figure(width=6.0)
    for r in rows:
        x, y = r["time_ratio"], r["memory_ratio"]
        lo, hi = x.interval
        ax.errorbar([x.value], [y], xerr=[[x.value - lo], [hi - x.value]],
                    fmt="o", capsize=3, color="#4C72B0")
        ax.annotate(r["policy"].replace("_", " "), (x.value, y), xytext=(6, 4),
                    textcoords="offset points", fontsize=9)
    ax.set_xlabel(f"step time ÷ no checkpointing ({device}, 95% interval)")
    ax.set_ylabel("activations kept ÷ no checkpointing")
    ax.set_title(f"Checkpointing trades recomputation for memory\n(memory at {memory_at}, "
                 f"time at {time_at})", fontsize=10)
    return fig


def share_figure(shares: Mapping[str, Mapping[int, float]], *, learner: tuple[str, int]):
    """The activations' share of a step's peak over length, one line per width, the 50% bar
    and the learner's point."""
    from course_lib.ui.plots import new_figure

    fig, ax = new_figure(width=6.0)
    for series, pts in shares.items():
        xs = sorted(pts)
        ax.plot(xs, [100 * pts[x] for x in xs], "o-", label=series)
    s, x = learner
    ax.plot([x], [100 * shares[s][x]], "*", ms=14, color="k", label="your setting")
    ax.axhline(50, color="#C44E52", ls="--", lw=1, label="half of the peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("activations ÷ step peak (%)")
    ax.set_title("Where activations dominate a training step")
    ax.legend(fontsize=8)
    return fig
