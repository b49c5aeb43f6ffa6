"""Lesson 09's pictures and tables: a step's memory by component, the calculator against the
measured steps, checkpointing over length, and where a step allocates by layer."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from course_lib.memory.anatomy import Plan

__all__ = ["COMPONENTS", "POLICY_COLOURS", "anatomy_figure", "check_table", "checkpoint_figure",
           "layer_table", "share_figure"]

COMPONENTS = (("weights", "#4C72B0"), ("gradients", "#55A868"), ("optimizer", "#C44E52"),
              ("activations", "#8172B2"))
MIB = 2 ** 20


NAMES = {"sgd": "SGD", "sgd_momentum": "SGD +\nmomentum", "adam": "Adam", "adamw": "AdamW",
         "adafactor": "Adafactor"}


def anatomy_figure(plans: Mapping[str, Plan], *, title: str, ax=None, legend: bool = True):
    """Stacked bars: weights, gradients, optimizer state and activations of each plan (MiB)."""
    from course_lib.ui.plots import new_figure

    fig = None
    if ax is None:
        fig, ax = new_figure(width=max(5.0, 1.1 * len(plans) + 2.5))
    bottom = [0.0] * len(plans)
    names = list(plans)
    labels = [NAMES.get(n, n) for n in names]
    for comp, colour in COMPONENTS:
        vals = [getattr(plans[n], comp) / MIB for n in names]
        ax.bar(labels, vals, bottom=bottom, color=colour, label=comp)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("MiB per rank")
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=8)
    return fig


POLICY_COLOURS = {"none": "#333333", "every": "#C44E52", "every_other": "#DD8452",
                  "attention": "#4C72B0"}


def check_table(rows: Sequence[tuple], lengths: Sequence[int]) -> str:
    """Markdown: the measured step (MiB) and measured ÷ predicted of the checkpointing sweep,
    one row per length and one column per policy. ``rows``: (setup, predicted, measured)."""
    policies = list(POLICY_COLOURS)
    cell = {(s.length, s.checkpoint): (p, m) for s, p, m in rows}
    head = "| tokens per sequence | " + " | ".join(p.replace("_", " ") for p in policies) + " |"
    lines = [head, "|---" * (len(policies) + 1) + "|"]
    for length in lengths:
        lines.append(f"| {length} | " + " | ".join(
            f"{cell[length, p][1] / MIB:.1f} MiB ({cell[length, p][1] / cell[length, p][0]:.2f}×)"
            for p in policies) + " |")
    return "\n".join(lines)


def checkpoint_figure(memory: Mapping[str, Mapping[int, tuple[float, float]]],
                      time_ratio: Mapping[str, Mapping[int, object]], *, learner: int,
                      device: str, batch: int):
    """Two panels over length, one line per checkpointing policy: left, the measured extra
    memory of a training step (MiB; the calculator's count dashed), right, the step time over
    no checkpointing's (95% intervals). ``memory[policy][length] = (predicted, measured)``
    bytes; ``time_ratio[policy][length]``: a ``Ratio``. The learner's length is marked."""
    from course_lib.ui.plots import new_figure

    fig, (a0, a1) = new_figure(2, width=5.6)
    for k, (policy, colour) in enumerate(POLICY_COLOURS.items()):
        xs = sorted(memory[policy])
        dodge = 2 ** (0.03 * (k - 1.5))         # the time panel's points side by side
        label = policy.replace("_", " ")
        a0.plot(xs, [memory[policy][x][1] / MIB for x in xs], "o-", color=colour, label=label)
        a0.plot(xs, [memory[policy][x][0] / MIB for x in xs], "--", color=colour, lw=1, alpha=0.7)
        r = [time_ratio[policy][x] for x in xs]
        lo = [e.value - e.interval[0] for e in r]
        hi = [e.interval[1] - e.value for e in r]
        a1.errorbar([x * dodge for x in xs], [e.value for e in r], yerr=[lo, hi], fmt="o-",
                    capsize=3, color=colour, label=label)
    for ax in (a0, a1):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per sequence")
        ax.axvline(learner, color="k", ls=":", lw=1)
    a0.set_yscale("log", base=2)
    a0.set_ylabel("step's extra memory (MiB, measured)")
    a0.set_title(f"Memory (batch {batch}; dashed: the calculator)", fontsize=10)
    a0.legend(fontsize=8, title="checkpointing", title_fontsize=8)
    a1.set_ylabel(f"step time ÷ no checkpointing ({device})")
    a1.set_title("Time (95% intervals; dotted: your length)", fontsize=10)
    a1.legend(fontsize=8)
    return fig


def layer_table(rows: Mapping[str, Mapping[str, int]], *, blocks: int) -> str:
    """Markdown: ``measure.allocations_by_layer``'s rows with the blocks' layers summed by kind
    (their values per block are equal: a test checks it), one block's total, in MiB."""
    kinds: dict[str, dict[str, float]] = {}
    for name, r in rows.items():
        kind = {"outside the layers": "the rest (residual sums, pooling, loss, optimizer)"}.get(
            name, name.split(" · ")[-1] + (f" (× {blocks} blocks)" if " · " in name else ""))
        k = kinds.setdefault(kind, {"forward": 0.0, "backward": 0.0})
        k["forward"] += r["forward"] / MIB
        k["backward"] += r["backward"] / MIB
    block = {d: sum(r[d] for n, r in rows.items() if n.startswith("block 0 · ")) / MIB
             for d in ("forward", "backward")}
    lines = ["| layer | forward: still allocated when it returns (MiB) | backward: net (MiB) |",
             "|---|---|---|"]
    lines += [f"| {k} | {v['forward']:+.2f} | {v['backward']:+.2f} |" for k, v in kinds.items()]
    lines.append(f"| *one block (its four rows, ÷ {blocks})* | *{block['forward']:+.2f}* "
                 f"| *{block['backward']:+.2f}* |")
    return "\n".join(lines)


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
    ax.axhline(50, color="#777777", ls="--", lw=1, label="half of the peak")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("activations ÷ step peak (%)")
    ax.set_title("Where activations dominate a training step")
    ax.legend(fontsize=8)
    return fig
