"""Lesson 06's full experiment, the *reference run*: every student and arm, several seeds, the
full step budget. On a 2-core CPU it takes over an hour (a 2-layer student at width 128 trains
at about 4 steps a second there), so the lesson trains a few arms live at learner defaults and
shows this run's table beside them, labelled with the hardware it ran on:

    python -m course_lib.student_ladder --sweep         # writes REFERENCE (on a GPU if any)
    python -m course_lib.student_ladder --seeds 0 --steps 50 --out /tmp/ladder.json

Each record: student, arm, seed, test and validation accuracy, seconds. ``summary`` gives the
mean over seeds with its standard error (``verdicts.mean_and_se``), ``effect`` a difference
between two cells paired by seed (they share the initialisation and batch order).
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .verdicts import Estimate, mean_and_se

# Package data (a pip install of the course has it too): the committed reference run.
REFERENCE = Path(__file__).resolve().parent / "reference_runs" / "student_ladder.json"
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

    from .batching import make_loader
    from .distill import DistillSet
    from .student_runs import StudentRecipe, train_student
    from .train import evaluate

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

    from .student_runs import StudentRecipe

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
    from .device import report

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
        raise FileNotFoundError(f"{path} not found: `python -m course_lib.student_ladder --out "
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


def main(argv: list[str] | None = None) -> None:
    from .checkpoints import load_baseline
    from .data import load_corpus
    from .device import pick_device
    from .distill import DistillSet, teacher_logits
    from .student_runs import StudentRecipe
    from .batching import make_loader
    from .train import evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=StudentRecipe().steps)
    ap.add_argument("--out", default=str(REFERENCE))
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the best available)")
    ap.add_argument("--sweep", action="store_true", help="also the temperature / alpha grid")
    ap.add_argument("--sweep-only", action="store_true", help="the temperature / alpha grid only")
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    recipe = StudentRecipe(steps=args.steps)
    corpus = load_corpus()
    teacher, _ = load_baseline(corpus)
    teacher = teacher.to(device).eval()
    cached = teacher_logits(teacher, DistillSet(corpus.train, corpus.transfer), device=device)
    t_acc = evaluate(teacher, make_loader(corpus.test, batch_size=64, shuffle=False),
                     device=device)["accuracy"]
    runs = ([] if args.sweep_only else
            run_grid(corpus, teacher, cached, seeds=args.seeds, recipe=recipe, device=device))
    sweep = (run_sweep(corpus, teacher, cached, seeds=args.seeds, recipe=recipe, device=device)
             if args.sweep or args.sweep_only else [])
    out = save(args.out, runs, recipe=recipe, device=device, teacher_accuracy=t_acc, sweep=sweep)
    for (s, a), e in summary(runs).items():
        print(f"{s:18s} {a:24s} {e.value:5.1f} ± {e.se:.1f}")
    for (t, a), e in sweep_summary(sweep).items():
        print(f"sweep T = {t:g}, alpha = {a:g}: {e.value:5.1f} ± {e.se:.1f}")
    print(f"teacher {100 * t_acc:.1f}; written to {out}")


if __name__ == "__main__":
    main()
