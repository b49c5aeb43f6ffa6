"""Reading lesson 12's table: the best rungs, the bounds each lesson promised, the Pareto front,
what each technique does alone and on top of the others, whether speed-ups multiply, and the
"what to use when" guide. Pure functions of the rows and points ``ladder_meters.measure`` returns.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from course_lib.ui.plots import new_figure
from course_lib.capstone.ladder import ACCURACY_NEUTRAL, BOUNDS, METRICS, TECHNIQUES
from course_lib.capstone.ladder_speedups import fmt, multiply_call, product, ratio, rung_speedup


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
    points that differ only in it. None when no pair was measured."""
    if technique not in TECHNIQUES:
        raise ValueError(f"technique must be one of {TECHNIQUES}, got {technique!r}")
    i, pairs = TECHNIQUES.index(technique), {}
    for key, row in points.items():
        on = points.get(key[:i] + (True,) + key[i + 1:])
        if not key[i] and on and row[metric] is not None and on[metric] is not None:
            a, b = row[metric], on[metric]
            pairs[key] = 100 * (b - a) if metric == "test_accuracy" else a / b
    if not pairs:
        return None
    top = max(pairs, key=sum)
    return {"alone": pairs.get((False,) * len(TECHNIQUES)), "on_top": pairs[top],
            "on_top_of": tuple(t for t, on in zip(TECHNIQUES, top) if on),
            "median": statistics.median(pairs.values()), "pairs": len(pairs)}


def stack_versus_product(points: dict[tuple, dict], base: dict, stacks: Sequence[tuple[str, str, dict]]
                         ) -> list[dict]:
    """For each ``(label, metric, row)``: the speed-up ``row`` measured against ``base``, the
    product of the speed-ups its techniques give alone (what "speed-ups multiply" predicts),
    their ratio, each with its error (``..._estimate``), and the call on the ratio
    (``ladder_speedups.multiply_call``: "roughly true", "not true" or "inconclusive")."""
    out = []
    for label, metric, row in stacks:
        alone = [points[tuple(x == t for x in TECHNIQUES)] for t in row["techniques"]]
        predicted = product([rung_speedup(base, p, metric) for p in alone])
        measured = rung_speedup(base, row, metric)
        r = ratio(measured, predicted)
        out.append({"label": label, "metric": metric, "predicted": predicted.value,
                    "measured": measured.value, "ratio": r.value, "predicted_estimate": predicted,
                    "measured_estimate": measured, "ratio_estimate": r, "call": multiply_call(r)})
    return out


def _word(f: float | None) -> str:
    # "helps"/"hurts": at least 10% faster/slower; anything closer is called no clear change.
    if f is None:
        return "not measured"
    return "helps" if f >= 1.1 else ("hurts" if f <= 0.9 else "no clear change")


def _fx(f: float | None) -> str:
    return "—" if f is None else f"{f:.2f}×"


def usage_guide(points: dict[tuple, dict], labels: dict[str, str],
                unavailable: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The "what to use when" table (Markdown rows, one per technique) and the notes on which
    techniques do not stack, both read from the measured points. A technique never measured
    (``unavailable``: technique -> reason) gets a row saying so."""
    def get(e, which="median"):
        return None if e is None or e[which] is None else e[which]
    rows, notes, unavailable = [], [], unavailable or {}
    for t in TECHNIQUES:
        e = {m: effect(points, t, metric=m) for m in
             ("train_epoch_s", "latency_b1_ms", "latency_b32_ms", "size_bytes", "test_accuracy")}
        if e["latency_b32_ms"] is None:
            why = unavailable.get(t, "no pair of points differing only in it was measured")
            rows.append(f"| {labels[t]} | not measured here: {why} | | | | |")
            continue
        tr, same_model = e["train_epoch_s"], t in ("bucketing", "amp", "sdpa")
        if same_model:
            train_text = (f"{_word(get(tr, 'alone'))} (alone {_fx(get(tr, 'alone'))}, "
                          f"on top {_fx(get(tr, 'on_top'))})")
        elif t == "int8":
            train_text = "nothing (applied after training)"
        else:
            train_text = f"trains a smaller model ({_fx(get(tr, 'on_top'))} per epoch), once built"
        b32, b1, size = e["latency_b32_ms"], e["latency_b1_ms"], get(e["size_bytes"])
        rows.append(f"| {labels[t]} | {train_text} | {_word(get(b32))} (alone {_fx(get(b32, 'alone'))}, "
                    f"on top {_fx(get(b32, 'on_top'))}) | {_word(get(b1))} ({_fx(get(b1))}) | "
                    f"{'same' if abs(size - 1) < 0.01 else f'{size:.2f}× smaller'} | "
                    f"{e['test_accuracy']['median']:+.2f} points |")
        for metric, what in (("latency_b32_ms", "inference at batch 32"), ("train_epoch_s", "training")):
            a, o = get(e[metric], "alone"), get(e[metric], "on_top")
            if a is None or (metric == "train_epoch_s" and not same_model):
                continue
            if a >= 1.1 and o < 0.9:
                notes.append(f"**{labels[t]}** helps {what} alone ({a:.2f}×) but *slows* it on top "
                             f"of the others ({o:.2f}×): it does not stack.")
            elif a >= 1.1 and o < 0.67 * a:
                others = [labels[x] for x in e[metric]["on_top_of"]
                          if metric != "train_epoch_s" or x != "int8"]
                notes.append(f"**{labels[t]}** gains less for {what} on top of the others ({o:.2f}×) "
                             f"than alone ({a:.2f}×): it overlaps with {', '.join(others)}.")
            elif a <= 0.9 and o >= 1.1:
                notes.append(f"**{labels[t]}** hurts {what} alone ({a:.2f}×) but helps on top of "
                             f"the others ({o:.2f}×).")
    return rows, notes


def stacked_accuracy_verdict(base_correct, top_correct, *, top_name: str, n_rungs: int,
                             where: str):
    """The verdict on "optimizations keep accuracy": the teacher with every rung that keeps it
    stacked (the distilled student is another model), against the baseline, paired over the test
    reviews (both score the same reviews, so only those on
    which they disagree carry noise)."""
    from course_lib.measure.claims import judge
    from course_lib.measure.verdicts import paired_accuracy_change

    e = paired_accuracy_change(list(base_correct), list(top_correct))
    return judge("optimizations_keep_accuracy", e.value, se=e.se, dof=e.dof,
                 evidence=f"the {n_rungs} rungs that keep the teacher, stacked ({top_name}): {e:+.2f} "
                          f"points against the baseline, paired over {len(base_correct):,} "
                          f"test reviews, {where}")


def rung_table(rows: Sequence[dict], labels: dict[str, str]) -> str:
    """The ladder as a Markdown table: what each rung adds, its accuracy, times (with the
    speed-up over the baseline and its standard error), size and peak memory."""
    base = rows[0]
    lines = ["| rung | adds | accuracy | train epoch | test set | batch 1 | batch 32 | size | peak memory |",
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


_PARETO_AXES = {"latency_b32_ms": ("latency, batch of 32 (ms, log scale)", 1.0),
                "latency_b1_ms": ("latency, batch of 1 (ms, log scale)", 1.0),
                "size_bytes": ("size on disk (MiB, log scale)", 1 / 2**20)}


def pareto_figure(points: Sequence[dict], rows: Sequence[dict], *, latency: str = "latency_b32_ms",
                  max_drop_points: float = 2.0, selected: dict | None = None):
    """Lesson 12: accuracy against latency and against size, every measured combination in
    grey, the Pareto front in green, the ladder's rungs numbered, ``selected`` as a star."""

    if latency not in ("latency_b32_ms", "latency_b1_ms"):
        raise ValueError(f"latency must be 'latency_b32_ms' or 'latency_b1_ms', got {latency!r}")
    fig, axes = new_figure(2, width=6, height=4.2)
    base = rows[0]
    for ax, x in zip(axes, (latency, "size_bytes")):
        label, k = _PARETO_AXES[x]
        ax.scatter([p[x] * k for p in points], [100 * p["test_accuracy"] for p in points], s=14,
                   color="#BBBBBB", label=f"all {len(points)} combinations")
        front = pareto_front(points, x=x)
        ax.plot([p[x] * k for p in front], [100 * p["test_accuracy"] for p in front], "-o", ms=4,
                color="#55A868", label="Pareto front")
        ax.plot([r[x] * k for r in rows], [100 * r["test_accuracy"] for r in rows], "--", lw=1,
                color="#4C72B0", label="the ladder")
        # Rung numbers, not names: the later rungs sit close together and long labels overlapped.
        # Rungs at the same point (bucketing and SDPA change neither size nor accuracy) share one
        # label, "0,1,2", instead of three printed on top of each other.
        at: dict[tuple, list[int]] = {}
        for n, r in enumerate(rows):
            at.setdefault((round(r[x] * k, 6), round(100 * r["test_accuracy"], 6)), []).append(n)
        for i, ((px, py), ns) in enumerate(at.items()):
            ax.annotate(",".join(map(str, ns)), (px, py), fontsize=7, color="#4C72B0",
                        xytext=(3, 3 + 7 * (i % 2)), textcoords="offset points")
        ax.axhline(100 * base["test_accuracy"] - max_drop_points, color="k", ls=":", lw=1,
                   label=f"teacher − {max_drop_points:g} points")
        if selected is not None:
            ax.scatter([selected[x] * k], [100 * selected["test_accuracy"]], marker="*", s=220,
                       color="#C44E52", zorder=5, label="selected")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%)")
    axes[0].set_title("Accuracy vs latency")
    axes[1].set_title("Accuracy vs size")
    axes[0].legend(frameon=False, fontsize=7)
    fig.supxlabel("ladder rungs: " + ", ".join(f"{n} {r['name']}" for n, r in enumerate(rows)),
                  fontsize=7)
    return fig
