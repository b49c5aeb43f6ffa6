"""A verdict as the learner reads it: one map, one short sentence, a table of every point.

The map is the same figure for every claim: the condition that decides the claim on x, each
point's value and 95% interval against the claim's bar, coloured by its outcome (holds, fails,
inconclusive), the learner's point ringed, points not measured marked on the bar, and the same
claim's points from reference runs drawn faint behind. The sentence names the boundary and the
learner's point in about 30 words; the table under the map lists every point. Lessons call
``show_verdict``; the report and the site draw the same map from a results file
(``Verdict.from_dict``).
"""
from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence

from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS
from course_lib.measure.judging import Point, Shown, Verdict
from course_lib.measure.verdicts import Estimate, Ratio
from course_lib.ui.plots import spaced_log_ticks

COLOURS = {"holds": "#2a7d2a", "fails": "#C44E52", "inconclusive": "#8c8c8c"}
_SYMBOL = {">=": "≥", "<=": "≤"}
MARKERS = ("o", "s", "^", "D", "v")


def _x(claim, x: float) -> str:
    unit = claim.condition.unit
    return f"{x:,g}" + (f" {unit}" if unit and unit != "%" else "%" if unit == "%" else "")


def _runs(points: list[Point], outcome: str) -> list[list[float]]:
    runs, current = [], []
    for p in points:
        if p.outcome == outcome:
            current.append(p.at)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _span(claim, run: list[float]) -> str:
    """A run of sweep points as a range with its unit: "64–256 tokens"."""
    return _x(claim, run[0]) if len(run) == 1 else f"{run[0]:,g}–{_x(claim, run[-1])}"


def _at(claim, x: float) -> str:
    """A point of the condition in a sentence, in the condition's own words: "width 512",
    "a pool of 1,600 reviews", "batch per rank 8 sequences"."""
    return claim.condition.at(x)


def _where_it_holds(claim, points: list[Point], *, detail: bool = True) -> str:
    """One series' holding region in words, from its measured points in the condition's order;
    ``detail``: where a series holds nowhere, say where it fails and where it is unresolved."""
    holding = [p.at for p in points if p.outcome == "holds"]
    if not holding:
        parts = [f"{verb} at {', '.join(_span(claim, r) for r in _runs(points, o))}"
                 for o, verb in (("fails", "fails"), ("inconclusive", "unresolved"))
                 if _runs(points, o)]
        return "nowhere" + (" (" + "; ".join(parts) + ")" if detail else "")
    if len(holding) == len(points):
        return ("at every point measured" if detail else "everywhere") if len(points) > 1 else \
            f"at {_at(claim, holding[0])}"
    runs = _runs(points, "holds")
    if len(runs) > 1:
        return "at " + ", ".join(_span(claim, r) for r in runs)
    run = runs[0]
    if run[-1] == points[-1].at:
        return f"from {_at(claim, run[0])}"
    if run[0] == points[0].at:
        return f"up to {_at(claim, run[-1])}"
    if len(run) == 1:
        return f"only at {_at(claim, run[0])}"
    return f"from {_at(claim, run[0])} to {_x(claim, run[-1])}"


def _distinct(series: list[str]) -> dict[str, str]:
    """Each series' name without what all of them share up to a comma ("int8 block, batch 1"
    and "int8 block, batch 32" read "batch 1" and "batch 32")."""
    short = [_short(x) for x in series]
    common = os.path.commonprefix(short)
    cut = common.rfind(", ") + 2 if ", " in common else 0
    return {x: s[cut:] or s for x, s in zip(series, short)}


def _short(series: str) -> str:
    """A series' name in a sentence: up to its first parenthesis."""
    return series.split(" (")[0]


def _learner(v: Verdict, claim) -> str:
    p = v.learner
    whose = "your point" if v.source == "live" else "your point (evidence)"
    series = list(dict.fromkeys(q.series for q in v.points))
    where = _at(claim, p.at) + (f", {_distinct(series)[p.series]}" if len(series) == 2 else "")
    if not p.measured:
        return f"{whose} at {where} was not measured"
    return f"{whose} at {where}: {format(p.estimate(claim), claim.fmt)}, {p.outcome}"


def _head(v: Verdict, claim) -> str:
    """Where the claim holds, lower case, without the learner's point."""
    bar = f"bar {_SYMBOL[claim.rule.direction]} {claim.rule.threshold:g}"
    if v.pooled is not None:
        result = {"holds": "holds", "holds nowhere": "fails", "unresolved": "is unresolved"}
        head = (f"the points agree within noise; pooled, it {result[v.outcome]}: "
                f"{format(v.pooled, claim.fmt)} ({bar})")
    elif v.outcome == "unresolved":
        head = f"unresolved: every point's interval reaches both sides of the {bar}"
    else:
        by_series = {}
        for p in sorted(v.measured_points, key=lambda p: p.at):
            by_series.setdefault(p.series, []).append(p)
        if len(by_series) == 1:
            head = "holds " + _where_it_holds(claim, next(iter(by_series.values())))
        elif len(by_series) == 2:   # each series its region, briefly (the map says the rest)
            names = _distinct(list(by_series))
            head = "holds " + " and ".join(
                f"{_where_it_holds(claim, pts, detail=False)} ({names[s]})"
                for s, pts in by_series.items())
        else:                       # many series: the learner's named, the others counted
            mine = v.learner.series if v.learner.series in by_series else next(iter(by_series))
            others = [pts for s, pts in by_series.items() if s != mine]
            some = sum(any(p.outcome == "holds" for p in pts) for pts in others)
            head = (f"for {_short(mine)}, holds "
                    f"{_where_it_holds(claim, by_series[mine], detail=False)} ({some} of "
                    f"{len(others)} other series hold somewhere)")
    missing = v.unmeasured_points
    if missing:
        head += f" (not measured at {', '.join(f'{p.at:,g}' for p in missing)})"
    return head


def sentence(v: Verdict) -> str:
    """Where the claim holds, in about 30 words, with the learner's point: "Holds from width
    512; your point at width 128: 1.05× (0.98–1.12), inconclusive." One-point verdicts give
    their outcome and value."""
    claim = CLAIMS[v.claim]
    if not v.points:
        if v.value is None:
            return f"{v.outcome.capitalize()}: not measured."
        est = (Ratio if claim.rule.log else Estimate)(v.value, v.se, v.dof)
        return f"{v.outcome.capitalize()}: {format(est, claim.fmt)}."
    head = _head(v, claim)
    return f"{head[0].upper()}{head[1:]}; {_learner(v, claim)}."


def clause(v: Verdict) -> str:
    """The verdict as part of a sentence a learner would write: "holds from width 512; at your
    point it fails", the learner's outcome added where the word leaves it open; a one-point
    verdict's outcome."""
    if not v.points:
        return v.outcome
    claim = CLAIMS[v.claim]
    head = _head(v, claim)
    if head.startswith("unresolved"):
        head = "is " + head
    p = v.learner
    if not p.measured:
        return f"{head} (your point was not measured)"
    if v.pooled is not None or v.outcome in ("holds", "unresolved"):
        return head                        # the word already says what the learner's point is
    mine = {"holds": "it holds", "fails": "it fails", "inconclusive": "it is inconclusive"}
    return f"{head}; at your point {mine[p.outcome]}"


def markdown(v: Verdict) -> str:
    """The claim, its evidence and rule, the verdict's word and sentence: the text above a map."""
    c = CLAIMS[v.claim]
    where = "" if v.source == "live" else f"  \n**Rests on:** `{v.source}`"
    why = f"  \n**What decides it:** {c.condition.why}" if v.points and c.condition.why else ""
    measured = [p for p in v.points if p.measured]
    exact = (all(p.se == 0 for p in measured) if v.points else v.se == 0) and (
        bool(measured) or v.value is not None)
    return (f"**Claim** ({c.article}): “{c.original}” — {c.english}  \n"
            f"**Evidence:** {v.evidence}{where}  \n"
            f"**Rule:** {c.rule.text(exact=exact)}.{why}  \n"
            f"**Verdict:** {sentence(v)}")


def _xlabel(c) -> str:
    """The condition as an axis or column label, with its unit."""
    cond = c.condition
    label = cond.over or cond.name
    return label + (f" ({cond.unit})" if cond.unit and f"({cond.unit}" not in label else "")


def points_table(v: Verdict) -> str:
    """Every point of the sweep as a markdown table, in the condition's order per series, the
    learner's in bold."""
    c = CLAIMS[v.claim]
    series = any(p.series for p in v.points)
    exact = all(p.se == 0 for p in v.points if p.measured)
    head = (("| series " if series else "")
            + f"| {_xlabel(c)} | value ({'exact' if exact else '95% interval'}) | outcome |")
    rule = ("|---" if series else "") + "|---:|---|---|"
    order = list(dict.fromkeys(p.series for p in v.points))
    rows = []
    for p in sorted(v.points, key=lambda p: (order.index(p.series), p.at)):
        value = format(p.estimate(c), c.fmt) if p.measured else "not measured"
        cells = ([p.series] if series else []) + [f"{p.at:,g}", value,
                                                  p.outcome if p.measured else "–"]
        if p == v.learner:
            cells = [f"**{x}**" for x in cells[:-1]] + [f"**{cells[-1]} (your point)**"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *rows])


def _ylabel(c) -> str:
    """The measured quantity as an axis label: the claim's own short label where it has one."""
    if c.axis:
        return "\n".join(textwrap.wrap(c.axis, 34)[:3])
    q = c.rule.quantity
    for stop in (" (", ";", ":"):
        q = q.split(stop)[0]
    return "\n".join(textwrap.wrap(q + (" (ratio)" if c.rule.log else ""), 34)[:3])


def _set_xscale(ax, xs: list[float]) -> str:
    """Log (base 2) where the sweep spans a factor 8 or more, symlog from 0; returns which."""
    positive = [x for x in xs if x > 0]
    if positive and max(positive) / min(positive) >= 8:
        if min(xs) > 0:
            ax.set_xscale("log", base=2)
            return "log"
        if min(xs) == 0:          # a sweep from 0 (no offset, no budget): log beyond 0
            ax.set_xscale("symlog", base=2, linthresh=min(positive))
            return "symlog"
    return "linear"


def verdict_map(v: Verdict, *, ax, reference: Sequence[Verdict] = (),
                reference_label: str = "reference run") -> None:
    """Draw ``v``'s map on ``ax`` (see the module docstring); ``reference``: the same claim's
    verdicts from reference runs (or, beside a verdict on committed evidence, this run's
    replicate: ``reference_label`` says which), drawn faint behind. Series measured at the same
    points are drawn a little apart, so that no marker hides another."""
    c = CLAIMS[v.claim]
    if not v.points:
        raise ValueError(f"verdict_map draws a sweep; claim {v.claim!r} was judged at one point")
    series = list(dict.fromkeys(p.series for p in v.points))
    measured = v.measured_points
    xs = [q.at for q in v.points]
    scale = _set_xscale(ax, xs)
    width = (max(xs) - min(xs)) or 1.0

    def shifted(x: float, s: str) -> float:
        k = _index(series, s) - (len(series) - 1) / 2
        if len(series) < 2:
            return x
        return (x * 1.04 ** k if scale == "log" or (scale == "symlog" and x > 0)
                else x + 0.012 * width * k)

    for ref in reference:
        for p in ref.measured_points:
            ax.plot(shifted(p.at, p.series), p.value, MARKERS[_index(series, p.series)],
                    color=COLOURS[p.outcome], alpha=0.25, ms=6, zorder=1)
    for i, s in enumerate(series):
        pts = sorted((p for p in measured if p.series == s), key=lambda p: p.at)
        if len(pts) > 1:
            ax.plot([shifted(p.at, s) for p in pts], [p.value for p in pts], "-", color="#bbbbbb",
                    lw=1, zorder=2)
        for p in pts:
            lo, hi = p.estimate(c).errors
            err = [[lo], [hi]] if math.isfinite(lo) and math.isfinite(hi) else None
            ax.errorbar(shifted(p.at, s), p.value, yerr=err, fmt=MARKERS[i % len(MARKERS)],
                        color=COLOURS[p.outcome], ms=7, capsize=3, zorder=3)
    ax.axhline(c.rule.threshold, color="k", ls="--", lw=1, zorder=0)
    for p in v.unmeasured_points:
        ax.plot(shifted(p.at, p.series), c.rule.threshold, "x", color="#555555", ms=8, zorder=3)
    if v.pooled is not None:
        lo, hi = v.pooled.interval
        if math.isfinite(lo) and math.isfinite(hi):
            ax.axhspan(lo, hi, color="#4C72B0", alpha=0.12, zorder=0)
    p = v.learner
    if p is not None:
        y = p.value if p.measured else c.rule.threshold
        ax.plot(shifted(p.at, p.series), y, "o", ms=16, mfc="none", mec="k", mew=1.5, zorder=4)
    if c.rule.log and all(q.value > 0 for q in measured):
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ticks = spaced_log_ticks(lo, hi, per_axis=8)
        if len(ticks) >= 2:
            from matplotlib.ticker import NullLocator
            ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
            ax.yaxis.set_minor_locator(NullLocator())
    ticks = _spaced(ax, sorted(set(xs)), keep=p.at if p is not None else None)
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{x:,g}" for x in ticks])
    ax.set_xlabel("\n".join(textwrap.wrap(_xlabel(c), 60)))
    ax.set_ylabel(_ylabel(c))
    ax.set_title(f"{textwrap.shorten(c.english, 70, placeholder='…')}\nverdict: "
                 f"{textwrap.shorten(_head(v, c), 70, placeholder='…')}", fontsize=10)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Line2D([], [], marker="o", ls="", color=COLOURS[o], label=o) for o in COLOURS]
    handles.append(Line2D([], [], ls="--", lw=1, color="k",
                          label=f"bar {_SYMBOL[c.rule.direction]} {c.rule.threshold:g}"))
    if p is not None:
        handles.append(Line2D([], [], marker="o", ms=10, mfc="none", mec="k", ls="",
                              label="your point"))
    if v.pooled is not None:
        handles.append(Patch(color="#4C72B0", alpha=0.12, label="pooled, 95% interval"))
    if len(series) > 1:
        handles += [Line2D([], [], marker=MARKERS[i % len(MARKERS)], ls="", color="#555555",
                           label=textwrap.shorten(s, 48, placeholder="…"))
                    for i, s in enumerate(series)]
    if reference:
        handles.append(Line2D([], [], marker="o", ls="", color="#555555", alpha=0.25,
                              label=reference_label))
    ax.figure.legend(handles=handles, frameon=False, fontsize=8, loc="outside lower center",
                     ncol=3 if len(series) < 2 else 2)


def _spaced(ax, xs: list[float], *, keep: float | None = None, gap: float = 0.07) -> list[float]:
    """The sweep's points as ticks, leaving out any closer than ``gap`` of the axis to one kept
    (two series measured at 48.2% and 50% would print over each other); ``keep`` (the learner's
    point) always stays."""
    lo, hi = ax.get_xlim()
    to_axis = ax.transScale.transform
    span = to_axis((hi, 0))[0] - to_axis((lo, 0))[0] or 1.0
    pos = {x: to_axis((x, 0))[0] for x in xs}
    kept = [keep] if keep in pos else []
    for x in xs:
        if all(abs(pos[x] - pos[k]) / span >= gap for k in kept):
            kept.append(x)
    return sorted(kept)


def _index(series: list[str], s: str) -> int:
    return series.index(s) % len(MARKERS) if s in series else 0


def map_figure(v: Verdict, *, reference: Sequence[Verdict] = (),
               reference_label: str = "reference run"):
    """A new figure holding ``v``'s map."""
    from course_lib.ui.plots import new_figure

    fig, ax = new_figure(width=6.4, height=3.8)
    verdict_map(v, ax=ax, reference=reference, reference_label=reference_label)
    return fig


def show_verdict(v: Verdict, *, reference: Sequence[Verdict] = (),
                 reference_label: str = "reference run") -> None:
    """Display a verdict in a lesson: its text, its map (for a sweep) and its table of points."""
    from IPython.display import Markdown, display

    display(Markdown(markdown(v)))
    if v.points:
        display(map_figure(v, reference=reference, reference_label=reference_label))
        display(Markdown(points_table(v)))


def demonstration_markdown(shown: Shown) -> str:
    """A demonstration as a lesson shows it: the statement, its check (and formula), the
    numbers, and what it shows."""
    d = DEMONSTRATIONS[shown.demonstration]
    result = ("**Shown.**" if shown.ok else
              "**The check did not come out: that is a bug in the course, please report it.**")
    formula = f"  \n**Formula:** {d.formula}" if d.formula else ""
    return (f"**Demonstration** ({d.article}): “{d.original}” — {d.english}  \n"
            f"**Check:** {d.check}{formula}  \n**Numbers:** {shown.numbers}  \n{result}"
            + (f"  \n**What it shows:** {d.shows.rstrip('.')}." if shown.ok else ""))


def recorded(d: dict) -> Verdict | None:
    """A verdict from a results file (``Recorder``'s dict), or None for a claim the registry no
    longer holds (an old reference run's claim that became a demonstration)."""
    return Verdict.from_dict(d) if d.get("claim") in CLAIMS else None


def recorded_sentence(d: dict) -> str:
    """The sentence of a recorded verdict, drawn anew from its points; the recorded word for
    a claim the registry no longer holds."""
    v = recorded(d)
    return sentence(v) if v is not None else d.get("outcome", "–")
