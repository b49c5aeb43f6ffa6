"""Reading lesson 14's table: the best rungs, the bounds each lesson promised, the Pareto front,
what each technique does alone and on top of the others, whether speed-ups multiply, and the
"what to use when" guide. Pure functions of the rows and points ``ladder_meters.measure`` returns.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from course_lib.ui.plots import new_figure
from course_lib.capstone.ladder import (ACCURACY_NEUTRAL, BOUNDS, METRICS, TECHNIQUES,
                                        TRAINS_THE_TEACHER)
from course_lib.capstone.ladder_speedups import (PAIRED, UNPAIRED, fmt, multiply_call, product,
                                                 rung_speedup)
from course_lib.measure.verdicts import Estimate, geometric_mean, quotient


def record(rows: Sequence[dict], rec) -> None:
    """``<rung>_<metric>`` for every rung and metric (units in ``METRICS``), each with the
    device the rung ran on."""
    for row in rows:
        for metric, unit in METRICS.items():
            rec.record(f"{row['name']}_{metric}", row[metric], unit, device=row["device"])


def summary(rows: Sequence[dict], points: dict[tuple, dict], *,
            max_drop_points: float = 2.0) -> dict:
    """The best inference configuration (fastest test set within ``max_drop_points`` of the
    baseline's accuracy, among every point whose test set was timed: the rungs and the Pareto
    front) and the best training configuration among those that train the teacher (a smaller
    model training faster is not a training technique), against the baseline; each speed-up
    with its error (``ladder_speedups.speedup``: the value, and ``..._estimate``)."""
    if max_drop_points < 0:
        raise ValueError(f"max_drop_points must be >= 0, got {max_drop_points}")
    base = rows[0]
    drop = {p["name"]: 100 * (base["test_accuracy"] - p["test_accuracy"]) for p in points.values()}
    inf = min((p for p in points.values() if p["test_set_s"] is not None
               and drop[p["name"]] <= max_drop_points), key=lambda p: p["test_set_s"])
    trn = min((p for p in points.values() if p["train_epoch_s"] is not None
               and not {"distill", "prune"} & set(p["techniques"])),
              key=lambda p: p["train_epoch_s"])
    inf_x, trn_x = rung_speedup(base, inf, "test_set_s"), rung_speedup(base, trn, "train_epoch_s")
    return {"best_inference": inf["name"], "best_inference_speedup": inf_x.value,
            "best_inference_speedup_estimate": inf_x,
            "best_inference_accuracy_drop_points": drop[inf["name"]],
            "best_training": trn["name"], "best_training_speedup": trn_x.value,
            "best_training_speedup_estimate": trn_x}


def bound_checks(rows: Sequence[dict]) -> list[dict]:
    """Each rung against the rung below it: the accuracy change in points, the bound
    (``BOUNDS``) of the technique it adds, and whether the loss stays within it. A rung that
    adds only ``ACCURACY_NEUTRAL`` techniques gets ``bound_points`` and ``ok`` None: its
    accuracy is the rung below's by construction, so there is nothing to check."""
    out = []
    for below, row in zip(rows, rows[1:]):
        added = [t for t in row["techniques"] if t not in below["techniques"]]
        change = 100 * (row["test_accuracy"] - below["test_accuracy"])
        bounded = [BOUNDS[t] for t in added if t not in ACCURACY_NEUTRAL]
        bound = min(bounded) if bounded else None
        out.append({"rung": row["name"], "added": added, "change_points": change,
                    "bound_points": bound,
                    "ok": None if bound is None else -change <= bound + 1e-9})
    return out


def pareto_front(points: Sequence[dict], *, x: str = "latency_b32_ms") -> list[dict]:
    """The points no other point beats on both ``x`` (lower is better) and accuracy."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p[x], -p["test_accuracy"])):
        if p["test_accuracy"] > best:
            front.append(p)
            best = p["test_accuracy"]
    return front


def effect(points: dict[tuple, dict], technique: str, *, metric: str) -> dict | None:
    """What switching ``technique`` on does to ``metric``: a factor before / after (> 1: it
    helps a time or size); for accuracy, the change in points. ``alone``: on the baseline;
    ``on_top``: with the most other techniques on; ``median``: over every measured pair of
    points that differ only in it. Where both sides of a pair carry more than one sample (for
    a latency, timed in the same interleaved rounds), ``alone_estimate`` and ``on_top_estimate``
    give the course's speed-up with its error (``ladder_speedups.rung_speedup``; else None).
    None when no pair was measured."""
    if technique not in TECHNIQUES:
        raise ValueError(f"technique must be one of {TECHNIQUES}, got {technique!r}")
    i, pairs, sides = TECHNIQUES.index(technique), {}, {}
    for key, row in points.items():
        on = points.get(key[:i] + (True,) + key[i + 1:])
        if not key[i] and on and row[metric] is not None and on[metric] is not None:
            a, b = row[metric], on[metric]
            pairs[key] = 100 * (b - a) if metric == "test_accuracy" else a / b
            sides[key] = (row, on)
    if not pairs:
        return None
    top, none = max(pairs, key=sum), (False,) * len(TECHNIQUES)
    return {"alone": pairs.get(none), "on_top": pairs[top],
            "alone_estimate": _speedup_estimate(*sides[none], metric) if none in sides else None,
            "on_top_estimate": _speedup_estimate(*sides[top], metric),
            "on_top_of": tuple(t for t, on in zip(TECHNIQUES, top) if on),
            "median": statistics.median(pairs.values()), "pairs": len(pairs)}


def _speedup_estimate(before: dict, after: dict, metric: str) -> Estimate | None:
    # the course's speed-up with its error where both sides carry more than one sample (a
    # latency: timed in the same rounds; an epoch: its timed steps)
    a, b = (p.get("samples", {}).get(metric) or [] for p in (before, after))
    if (metric not in PAIRED + UNPAIRED or len(a) < 2 or len(b) < 2
            or (metric in PAIRED and len(a) != len(b))):
        return None
    return rung_speedup(before, after, metric)


def stack_versus_product(points: dict[tuple, dict], base: dict,
                         stacks: Sequence[tuple[str, str, dict]]) -> list[dict]:
    """For each ``(label, metric, row)``: the speed-up ``row`` measured against ``base``, the
    product of the speed-ups its techniques give alone (what "speed-ups multiply" predicts),
    their ratio, each with its error (``..._estimate``), and the call on the ratio
    (``ladder_speedups.multiply_call``: "roughly true", "not true" or "inconclusive")."""
    out = []
    for label, metric, row in stacks:
        alone = [points[tuple(x == t for x in TECHNIQUES)] for t in row["techniques"]]
        predicted = product([rung_speedup(base, p, metric) for p in alone])
        measured = rung_speedup(base, row, metric)
        r = paired_stack_ratio(base, row, alone, metric) or quotient(measured, predicted)
        out.append({"label": label, "metric": metric, "predicted": predicted.value,
                    "measured": measured.value, "ratio": r.value, "predicted_estimate": predicted,
                    "measured_estimate": measured, "ratio_estimate": r, "call": multiply_call(r)})
    return out


def paired_stack_ratio(base: dict, row: dict, alone: Sequence[dict], metric: str
                       ) -> Estimate | None:
    """measured / predicted round by round, where every point was timed in the same
    interleaved rounds (``ladder_speedups.PAIRED`` metrics with as many samples each): in round
    j, ``(base_j / row_j) / prod(base_j / alone_j)``, then the geometric mean over the rounds
    (``verdicts.speedup``'s statistic, n - 1 degrees of freedom). Drift that slows a whole round
    cancels, which adding the factors' errors in quadrature cannot know. None where the
    samples do not pair (training steps, or unequal repeats)."""
    runs = [p["samples"].get(metric) or [] for p in (base, row, *alone)]
    if metric not in PAIRED or len({len(x) for x in runs}) != 1 or len(runs[0]) < 2:
        return None
    b, top, *rest = runs
    per_round = [(b[j] / top[j]) / math.prod(b[j] / a[j] for a in rest) for j in range(len(b))]
    return geometric_mean(per_round)


def _word(f: float | None) -> str:
    # "helps"/"hurts": at least 10% faster/slower; anything closer is called no clear change.
    if f is None:
        return "not measured"
    return "helps" if f >= 1.1 else ("hurts" if f <= 0.9 else "no clear change")


def _fx(f: float | None, e: Estimate | None = None) -> str:
    # a factor, with its 95% interval where one was measured
    return "—" if f is None else fmt(e, digits=2) if e is not None else f"{f:.2f}×"


def factor(e: dict | None, which: str = "median") -> float | None:
    """One factor of an ``effect``: for "alone" and "on_top" the course's speed-up where it
    carries an error (the value the guide prints with its interval), else the ratio of the two
    points' values; "median" as it is. None where nothing was measured."""
    if e is None or e[which] is None:
        return None
    est = e.get(f"{which}_estimate")
    return est.value if est is not None else e[which]


def helping(points: dict[tuple, dict], techniques, *, metric: str) -> list[str]:
    """The ``techniques`` the guide says help ``metric``: their median factor over every pair
    that differs only in them, read by the guide's own word (``_word``: at least 1.1×)."""
    return [t for t in techniques if _word(factor(effect(points, t, metric=metric))) == "helps"]


def biggest_alone(points: dict[tuple, dict], techniques, *,
                  metric: str) -> tuple[str, float, Estimate | None]:
    """The technique of ``techniques`` with the largest factor alone on ``metric``, that factor
    as the guide prints it (``factor``) and its estimate with the error (None where the points
    were timed once)."""
    best = max(techniques, key=lambda t: factor(effect(points, t, metric=metric), "alone") or 0.0)
    e = effect(points, best, metric=metric)
    return best, factor(e, "alone"), e["alone_estimate"]


def stacking(points: dict[tuple, dict]) -> list[dict]:
    """Where a technique's gain changes on top of the others, for inference at batch 32 and (the
    techniques that train the teacher) training: ``kind`` "slows" (helps alone, at least 10%,
    hurts on top), "overlaps" (its gain on top is under 2/3 of its gain alone: another technique
    removes the same cost) or "grows" (hurts alone, helps on top). Each with ``technique``,
    ``metric``, ``alone``, ``on_top`` (``factor``'s values) and ``on_top_of``."""
    out = []
    for t in TECHNIQUES:
        for metric in ("latency_b32_ms", "train_epoch_s"):
            e = effect(points, t, metric=metric)
            a, o = factor(e, "alone"), factor(e, "on_top")
            if (a is None or o is None
                    or (metric == "train_epoch_s" and t not in TRAINS_THE_TEACHER)):
                continue
            kind = ("slows" if a >= 1.1 and o < 0.9 else "overlaps" if a >= 1.1 and o < 0.67 * a
                    else "grows" if a <= 0.9 and o >= 1.1 else None)
            if kind:
                out.append({"technique": t, "metric": metric, "kind": kind, "alone": a, "on_top": o,
                            "on_top_of": tuple(x for x in e["on_top_of"]
                                               if metric != "train_epoch_s" or x != "int8")})
    return out


def usage_guide(points: dict[tuple, dict], labels: dict[str, str],
                unavailable: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The "what to use when" table (Markdown rows, one per technique) and the notes on which
    techniques do not stack (``stacking``), both read from the measured points. The word in a
    cell comes from the median over every pair that differs only in the technique (printed with
    its number of pairs); "alone" and "on top" carry their intervals where they were measured
    with repeats. A technique never measured (``unavailable``: technique -> reason) gets a row
    saying so."""
    rows, unavailable = [], unavailable or {}
    for t in TECHNIQUES:
        e = {m: effect(points, t, metric=m) for m in
             ("train_epoch_s", "latency_b1_ms", "latency_b32_ms", "size_bytes", "test_accuracy")}
        if e["latency_b32_ms"] is None:
            why = unavailable.get(t, "no pair of points differing only in it was measured")
            rows.append(f"| {labels[t]} | not measured here: {why} | | | | |")
            continue
        tr = e["train_epoch_s"]
        if tr is None and t != "int8":
            train_text = "not measured"
        elif t in TRAINS_THE_TEACHER:
            train_text = (f"{_word(factor(tr))} (median {_fx(factor(tr))} over "
                          f"{tr['pairs']} pairs; alone "
                          f"{_fx(factor(tr, 'alone'), tr['alone_estimate'])}, on top "
                          f"{_fx(factor(tr, 'on_top'), tr['on_top_estimate'])})")
        elif t == "int8":
            train_text = "nothing (applied after training)"
        else:
            train_text = (f"trains a smaller model ({_fx(factor(tr, 'on_top'))} per epoch), "
                          "once built")
        b32, b1, size = e["latency_b32_ms"], e["latency_b1_ms"], factor(e["size_bytes"])
        rows.append(f"| {labels[t]} | {train_text} | {_word(factor(b32))} "
                    f"(median {_fx(factor(b32))} over {b32['pairs']} pairs; "
                    f"alone {_fx(factor(b32, 'alone'), b32['alone_estimate'])}, on top "
                    f"{_fx(factor(b32, 'on_top'), b32['on_top_estimate'])}) | "
                    f"{_word(factor(b1))} ({_fx(factor(b1))}) | "
                    f"{'same' if abs(size - 1) < 0.01 else f'{size:.2f}× smaller'} | "
                    f"{e['test_accuracy']['median']:+.2f} points |")
    notes = []
    for s in stacking(points):
        what = "inference at batch 32" if s["metric"] == "latency_b32_ms" else "training"
        name, a, o = labels[s["technique"]], s["alone"], s["on_top"]
        notes.append({"slows": f"**{name}** helps {what} alone ({a:.2f}×) but *slows* it on top "
                               f"of the others ({o:.2f}×): it does not stack.",
                      "overlaps": f"**{name}** gains less for {what} on top of the others "
                                  f"({o:.2f}×) than alone ({a:.2f}×): it overlaps with "
                                  f"{', '.join(labels[x] for x in s['on_top_of'])}.",
                      "grows": f"**{name}** hurts {what} alone ({a:.2f}×) but helps on top of the "
                               f"others ({o:.2f}×)."}[s["kind"]])
    return rows, notes


def stacked_accuracy_verdict(base_correct, top_correct, *, top_name: str, n_rungs: int,
                             where: str):
    """The verdict on "optimizations keep accuracy": the teacher with every rung that keeps it
    stacked (the distilled student is another model), against the baseline, paired over the test
    reviews (both score the same reviews, so only those on
    which they disagree carry noise)."""
    from course_lib.measure.judging import judge
    from course_lib.measure.verdicts import paired_accuracy_change

    e = paired_accuracy_change(list(base_correct), list(top_correct))
    return judge("optimizations_keep_accuracy", e.value, se=e.se, dof=e.dof,
                 evidence=f"the {n_rungs} rungs that keep the teacher, stacked ({top_name}): "
                          f"{e:+.2f} points against the baseline, paired over "
                          f"{len(base_correct):,} test reviews, {where}")


def rung_table(rows: Sequence[dict], labels: dict[str, str]) -> str:
    """The ladder as a Markdown table: what each rung adds, its accuracy, times (with the
    speed-up over the baseline and its standard error), size and peak memory."""
    base = rows[0]
    lines = ["| rung | adds | accuracy | train epoch | test set | batch 1 | batch 32 | size | "
             "peak memory |",
             "|---|---|---|---|---|---|---|---|---|"]
    for below, row in zip([None, *rows], rows):
        adds = "" if below is None else ", ".join(
            labels[t] for t in row["techniques"] if t not in below["techniques"])
        lines.append(
            f"| **{row['name']}** | {adds} | {row['test_accuracy']:.1%} | "
            f"{row['train_epoch_s']:,.1f} s ({fmt(rung_speedup(base, row, 'train_epoch_s'))}) | "
            f"{row['test_set_s']:,.2f} s ({fmt(rung_speedup(base, row, 'test_set_s'))}) | "
            f"{row['latency_b1_ms']:,.2f} ms | {row['latency_b32_ms']:,.1f} ms | "
            f"{row['size_bytes'] / 2**20:.2f} MiB | {row['peak_mib']:,.1f} MiB |")
    return "\n".join(lines)


def describe(point, labels: dict[str, str]) -> str:
    """What a point (a dict of the table, or a ``Rung``) switches on, in words ("bucketing +
    SDPA + int8"; "nothing (the baseline)"): a rung's short name ("int8") names only the
    technique it adds."""
    techniques = point["techniques"] if isinstance(point, dict) else point.techniques
    return " + ".join(labels[t] for t in techniques) or "nothing (the baseline)"


def accuracy_change(base: dict, point: dict) -> Estimate | None:
    """``point``'s accuracy minus ``base``'s in points, paired over the test reviews both were
    scored on (``verdicts.paired_accuracy_change``); None without per-review scores."""
    from course_lib.measure.verdicts import paired_accuracy_change

    a, b = base.get("test_correct"), point.get("test_correct")
    if a is None or b is None:
        return None
    if point.get("key", point) == base.get("key", base):   # the baseline against itself: no change
        return Estimate(0.0, 0.0, float(max(1, len(a) - 1)))
    return paired_accuracy_change(list(a), list(b))


_PARETO_AXES = {"latency_b32_ms": ("latency, batch of 32 (ms, log scale)", 1.0),
                "latency_b1_ms": ("latency, batch of 1 (ms, log scale)", 1.0),
                "size_bytes": ("size on disk (MiB, log scale)", 1 / 2**20)}


def pareto_figure(points: Sequence[dict], rows: Sequence[dict], *, latency: str = "latency_b32_ms",
                  max_drop_points: float = 2.0, selected: dict | None = None):
    """Lesson 14: accuracy against latency and against size, every measured combination in
    grey, the Pareto front in green, the ladder's rungs numbered, ``selected`` as a star."""

    if latency not in ("latency_b32_ms", "latency_b1_ms"):
        raise ValueError(f"latency must be 'latency_b32_ms' or 'latency_b1_ms', got {latency!r}")

    fig, axes = new_figure(2, width=6, height=4.2)
    base = rows[0]
    accs = [100 * p["test_accuracy"] for p in points]
    floor = 100 * base["test_accuracy"] - max_drop_points
    for ax, x in zip(axes, (latency, "size_bytes")):
        label, k = _PARETO_AXES[x]
        ax.scatter([p[x] * k for p in points], accs, s=14,
                   color="#BBBBBB", label=f"all {len(points)} combinations")
        front = pareto_front(points, x=x)
        ax.plot([p[x] * k for p in front], [100 * p["test_accuracy"] for p in front], "-o", ms=4,
                color="#55A868", label="Pareto front")
        # each front point's 95% interval of its accuracy change against the baseline (paired
        # over the test reviews): points whose bars overlap are not told apart by accuracy
        changes = [accuracy_change(base, p) for p in front]
        bars = [0.0] * len(front)
        if all(c is not None for c in changes):
            bars = [c.half_width for c in changes]
            ax.errorbar([p[x] * k for p in front], [100 * p["test_accuracy"] for p in front],
                        yerr=bars, fmt="none", ecolor="#55A868", elinewidth=1, capsize=2)
        ax.plot([r[x] * k for r in rows], [100 * r["test_accuracy"] for r in rows], "--", lw=1,
                color="#4C72B0", label="the ladder")
        # Rung numbers, not names (the later rungs sit close together), each in a small box on its
        # point, so no label floats over another point; rungs at the same point (bucketing and
        # SDPA change neither size nor accuracy) share one box, "0,1,2".
        at: dict[tuple, list[int]] = {}
        for n, r in enumerate(rows):
            at.setdefault((round(r[x] * k, 6), round(100 * r["test_accuracy"], 6)), []).append(n)
        for (px, py), ns in at.items():
            ax.annotate(",".join(map(str, ns)), (px, py), fontsize=6, color="#4C72B0", ha="center",
                        va="center", zorder=6, bbox=dict(boxstyle="round,pad=0.2", fc="white",
                                                         ec="#4C72B0", lw=0.8))
        low = min(accs + [100 * p["test_accuracy"] - b for p, b in zip(front, bars)])
        high = max(accs + [100 * p["test_accuracy"] + b for p, b in zip(front, bars)])
        pad = max(0.1, 0.08 * (high - low))
        if floor >= low - pad:   # the bound is drawn where it falls among the points
            ax.axhline(floor, color="k", ls=":", lw=1,
                       label=f"teacher − {max_drop_points:g} points")
        else:                    # far below them: said, not drawn (it would flatten the points)
            ax.text(0.99, 0.02,
                    f"teacher − {max_drop_points:g} points = {floor:.1f}%: below this axis",
                    transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
        ax.set_ylim(low - pad, high + pad)
        if selected is not None:
            ax.scatter([selected[x] * k], [100 * selected["test_accuracy"]], marker="*", s=220,
                       color="#C44E52", zorder=5, label="selected")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%)")
    axes[0].set_title("Accuracy vs latency")
    axes[1].set_title("Accuracy vs size")
    axes[0].legend(frameon=False, fontsize=7)
    fig.supxlabel("ladder rungs (boxed numbers): "
                  + ", ".join(f"{n} {r['name']}" for n, r in enumerate(rows)),
                  fontsize=7)
    return fig
