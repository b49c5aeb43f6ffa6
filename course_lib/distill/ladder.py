"""Lesson 06's full experiment, the *reference run*: every student and arm, several seeds, the
full step budget. On a 2-core CPU it takes over an hour (a 2-layer student at width 128 trains
at about 4 steps a second there), so the lesson trains a few arms live at learner defaults and
shows this run's table beside them, labelled with the hardware it ran on:

    python -m course_lib.tools.student_ladder --sweep         # writes REFERENCE (on a GPU if any)
    python -m course_lib.tools.student_ladder --seeds 0 --steps 50 --out /tmp/ladder.json

Each record: student, arm, seed, test and validation accuracy, seconds. ``summary`` gives the
mean over seeds with its standard error (``verdicts.mean_and_se``), ``effect`` a difference
between two cells paired by seed (they share the initialisation and batch order).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from course_lib.measure.verdicts import Estimate, mean_and_se

# Package data (a pip install of the course has it too): the committed reference run.
REFERENCE = Path(__file__).resolve().parent / "student_ladder.json"
# Which arms each student gets: the capacity limit (small), the effects of soft targets, extra
# data, the loss and the hidden states (half), and DistilBERT's initialisation (half_from_teacher).
GRID = {"small": ("scratch", "distilled", "hard_labels"),
        "half": ("scratch", "distilled", "hard_labels", "distilled_labelled_only", "mse", "hidden"),
        "half_from_teacher": ("scratch", "distilled")}
# The temperature / alpha grid (``--sweep``): the KL arm of the random-initialised half student.
SWEEP = {"student": "half", "temperature": (1.0, 2.0, 4.0), "alpha": (0.5, 1.0)}


def run_grid(corpus, teacher, cached_logits: torch.Tensor, *, grid: dict = GRID,
             seeds=(0, 1, 2), recipe=None, device: torch.device | str = "cpu",
             progress: bool = True, models: dict | None = None) -> list[dict]:
    """Train every (student, arm) of ``grid`` once per seed; one record per run. ``models``, if
    given, receives each trained student under ``(student, arm, seed)``."""
    from tqdm.auto import tqdm

    from course_lib.core.batching import make_loader
    from course_lib.distill.losses import DistillSet
    from course_lib.distill.students import StudentRecipe, train_student
    from course_lib.core.train import evaluate

    recipe = recipe or StudentRecipe()
    dset = DistillSet(corpus.train, corpus.transfer)
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    val = make_loader(corpus.val, batch_size=64, shuffle=False)
    cells = [(s, a, seed) for seed in seeds for s, arms in grid.items() for a in arms]
    runs = []
    for student, arm, seed in tqdm(cells, desc="student runs", disable=not progress, leave=False):
        t0 = time.perf_counter()
        m = train_student(arm, student=student, corpus=corpus, distill_set=dset,
                          cached_logits=cached_logits, seed=seed, recipe=recipe,
                          teacher=teacher, device=device)
        seconds = time.perf_counter() - t0
        if models is not None:
            models[student, arm, seed] = m
        runs.append({"student": student, "arm": arm, "seed": seed, "seconds": seconds,
                     "temperature": recipe.temperature, "alpha": recipe.alpha,
                     "test_accuracy": evaluate(m, test, device=device)["accuracy"],
                     "val_accuracy": evaluate(m, val, device=device)["accuracy"]})
    return runs


def run_sweep(corpus, teacher, cached_logits: torch.Tensor, *, seeds=(0, 1, 2), recipe=None,
              device: torch.device | str = "cpu", progress: bool = True) -> list[dict]:
    """``SWEEP``'s grid: the KL arm at every (temperature, alpha), once per seed."""
    from dataclasses import replace

    from course_lib.distill.students import StudentRecipe

    recipe, runs = recipe or StudentRecipe(), []
    for t in SWEEP["temperature"]:
        for a in SWEEP["alpha"]:
            runs += run_grid(corpus, teacher, cached_logits, grid={SWEEP["student"]: ("distilled",)},
                             seeds=seeds, recipe=replace(recipe, temperature=t, alpha=a),
                             device=device, progress=progress)
    return runs


def sweep_summary(sweep: list[dict]) -> dict[tuple[float, float], Estimate]:
    """Mean test accuracy (points) over seeds per (temperature, alpha) of a sweep."""
    keys = dict.fromkeys((r["temperature"], r["alpha"]) for r in sweep)
    return {k: mean_and_se([100 * r["test_accuracy"] for r in sweep
                            if (r["temperature"], r["alpha"]) == k]) for k in keys}


def sweep_effects(doc: dict, against: tuple[str, str] = ("half", "scratch")
                  ) -> dict[tuple[float, float], Estimate]:
    """Each sweep point minus the ``against`` cell of the grid, in points, paired by seed."""
    base = accuracies(doc["runs"], *against)
    out = {}
    for k in dict.fromkeys((r["temperature"], r["alpha"]) for r in doc["sweep"]):
        pts = {r["seed"]: r["test_accuracy"] for r in doc["sweep"]
               if (r["temperature"], r["alpha"]) == k and r["seed"] in base}
        if pts:
            out[k] = mean_and_se([100 * (a - base[s]) for s, a in pts.items()])
    return out


def save(path: Path | str, runs: list[dict], *, recipe, device: torch.device | str,
         teacher_accuracy: float, sweep: list[dict] | None = None) -> Path:
    from course_lib.core.device import report

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"recipe": asdict(recipe), "machine": dict(report(device)),
           "teacher_test_accuracy": teacher_accuracy, "precision": "fp32", "runs": runs, "sweep": sweep or []}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path: Path | str = REFERENCE) -> dict:
    """A saved run (``save``'s document); FileNotFoundError names the command that makes it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: `python -m course_lib.tools.student_ladder --out "
                                f"{path}` writes it")
    return json.loads(path.read_text())


def accuracies(runs: list[dict], student: str, arm: str) -> dict[int, float]:
    """{seed: test accuracy} of one cell."""
    return {r["seed"]: r["test_accuracy"] for r in runs
            if r["student"] == student and r["arm"] == arm}


def summary(runs: list[dict]) -> dict[tuple[str, str], Estimate]:
    """Mean test accuracy (points) over seeds, with its standard error, per (student, arm)."""
    cells = dict.fromkeys((r["student"], r["arm"]) for r in runs)
    return {c: mean_and_se([100 * a for a in accuracies(runs, *c).values()]) for c in cells}


def effect(runs: list[dict], a: tuple[str, str], b: tuple[str, str]) -> Estimate:
    """Cell ``a`` minus cell ``b`` in points, paired by seed (the seeds both have)."""
    x, y = accuracies(runs, *a), accuracies(runs, *b)
    seeds = sorted(set(x) & set(y))
    if not seeds:
        raise ValueError(f"cells {a} and {b} share no seed")
    return mean_and_se([100 * (x[s] - y[s]) for s in seeds])
