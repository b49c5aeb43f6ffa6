"""Lesson 06's measurements and tables around the students: their speed against the teacher,
and the ``distillation_transfer`` evidence (``distill.transfer``) as a figure and a table, with
this run's students beside it. The training itself is ``distill.students``.
"""
from __future__ import annotations

import statistics

import time
from collections.abc import Mapping

import torch

from course_lib.measure.bench import synchronize
from course_lib.core.batching import make_loader
from course_lib.measure.verdicts import CONFIDENCE, Estimate, difference_call, speedup

NAMES = {"small": "1 layer, width 64", "half": "2 layers, teacher's width",
         "half_from_teacher": "2 layers, from the teacher's layers 0 and 2"}
ARM_NAMES = {"scratch": "labels only (scratch)", "hard": "hard labels (teacher's top class)",
             "soft": "soft targets (KL + labels)"}
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



def call(e: Estimate, *, confidence: float = CONFIDENCE) -> str:
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
                    f"{1e3 * statistics.median(secs):.0f} ms | {ratio} |")
    return ("| model | layers | width | parameters | fp32 weights | time per pass (median) | "
            "speed-up over the teacher |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def transfer_figure(reduced: dict, *, live: Mapping[tuple[str, int], float] | None = None,
                    student: str = "small", source: str = ""):
    """Mean test accuracy with its 95% interval over seeds (``transfer.from_evidence``) per arm
    over the transfer set's size, the scratch student as a band, the teacher as a line, and
    this run's students (``live``: {(arm, n): accuracy}) as open diamonds."""
    from course_lib.ui.plots import new_figure

    sizes, mean = reduced["sizes"], reduced["mean"]
    fig, ax = new_figure(width=7.5, height=4.2)
    scratch = mean["scratch", 0]
    lo, hi = scratch.interval
    ax.axhspan(lo, hi, color="#C44E52", alpha=0.15)
    ax.axhline(scratch.value, color="#C44E52", ls="--", label=ARM_NAMES["scratch"])
    for k, (arm, colour) in enumerate((("hard", "#4C72B0"), ("soft", "#DD8452"))):
        xs = [i for i, n in enumerate(sizes) if (arm, n) in mean]
        est = [mean[arm, sizes[i]] for i in xs]
        ax.errorbar([x + 0.06 * (2 * k - 1) for x in xs], [e.value for e in est],
                    yerr=[e.half_width for e in est], marker="o", capsize=4, color=colour,
                    label=ARM_NAMES[arm])
    for (arm, n), acc in (live or {}).items():
        colour = {"scratch": "#C44E52", "hard": "#4C72B0", "soft": "#DD8452"}[arm]
        ax.plot(sizes.index(n) + 0.2, 100 * acc, "D", mfc="none", ms=9, color=colour,
                label="this run" if (arm, n) == next(iter(live)) else None)
    ax.axhline(100 * reduced["teacher"], color="k", ls=":", label="teacher")
    ax.set_xticks(range(len(sizes)), [f"{n:,}" for n in sizes])
    ax.set_xlim(-0.4, len(sizes) - 0.6)
    ax.set_xlabel("transfer set: unlabelled reviews the teacher labels "
                  "(besides the 4,000 labelled)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{NAMES[student]} student, 3,000 steps each: mean and 95% interval over "
                 f"seeds{source}", fontsize=9)
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    return fig


def transfer_markdown(reduced: dict) -> str:
    """One row per transfer-set size: each arm's mean accuracy, soft minus hard and hard minus
    scratch (paired by seed, 95% interval with Student's t) and what each says."""
    m, rows = reduced["mean"], []
    for n in reduced["sizes"]:
        def cell(arm):
            return f"{m[arm, n]:.2f}" if (arm, n) in m else "–"
        sh, hs = reduced["soft_vs_hard"].get(n), reduced["hard_vs_scratch"].get(n)
        rows.append(f"| {n:,} | {cell('hard') if n else cell('scratch')} | {cell('soft')} | "
                    + (f"{sh:+.2f} ({call(sh)}) | " if sh else "– | ")
                    + (f"{hs:+.2f} ({call(hs)}) |" if hs else "– |"))
    return ("| transfer set (reviews) | hard labels (%) | soft targets (%) | soft − hard (points) "
            "| hard − scratch (points) |\n|---|---|---|---|---|\n" + "\n".join(rows)
            + "\n\nWith no transfer reviews the hard labels are the 4,000 labels themselves "
            "(the scratch student), so that row's soft − hard is soft targets against scratch.")
