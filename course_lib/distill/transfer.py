"""Distillation where it can show: soft targets against hard labels, over the transfer set's size.

A student trained to convergence on the labels alone (``tools.evidence student_ceiling``) sets
what distillation has to beat. ``run`` trains the random-initialised students of
``STUDENTS`` for the same steps, data order and seeds with three kinds of targets (``ARMS``):

- ``scratch``: cross-entropy on the 4,000 labelled training reviews;
- ``hard``: the same, plus the first ``n`` transfer reviews labelled with the teacher's top class;
- ``soft``: the mixed loss of ``distill.losses`` (``alpha`` · T² · KL + (1 − ``alpha``) · CE where
  a review has a label) on the labelled reviews plus the same ``n`` transfer reviews;

for each transfer-set size ``n`` of ``TRANSFER_SIZES`` (at ``n`` = 0 ``hard`` is ``scratch`` and is
not trained again). Soft minus hard at the same ``n`` is what the teacher's probabilities add to
its answers; hard minus scratch is what the extra reviews add. ``FROM_TEACHER`` separates
DistilBERT's initialisation from distillation: the 2-layer student built from the teacher's
layers, on the labels alone and distilled. ``python -m course_lib.tools.evidence
distillation_transfer`` commits the result; the lesson's live run is one replicate of one cell.
"""
from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Callable

import torch

__all__ = ["ARMS", "TRANSFER_SIZES", "RECIPE", "FROM_TEACHER", "train_cell", "run", "from_evidence"]

ARMS = ("scratch", "hard", "soft")
TRANSFER_SIZES = (0, 2000, 12000)   # unlabelled reviews the teacher labels (12,000: all of them)
STUDENTS = ("small",)               # 1 layer, width 64: 88-89% on the labels alone at 3,000 steps
# Long enough to converge: student_ceiling's small students stop improving on validation by
# about 2,000 of these 3,000 steps. lr 1e-3 is student_ceiling's rate, so its scratch runs are
# the same recipe.
RECIPE = {"steps": 3000, "batch_size": 32, "lr": 1e-3, "temperature": 2.0, "alpha": 0.5}
# The teacher-initialised student: it starts near a solution, so fewer steps at a lower rate.
FROM_TEACHER = {"steps": 800, "lr": 5e-4, "arms": ("scratch", "soft"), "transfer": 12000}


def _student_arm(arm: str, n: int) -> str:
    """``students.train_student``'s arm for (``arm``, transfer size ``n``)."""
    if arm == "scratch":
        return "scratch"
    if arm == "hard":
        return "hard_labels"
    return "distilled" if n else "distilled_labelled_only"


def train_cell(corpus, cached_logits: torch.Tensor, *, student: str, arm: str, n: int, seed: int,
               recipe, teacher=None, device: torch.device | str = "cpu"):
    """One student of ``arm`` with the first ``n`` transfer reviews; ``cached_logits`` are the
    teacher's logits over ``DistillSet(corpus.train, corpus.transfer)`` (all of it)."""
    from course_lib.core.data import ReviewDataset
    from course_lib.distill.losses import DistillSet
    from course_lib.distill.students import train_student

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    if not 0 <= n <= len(corpus.transfer):
        raise ValueError(f"n must be in [0, {len(corpus.transfer)}] transfer reviews, got {n}")
    transfer = ReviewDataset(corpus.transfer.reviews[:n], corpus.vocab) if n else None
    dset = DistillSet(corpus.train, transfer)
    return train_student(_student_arm(arm, n), student=student, corpus=corpus, distill_set=dset,
                         cached_logits=cached_logits[:len(dset)], seed=seed, recipe=recipe,
                         teacher=teacher, device=device)


def run(corpus, teacher, cached_logits: torch.Tensor, *, seeds: tuple[int, ...] = (0, 1, 2, 3),
        sizes: tuple[int, ...] = TRANSFER_SIZES, students: tuple[str, ...] = STUDENTS,
        steps: int | None = None, log: Callable[[str], None] = print) -> dict:
    """Every student, arm, transfer size and seed (``ARMS``), then ``FROM_TEACHER``'s cells; test
    and validation accuracy of each. ``steps`` overrides ``RECIPE``'s (a quick check)."""
    from course_lib.core.batching import make_loader
    from course_lib.core.evaluate import evaluate
    from course_lib.distill.students import StudentRecipe

    base = StudentRecipe(**RECIPE, lr_from_teacher=FROM_TEACHER["lr"])
    if steps is not None:
        base = replace(base, steps=steps)
    init = replace(base, steps=steps or FROM_TEACHER["steps"])
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    val = make_loader(corpus.val, batch_size=64, shuffle=False)
    cells = [(s, a, n, base) for s in students for n in sizes for a in ARMS
             if (a == "scratch") == (n == 0) or a == "soft" and n == 0]
    # all of it (fewer in a small corpus)
    n_init = min(FROM_TEACHER["transfer"], len(corpus.transfer))
    cells += [("half_from_teacher", a, n_init if a == "soft" else 0, init)
              for a in FROM_TEACHER["arms"]]
    runs = []
    for seed in seeds:
        for student, arm, n, recipe in cells:
            t0 = time.perf_counter()
            m = train_cell(corpus, cached_logits, student=student, arm=arm, n=n, seed=seed,
                           recipe=recipe, teacher=teacher)
            runs.append({"student": student, "arm": arm, "transfer": n, "seed": seed,
                         "steps": recipe.steps, "seconds": time.perf_counter() - t0,
                         "test_accuracy": evaluate(m, test)["accuracy"],
                         "val_accuracy": evaluate(m, val)["accuracy"]})
            log(f"seed {seed} {student} {arm} n={n}: test {runs[-1]['test_accuracy']:.4f}, "
                f"{runs[-1]['seconds']:.0f} s")
    return {"recipe": {**asdict(base), "from_teacher": {**FROM_TEACHER, "steps": init.steps},
                       "sizes": list(sizes), "arms": list(ARMS), "students": list(students),
                       "training_reviews": len(corpus.train),
                       "teacher_test_accuracy": evaluate(teacher, test)["accuracy"]},
            "runs": runs}


def from_evidence(evidence: dict, student: str = "small") -> dict:
    """The ``distillation_transfer`` evidence reduced for one ``student``: ``"accuracy"``
    {(arm, n): {seed: test accuracy}}, ``"mean"`` {(arm, n): Estimate in %}, ``"soft_vs_hard"``
    {n: Estimate of soft minus hard (minus scratch where no hard cell was trained, as at n = 0),
    points, paired by seed}, ``"seeds_for_1pt"`` {n: seeds that difference would need for a 95%
    interval of ± 1 point (``verdicts.seeds_for_interval``)},
    ``"hard_vs_scratch"`` {n: Estimate}, ``"gap"`` {(arm, n): Estimate of the student minus the
    teacher, points}, and ``"teacher"`` (its test accuracy)."""
    from course_lib.measure.verdicts import mean_and_se, seeds_for_interval

    acc: dict = {}
    for r in evidence["runs"]:
        if r["student"] == student:
            acc.setdefault((r["arm"], r["transfer"]), {})[r["seed"]] = r["test_accuracy"]
    if not acc:
        raise ValueError(f"the evidence has no runs of student {student!r}")
    teacher = evidence["recipe"]["teacher_test_accuracy"]

    def differences(a, b):
        return [100 * (acc[a][s] - acc[b][s]) for s in sorted(set(acc[a]) & set(acc[b]))]

    def paired(a, b):
        return mean_and_se(differences(a, b))

    sizes = sorted({n for _, n in acc})
    hard = {n: ("hard", n) if ("hard", n) in acc else ("scratch", 0) for n in sizes}
    soft_pairs = {n: differences(("soft", n), hard[n]) for n in sizes if ("soft", n) in acc}
    return {"accuracy": acc, "teacher": teacher, "sizes": sizes,
            "mean": {k: mean_and_se([100 * a for a in v.values()]) for k, v in acc.items()},
            "gap": {k: mean_and_se([100 * (a - teacher) for a in v.values()])
                    for k, v in acc.items()},
            "soft_vs_hard": {n: mean_and_se(d) for n, d in soft_pairs.items()},
            "seeds_for_1pt": {n: seeds_for_interval(d, 1.0) for n, d in soft_pairs.items()
                              if len(d) > 1},
            "hard_vs_scratch": {n: paired(("hard", n), ("scratch", 0)) for n in sizes
                                if ("hard", n) in acc}}
