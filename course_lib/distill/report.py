"""Lesson 06's measurements and tables around the students: their speed against the teacher,
the student ladder (reference run and live runs side by side), and the effects that the arms
isolate, each with its noise. The training itself is ``student_runs``; the reference run is
``student_ladder``.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping

import torch

from course_lib.measure.bench import synchronize
from course_lib.core.batching import make_loader
from course_lib.measure.verdicts import (Estimate, difference_call, mean_and_se, paired_accuracy_change, speedup,
                       t_quantile)

NAMES = {"small": "1 layer, width 64", "half": "2 layers, teacher's width",
         "half_from_teacher": "2 layers, from the teacher's layers 0 and 2"}
ARM_NAMES = {"scratch": "labels only (scratch)", "distilled": "KL + labels, transfer set",
             "hard_labels": "teacher's top class on the transfer set",
             "distilled_labelled_only": "KL + labels, labelled split only",
             "mse": "logit MSE + labels, transfer set", "hidden": "KL + labels + hidden states"}
# (what it isolates, cell a, cell b): a - b, paired by seed
EFFECTS = [
    ("the extra data: the teacher's top class on the transfer set vs scratch",
     ("half", "hard_labels"), ("half", "scratch")),
    ("the soft targets on the same data: KL vs the teacher's top class",
     ("half", "distilled"), ("half", "hard_labels")),
    ("soft targets without the extra data: KL on the labelled split vs scratch",
     ("half", "distilled_labelled_only"), ("half", "scratch")),
    ("distillation on the random-initialised student: KL vs scratch",
     ("half", "distilled"), ("half", "scratch")),
    ("the loss: logit MSE vs KL, same alpha and data",
     ("half", "mse"), ("half", "distilled")),
    ("matching hidden states too, vs KL alone", ("half", "hidden"), ("half", "distilled")),
    ("the teacher's layers as initialisation, both from scratch",
     ("half_from_teacher", "scratch"), ("half", "scratch")),
    ("distillation on the teacher-initialised student: KL vs scratch",
     ("half_from_teacher", "distilled"), ("half_from_teacher", "scratch")),
]


def split_seconds(models: Mapping[str, torch.nn.Module], dataset, *, batch_size: int = 32,
                  repeats: int = 3, max_batches: int = 16,
                  device: torch.device | str = "cpu") -> dict[str, list[float]]:
    """Seconds per repeat to classify ``max_batches`` batches spread evenly over ``dataset``'s
    length-sorted batches, per model: each batch runs every model in turn (the order rotates),
    so drift on a shared machine hits all of them; one warm-up pass on the first batch.
    Repeat ``r`` of each model ran under the same conditions: ``verdicts.speedup``."""
    if repeats < 2 or max_batches < 1:
        raise ValueError(f"repeats must be >= 2 and max_batches >= 1, got {repeats}, {max_batches}")
    batches = list(make_loader(dataset, batch_size=batch_size, shuffle=False))
    step = max(1, len(batches) // max_batches)
    batches = batches[::step][:max_batches]
    names = list(models)
    out = {k: [0.0] * repeats for k in names}
    with torch.inference_mode():
        ids, mask = batches[0]["input_ids"].to(device), batches[0]["attention_mask"].to(device)
        for m in models.values():
            m(ids, mask)
        for r in range(repeats):
            for b, batch in enumerate(batches):
                ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
                shift = (r + b) % len(names)
                for name in names[shift:] + names[:shift]:
                    synchronize(device)
                    t0 = time.perf_counter()
                    models[name](ids, mask)
                    synchronize(device)
                    out[name][r] += time.perf_counter() - t0
    return out



def cell_accuracies(runs: list[dict]) -> dict[tuple[str, str], dict[int, float]]:
    """{(student, arm): {seed: test accuracy}} of a list of run records."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in runs:
        out.setdefault((r["student"], r["arm"]), {})[r["seed"]] = r["test_accuracy"]
    return out


def _pm(e: Estimate, n: int) -> str:
    if math.isinf(e.se):
        return f"{e.value:.1f} (1 seed)"
    return f"{e.value:.1f} ± {t_quantile(0.975, e.dof) * e.se:.1f} ({n} seeds)"


def ladder_markdown(reference: list[dict], live: list[dict], *, teacher_accuracy: float,
                    reference_label: str, live_label: str) -> str:
    """One row per (student, arm): mean test accuracy with its 95% interval (Student's t over
    seeds), in the reference run and in this run (a dash where this run did not train it)."""
    ref, here = cell_accuracies(reference), cell_accuracies(live)
    rows = []
    for cell in dict.fromkeys([*ref, *here]):
        cols = []
        for table in (ref, here):
            acc = table.get(cell)
            cols.append(_pm(mean_and_se([100 * a for a in acc.values()]), len(acc))
                        if acc else "–")
        rows.append(f"| {NAMES[cell[0]]} | {ARM_NAMES[cell[1]]} | {cols[0]} | {cols[1]} |")
    return (f"| student | trained on | {reference_label} | {live_label} |\n|---|---|---|---|\n"
            + "\n".join(rows) + f"\n| **teacher** (4 layers, width 128) | | "
            f"{100 * teacher_accuracy:.1f} | {100 * teacher_accuracy:.1f} |")


def effect_lines(runs: list[dict], *, confidence: float = 0.95) -> list[tuple[str, Estimate, str]]:
    """Each ``EFFECTS`` entry that ``runs`` can measure: (what, estimate, call), where call is
    "a gain", "a loss" or "within the seed noise" (the 95% interval, Student's t with seeds - 1
    degrees of freedom, excludes 0 or not; one seed is always within the noise)."""
    acc, out = cell_accuracies(runs), []
    for what, a, b in EFFECTS:
        seeds = sorted(set(acc.get(a, {})) & set(acc.get(b, {})))
        if seeds:
            e = mean_and_se([100 * (acc[a][s] - acc[b][s]) for s in seeds])
            out.append((what, e, call(e, confidence=confidence)))
    return out


def call(e: Estimate, *, confidence: float = 0.95) -> str:
    """``verdicts.difference_call`` in the words of seeds: "a gain", "a loss" or "within the
    seed noise" (always, for one seed: its standard error is infinite)."""
    c = difference_call(e, confidence=confidence)
    return "within the seed noise" if c == "within the noise" else c


def sizes_markdown(models: Mapping[str, torch.nn.Module], seconds: dict[str, list[float]],
                   baseline: str = "teacher") -> str:
    """Layers, width, parameters, fp32 weight bytes, time per timed batch and speed-up over
    ``baseline`` (``verdicts.speedup``, 95% interval with Student's t)."""
    from course_lib.core.model import count_parameters
    from course_lib.measure.memory import state_dict_bytes

    rows = []
    for name, m in models.items():
        c, secs = m.cfg, seconds[name]
        s = speedup(seconds[baseline], seconds[name])
        ratio = "1×" if name == baseline else f"{s:.2f×}"
        rows.append(f"| {NAMES.get(name, name)} | {c.n_layers} | {c.d_model} | "
                    f"{count_parameters(m):,} | {state_dict_bytes(m) / 2**20:.2f} MiB | "
                    f"{1e3 * sorted(secs)[len(secs) // 2]:.0f} ms | {ratio} |")
    return ("| model | layers | width | parameters | fp32 weights | time per pass (median) | "
            "speed-up over the teacher |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def accuracy_change(correct_by_seed: Mapping[int, torch.Tensor],
                    teacher_correct: torch.Tensor) -> tuple[Estimate, str]:
    """A student's test accuracy minus the teacher's, in points, and what the noise is: over
    the test reviews, paired (one seed: the noise of this test set, not of training), or over
    seeds (several: training noise included)."""
    if not correct_by_seed:
        raise ValueError("correct_by_seed must hold at least one seed")
    if len(correct_by_seed) == 1:
        (c,) = correct_by_seed.values()
        return (paired_accuracy_change(teacher_correct.tolist(), c.tolist()),
                f"paired over {len(c):,} test reviews, one seed (training noise not included)")
    t = teacher_correct.float().mean()
    e = mean_and_se([float(100 * (c.float().mean() - t)) for c in correct_by_seed.values()])
    return e, f"over {len(correct_by_seed)} seeds"


def ladder_figure(reference: list[dict], live: list[dict], *, teacher_accuracy: float,
                  reference_label: str, live_label: str):
    """Every cell's mean test accuracy with its 95% interval (reference run), this run's
    students as diamonds, the teacher as a line."""
    from course_lib.ui.plots import new_figure

    ref, here = cell_accuracies(reference), cell_accuracies(live)
    cells = list(dict.fromkeys([*ref, *here]))
    fig, ax = new_figure(width=9, height=4.2)
    for y, cell in enumerate(cells):
        if cell in ref:
            e = mean_and_se([100 * a for a in ref[cell].values()])
            err = 0 if math.isinf(e.se) else t_quantile(0.975, e.dof) * e.se
            ax.errorbar([e.value], [y], xerr=[err], fmt="o", color="#4C72B0", capsize=4,
                        label=reference_label if y == 0 else None)
            ax.scatter([100 * a for a in ref[cell].values()], [y] * len(ref[cell]), s=10,
                       color="#4C72B0", alpha=0.35)
        if cell in here:
            ax.scatter([100 * a for a in here[cell].values()], [y - 0.25] * len(here[cell]),
                       marker="D", color="#DD8452", zorder=3,
                       label=live_label if cell == next(c for c in cells if c in here) else None)
    ax.axvline(100 * teacher_accuracy, color="k", ls=":", label="teacher")
    ax.set_yticks(range(len(cells)), [f"{NAMES[s]}\n{ARM_NAMES[a]}" for s, a in cells], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("test accuracy (%)")
    ax.set_title("The student ladder: mean and 95% interval over seeds, dots per seed")
    ax.legend(frameon=False, fontsize=8, loc="lower left")
    return fig


def sweep_panel(ax, sweep: Mapping[tuple[float, float], Estimate], scratch: Estimate, *,
                selected: tuple[float, float], teacher_accuracy: float) -> None:
    """Bars of a temperature / alpha sweep (mean, 95% interval over seeds), the scratch
    student's mean and interval as a band, the selected point outlined."""
    temps = sorted({t for t, _ in sweep})
    alphas = sorted({a for _, a in sweep})
    width = 0.8 / len(alphas)
    for k, a in enumerate(alphas):
        xs = [i + (k - (len(alphas) - 1) / 2) * width for i in range(len(temps))]
        est = [sweep[t, a] for t in temps]
        err = [t_quantile(0.975, e.dof) * e.se for e in est]
        bars = ax.bar(xs, [e.value for e in est], width=width, yerr=err, capsize=3,
                      label=f"alpha = {a:g}", alpha=0.85)
        for t, b in zip(temps, bars):
            if (t, a) == selected:
                b.set_edgecolor("k")
                b.set_linewidth(2.5)
    half = t_quantile(0.975, scratch.dof) * scratch.se
    ax.axhspan(scratch.value - half, scratch.value + half, color="#C44E52", alpha=0.15)
    ax.axhline(scratch.value, color="#C44E52", ls="--", label="scratch (band: 95% interval)")
    ax.axhline(100 * teacher_accuracy, color="k", ls=":", label="teacher")
    lo = min(min(e.value for e in sweep.values()), scratch.value - half)
    ax.set_ylim(max(0, lo - 8), min(100, 100 * teacher_accuracy + 5))
    ax.set_xticks(range(len(temps)), [f"{t:g}" for t in temps])
    ax.set_xlabel("temperature T")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(frameon=False, fontsize=7, loc="upper left", ncol=2)


def effects_markdown(runs: list[dict]) -> str:
    """``effect_lines`` as a Markdown list (95% intervals), or "" if ``runs`` has no pair."""
    return "\n".join(f"- **{what}**: {e.value:+.1f} ± {t_quantile(0.975, e.dof) * e.se:.1f} "
                     f"points, {call};" if not math.isinf(e.se) else
                     f"- **{what}**: {e.value:+.1f} points (one seed: {call});"
                     for what, e, call in effect_lines(runs))
