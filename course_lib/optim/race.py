"""The optimizer race of lesson 12: every optimizer on one budget, its learning rate chosen on
one split and its result scored on another.

* ``run_budget`` trains a fresh model per (optimizer spec, seed) with the same initial weights,
  batch order and warm-up + cosine schedule, and records a learning curve on a *selection*
  split and, when given, on a *scoring* split (so the learning rate is never picked on the
  reviews that judge it), with the training seconds at every point (evaluation excluded), so
  convergence can be read per step and per second of wall-clock.
* ``race`` adds the grid search: each optimizer at a few learning rates; where the best one sits
  on the grid's edge, the grid is extended past it (a best value on the edge says only that the
  optimum may lie further out).
* ``accuracy_over_time`` is convergence speed in wall-clock: the time-average of the accuracy
  curve up to a common horizon.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import nn

from course_lib.core.batching import make_loader
from course_lib.core.model import build_model
from course_lib.core.optimizers import make_optimizer
from course_lib.core.train import History, TrainConfig, train
from course_lib.core.evaluate import evaluate

__all__ = ["RunResult", "RaceSetup", "run_budget", "summarize", "lr_grid", "best_per_optimizer",
           "grid_edges", "extend_grid", "race", "accuracy_over_time"]


@dataclass
class RunResult:
    optimizer: str
    seed: int
    history: History
    curve_steps: list[int] = field(default_factory=list)
    curve_accuracy: list[float] = field(default_factory=list)   # on the selection split
    final_accuracy: float = float("nan")
    seconds: float = 0.0                                        # the whole run, evaluation included
    score_accuracy: list[float] = field(default_factory=list)   # on the scoring split, same steps
    curve_seconds: list[float] = field(default_factory=list)    # training seconds at each point

    @property
    def curve_mean(self) -> float:
        """Mean validation accuracy over the evaluated steps: the area under the learning
        curve per step. Higher means it got good sooner (convergence speed in one number)."""
        return (sum(self.curve_accuracy) / len(self.curve_accuracy) if self.curve_accuracy
                else float("nan"))

    @property
    def score_mean(self) -> float:
        """``curve_mean`` on the scoring split (NaN without one)."""
        return (sum(self.score_accuracy) / len(self.score_accuracy) if self.score_accuracy
                else float("nan"))

    @property
    def train_seconds(self) -> float:
        """Seconds spent training (evaluation excluded)."""
        return self.curve_seconds[-1] if self.curve_seconds else float("nan")

    def steps_to(self, target: float) -> int | None:
        """First evaluated step whose validation accuracy reached ``target`` (None: never)."""
        for s, a in zip(self.curve_steps, self.curve_accuracy):
            if a >= target:
                return s
        return None


@dataclass(frozen=True)
class RaceSetup:
    """What every run of a race shares: the model preset and the training data. ``model(seed)``
    and ``loader(seed)`` are the factories ``run_budget`` calls."""
    vocab_size: int
    train_data: object               # a ReviewDataset
    preset: str = "student"
    max_len: int = 128               # positions of the model, and reviews truncated to it
    batch_size: int = 32

    def model(self, seed: int) -> nn.Module:
        return build_model(self.vocab_size, preset=self.preset, max_len=self.max_len, seed=seed)

    def loader(self, seed: int):
        return make_loader(self.train_data, batch_size=self.batch_size, seed=seed,
                           max_length=self.max_len)


def run_budget(build_model: Callable[[int], nn.Module], make_loader: Callable[[int], object],
               val_loader, *, specs: dict[str, dict], seeds: Sequence[int] = (0, 1),
               epochs: int = 1, max_steps: int | None = None, eval_every: int = 10,
               device="cpu", progress: bool = False, score_loader=None, grad_clip: float = 0.0,
               on_run: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Train a fresh model per (optimizer, seed) with the same data, schedule and step budget.

    ``specs`` maps an optimizer name to ``make_optimizer`` keywords (``lr``, ``weight_decay``,
    ...); ``build_model(seed)`` and ``make_loader(seed)`` take the seed, so every optimizer
    sees the same initial weights and batch order for a given seed. The schedule is the
    course's warm-up + cosine (``course_lib.core.train``), applied to each optimizer's own ``lr``.
    Accuracy on ``val_loader`` (and ``score_loader``, if given) is measured every
    ``eval_every`` steps and at the end; the clock stops while it is measured. ``progress``
    shows one bar over the runs (a bar per run would leave dozens behind in the notebook).
    ``grad_clip`` (max gradient norm, 0: off) is off by default: a clip at 1.0 caps plain SGD's
    step near its learning rate while Adam's normalised step hardly notices it, so a clip
    shared by every arm would decide the race for Adam.
    """
    if not specs:
        raise ValueError("specs must name at least one optimizer")
    if eval_every < 1:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}")
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    from course_lib.core.progress import tqdm

    results = []
    bar = tqdm(total=len(seeds) * len(specs), desc="training runs", disable=not progress)
    for seed in seeds:
        for name, kw in specs.items():
            kw = dict(kw)
            kind = kw.pop("optimizer", name)
            model = build_model(seed)
            opt = make_optimizer(kind, model.parameters(), **kw)
            res = RunResult(name, seed, History())
            clock = {"eval": 0.0}

            def measure(m: nn.Module, step: int, res=res, clock=clock) -> None:
                t = time.perf_counter()
                res.curve_steps.append(step)
                res.curve_seconds.append(t - clock["t0"] - clock["eval"])
                res.curve_accuracy.append(evaluate(m, val_loader, device=device)["accuracy"])
                if score_loader is not None:
                    res.score_accuracy.append(evaluate(m, score_loader, device=device)["accuracy"])
                m.train()
                clock["eval"] += time.perf_counter() - t

            def callback(step: int, loss: float, m: nn.Module, measure=measure) -> None:
                if (step + 1) % eval_every == 0:
                    measure(m, step + 1)

            clock["t0"] = time.perf_counter()
            res.history = train(model, make_loader(seed), device=device, optimizer=opt,
                                cfg=TrainConfig(epochs=epochs, lr=min(kw["lr"], 0.5), seed=seed,
                                                grad_clip=grad_clip),
                                callback=callback, max_steps=max_steps, progress=False)
            n_steps = len(res.history.step_loss)
            if not res.curve_steps or res.curve_steps[-1] != n_steps:
                measure(model, n_steps)
            res.seconds = time.perf_counter() - clock["t0"]
            res.final_accuracy = res.curve_accuracy[-1]
            results.append(res)
            bar.update(1)
            if on_run is not None:
                on_run(res)
    bar.close()
    return results


def summarize(results: Sequence[RunResult], *, target: float | None = None) -> dict[str, dict]:
    """Per optimizer: mean and spread (max - min) of final accuracy over seeds, the mean curve
    on both splits, seconds per training step, and the mean number of steps to reach ``target``
    accuracy (runs that never reach it count as None)."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.optimizer for r in results):
        runs = [r for r in results if r.optimizer == name]
        accs = [r.final_accuracy for r in runs]
        row = {"mean_accuracy": sum(accs) / len(accs), "spread": max(accs) - min(accs),
               "mean_curve_accuracy": sum(r.curve_mean for r in runs) / len(runs),
               "mean_score_accuracy": sum(r.score_mean for r in runs) / len(runs),
               "seconds_per_step": sum(r.train_seconds / max(1, len(r.history.step_loss))
                                       for r in runs) / len(runs),
               "seeds": len(runs), "seconds": sum(r.seconds for r in runs) / len(runs)}
        if target is not None:
            steps = [r.steps_to(target) for r in runs]
            row["reached"] = sum(s is not None for s in steps)
            hit = [s for s in steps if s is not None]
            row["mean_steps_to_target"] = sum(hit) / len(hit) if hit else None
        out[name] = row
    return out


def lr_grid(grid: dict[str, Sequence[float]], **common) -> dict[str, dict]:
    """``run_budget`` specs for every (optimizer, learning rate) of ``grid``, named
    ``"<optimizer>@<lr>"``; ``common[optimizer]`` adds fixed keywords (e.g. weight decay)."""
    if not grid or any(not lrs for lrs in grid.values()):
        raise ValueError("grid must map each optimizer to at least one learning rate")
    return {f"{name}@{lr:g}": dict(optimizer=name, lr=lr, **common.get(name, {}))
            for name, lrs in grid.items() for lr in lrs}


def best_per_optimizer(summary: dict[str, dict], *, key: str = "mean_curve_accuracy"
                       ) -> dict[str, str]:
    """For specs named ``"<optimizer>@<lr>"``, the spec with the highest ``key`` per optimizer."""
    best: dict[str, str] = {}
    for spec, row in summary.items():
        name = spec.split("@")[0]
        if name not in best or row[key] > summary[best[name]][key]:
            best[name] = spec
    return best


def grid_edges(best: dict[str, str], grid: dict[str, Sequence[float]]) -> dict[str, str]:
    """Optimizers whose best learning rate is the smallest ("low") or largest ("high") of a
    grid of at least two values (spec names carry the rate to 6 digits: compared to that)."""
    out = {}
    for name, spec in best.items():
        lrs = sorted(grid[name])
        lr = float(spec.split("@")[1])
        if len(lrs) >= 2 and math.isclose(lr, lrs[0], rel_tol=1e-5):
            out[name] = "low"
        elif len(lrs) >= 2 and math.isclose(lr, lrs[-1], rel_tol=1e-5):
            out[name] = "high"
    return out


def extend_grid(grid: dict[str, Sequence[float]], edges: dict[str, str]) -> dict[str, float]:
    """One new learning rate per edge: past the edge by the grid's own spacing (the ratio of its
    two outermost values on that side)."""
    new = {}
    for name, side in edges.items():
        lrs = sorted(grid[name])
        new[name] = lrs[0] ** 2 / lrs[1] if side == "low" else lrs[-1] ** 2 / lrs[-2]
    return new


def race(setup_model: Callable[[int], nn.Module], setup_loader: Callable[[int], object],
         val_loader, *,
         grid: dict[str, Sequence[float]], common: dict[str, dict] | None = None,
         extend_rounds: int = 1, **run_kw
         ) -> tuple[list[RunResult], dict[str, list[float]], dict[str, str]]:
    """``run_budget`` over ``lr_grid(grid)``, then up to ``extend_rounds`` rounds that add one
    learning rate past every grid edge where the best one sits (chosen on ``val_loader``).
    Returns the runs, the final grid and the edges still holding the best value."""
    common = common or {}
    grid = {k: sorted(v) for k, v in grid.items()}
    runs = run_budget(setup_model, setup_loader, val_loader, specs=lr_grid(grid, **common),
                      **run_kw)
    edges = grid_edges(best_per_optimizer(summarize(runs)), grid)
    for _ in range(extend_rounds):
        if not edges:
            break
        extra = extend_grid(grid, edges)
        for name, lr in extra.items():
            grid[name] = sorted(grid[name] + [lr])
        runs += run_budget(setup_model, setup_loader, val_loader,
                           specs=lr_grid({k: [v] for k, v in extra.items()}, **common), **run_kw)
        edges = grid_edges(best_per_optimizer(summarize(runs)), grid)
    return runs, grid, edges


def accuracy_over_time(run: RunResult, horizon: float, *, chance: float = 0.5,
                       split: str = "score") -> float:
    """Time-average of the accuracy curve over the first ``horizon`` training seconds, the curve
    drawn linearly from ``(0, chance)`` through each evaluation: convergence speed in
    wall-clock. ``split`` picks the scoring or the selection ("val") curve."""
    acc = run.score_accuracy if split == "score" else run.curve_accuracy
    if not acc or len(acc) != len(run.curve_seconds):
        raise ValueError(f"run {run.optimizer} seed {run.seed} has no {split} curve with times")
    if not 0 < horizon <= run.curve_seconds[-1] + 1e-12:
        raise ValueError(f"horizon must be in (0, {run.curve_seconds[-1]:.3g}] s, got {horizon}")
    ts, ys = [0.0] + list(run.curve_seconds), [chance] + list(acc)
    area = 0.0
    for (t0, y0), (t1, y1) in zip(zip(ts, ys), zip(ts[1:], ys[1:])):
        if t0 >= horizon:
            break
        if t1 > horizon:   # cut the last segment at the horizon
            y1, t1 = y0 + (y1 - y0) * (horizon - t0) / (t1 - t0), horizon
        area += (t1 - t0) * (y0 + y1) / 2
    return area / horizon
