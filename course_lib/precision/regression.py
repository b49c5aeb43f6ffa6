"""Lesson 04's regression check: does 16-bit training hurt a task that needs precise values?

The same small model learns the star rating (a regression head, MSE loss) under each recipe,
with the same steps, initialisation and batch order per seed, and is scored by its test MAE:

- ``"fp32"``: the reference;
- ``"bf16"``, ``"fp16"``: autocast (FP16 with a GradScaler): matmuls in 16 bits, the loss, the
  weights and their updates in FP32 (``amp.amp_train``);
- ``"fp16-pure"``: the whole model in FP16 (``model.half()``): weights, gradients and AdamW's
  moments in FP16, no master weights and no scaler (``torch.amp.GradScaler`` refuses FP16
  gradients). This is the recipe the worry about precision is really about.

A run whose loss becomes NaN or inf is kept, not dropped: its MAE counts as infinite, so a
recipe that diverges on any seed is reported as infinitely worse than FP32 (``ratio_to_fp32``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from course_lib.precision.amp import amp_train, evaluate_amp
from course_lib.core.batching import make_loader
from course_lib.core.model import build_model
from course_lib.measure.verdicts import Estimate, mean_and_se

RECIPES = ("fp32", "bf16", "fp16", "fp16-pure")


@dataclass(frozen=True)
class RegressionRun:
    recipe: str
    seed: int
    mae: float              # test MAE in stars; inf when training diverged
    skipped_steps: int      # steps the GradScaler skipped (FP16 autocast only)
    diverged_at: int | None  # first step whose loss was not finite, or None


def train_one(corpus, recipe: str, *, seed: int, steps: int, length: int, lr: float = 2e-3,
              batch_size: int = 16, device: torch.device | str = "cpu") -> RegressionRun:
    """Train the student preset on ``corpus``'s ratings with ``recipe`` (one of ``RECIPES``)
    and score it on the test split."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    model = build_model(len(corpus.vocab), preset="student", n_outputs=1, seed=seed)
    pure = recipe == "fp16-pure"
    if pure:
        model.half()
    autocast = "fp32" if pure else recipe
    hist = amp_train(model, make_loader(corpus.train, batch_size=batch_size, seed=seed, max_length=length),
                     precision_name=autocast, device=device, steps=steps, lr=lr, task="regression",
                     seed=seed)
    bad = [i for i, v in enumerate(hist.loss) if not math.isfinite(v)]
    test = make_loader(corpus.test, batch_size=64, shuffle=False, max_length=length)
    mae = evaluate_amp(model, test, device=device, task="regression", precision_name=autocast)["mae"]
    return RegressionRun(recipe, seed, mae if math.isfinite(mae) and not bad else math.inf,
                         hist.skipped_steps, bad[0] if bad else None)


def run(corpus, *, recipes: Iterable[str] = RECIPES, seeds: Iterable[int] = (0, 1, 2),
        steps: int, length: int, device: torch.device | str = "cpu",
        progress: Callable[[Iterable], Iterable] = iter) -> dict[str, list[RegressionRun]]:
    """``train_one`` for every seed and recipe (seeds outermost, so an interrupted run still
    holds every recipe for the seeds done). ``progress`` wraps the seed loop (e.g. tqdm)."""
    recipes, seeds = list(recipes), list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    out: dict[str, list[RegressionRun]] = {r: [] for r in recipes}
    for seed in progress(seeds):
        for r in recipes:
            out[r].append(train_one(corpus, r, seed=seed, steps=steps, length=length, device=device))
    return out


def predict_mean_mae(corpus) -> tuple[float, float]:
    """(the training ratings' mean, the test MAE of always predicting it): the floor a model
    that learned something must clearly beat."""
    mean = sum(r.rating for r in corpus.train.reviews) / len(corpus.train)
    return mean, sum(abs(r.rating - mean) for r in corpus.test.reviews) / len(corpus.test)


def ratio_to_fp32(runs: dict[str, list[RegressionRun]], recipe: str) -> Estimate:
    """Mean over seeds of (``recipe``'s MAE ÷ FP32's MAE on the same seed), its standard error
    and degrees of freedom. A diverged run makes the ratio infinite (standard error 0: no
    interval reaches back from infinity)."""
    ratios = [a.mae / b.mae for a, b in zip(runs[recipe], runs["fp32"], strict=True)]
    if any(math.isinf(x) for x in ratios):
        return Estimate(math.inf, 0.0, len(ratios) - 1 or math.inf)
    return mean_and_se(ratios)


def mean_mae(runs: list[RegressionRun]) -> float:
    return statistics.mean(r.mae for r in runs)
