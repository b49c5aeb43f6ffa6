"""The optimizer race over the training budget: the evidence behind lesson 12's verdict.

"Adam converges faster" is a statement about how soon a run gets good, so it depends on how long
the run is: over a few dozen steps the optimizer with the largest useful first steps leads, over
a long budget every optimizer that can reach the optimum does. ``run`` trains the lesson's race
(``optim.race``: the student on the simplified corpus, reviews cut to 128 tokens, batch 32, the
course's warm-up + cosine schedule fitted to each budget) at every budget of ``BUDGETS`` steps,
every optimizer at every learning rate of ``GRID`` (wide enough that each optimizer's best rate
sits inside it), from several seeds, with no gradient clipping (``race.run_budget`` says why).

``from_evidence`` then picks, per budget, each optimizer's learning rate on the validation split
(mean accuracy over the run, averaged over seeds) and scores the best adaptive optimizer against
the best SGD variant on the test split, paired by seed: the claim's value at that budget.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from course_lib.core.batching import make_loader
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.measure.verdicts import Estimate, mean_and_se
from course_lib.optim.race import RaceSetup, lr_grid, run_budget

__all__ = ["BUDGETS", "GRID", "ADAPTIVE", "PLAIN", "race_corpus", "run", "from_evidence",
           "budget_figure"]

BUDGETS = (64, 256)   # training steps of batch 32 (2 and 8 epochs); the live lesson runs the first
GRID = {"sgd": [0.1, 0.3, 1.0], "sgd_momentum": [0.03, 0.1, 0.3],
        "adam": [1e-3, 3e-3, 1e-2], "adamw": [1e-3, 3e-3, 1e-2], "lamb": [1e-2, 3e-2, 1e-1]}
COMMON = {"adam": {"weight_decay": 0.0}, "adamw": {"weight_decay": 0.1},
          "lamb": {"weight_decay": 0.1}}   # Adam's coupled L2 would be another regulariser
ADAPTIVE, PLAIN = ("adam", "adamw", "lamb"), ("sgd", "sgd_momentum")
SIMPLE = dict(p_negate=0.0, p_opener=0.0, p_contrast=0.0)   # sentiment = sum of adjective values


def race_corpus(scale: float = 0.25):
    """The race's data: the corpus without negation, openers and "but" (lesson 12 says why)."""
    return load_corpus(CorpusConfig(**SIMPLE), scale=scale)


def _runs_of(seed: int, budgets: Sequence[int], grid: dict, scale: float, max_len: int,
             threads: int, log: Callable[[str], None] = print) -> tuple[list[dict], dict]:
    """Every (budget, optimizer, learning rate) of one seed: a worker of ``run``."""
    import torch

    torch.set_num_threads(threads)
    corpus = race_corpus(scale)
    setup = RaceSetup(len(corpus.vocab), corpus.train, preset="student", max_len=max_len,
                      batch_size=32)
    val = make_loader(corpus.val, batch_size=128, shuffle=False, max_length=max_len)
    test = make_loader(corpus.test, batch_size=128, shuffle=False, max_length=max_len)
    per_epoch = len(setup.loader(0))
    runs = []
    for budget in budgets:
        res = run_budget(setup.model, setup.loader, val, specs=lr_grid(grid, **COMMON),
                         seeds=(seed,), epochs=math.ceil(budget / per_epoch), max_steps=budget,
                         eval_every=max(8, budget // 8), score_loader=test,
                         on_run=lambda r, b=budget: log(
                             f"budget {b}: {r.optimizer:20s} seed {r.seed}: val over the run "
                             f"{r.curve_mean:.1%}, final {r.final_accuracy:.1%}"))
        runs += [{"budget": budget, "spec": r.optimizer, "seed": r.seed,
                  "steps": r.curve_steps, "val": r.curve_accuracy, "test": r.score_accuracy,
                  "seconds": r.curve_seconds} for r in res]
    sizes = {"steps_per_epoch": per_epoch, "validation_reviews": len(corpus.val),
             "test_reviews": len(corpus.test)}
    return runs, sizes


def _printing(message: str) -> None:
    print(message, flush=True)


def run(*, seeds: Sequence[int] = (0, 1, 2, 3), budgets: Sequence[int] = BUDGETS,
        grid: dict[str, Sequence[float]] = GRID, scale: float = 0.25, max_len: int = 128,
        workers: int = 1, log: Callable[[str], None] = print) -> dict:
    """Every (budget, optimizer, learning rate, seed) of the race; returns the evidence body.
    ``workers`` > 1 trains the seeds in that many processes of one thread each (the runs are
    independent; their seconds then share the machine)."""
    if not seeds or not budgets:
        raise ValueError("seeds and budgets must each hold at least one value")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if workers == 1:
        parts = [_runs_of(s, budgets, grid, scale, max_len, threads=2, log=log) for s in seeds]
    else:
        from concurrent.futures import ProcessPoolExecutor
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            parts = list(pool.map(_runs_of, seeds,
                                  *([x] * len(seeds)
                                    for x in (budgets, grid, scale, max_len, 1, _printing))))
    runs = sorted((r for part, _ in parts for r in part), key=lambda r: (r["budget"], r["seed"]))
    return {"setup": {"preset": "student", "max_len": max_len, "batch_size": 32,
                      "corpus_scale": scale, "corpus": SIMPLE, **parts[0][1],
                      "grad_clip": 0.0, "schedule": "warm-up 5% + cosine to the budget",
                      "grid": {k: list(v) for k, v in grid.items()}, "common": COMMON},
            "budgets": list(budgets), "seeds": list(seeds), "runs": runs}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def from_evidence(body: dict) -> dict[int, dict]:
    """Per budget: each optimizer's learning rate chosen on validation (``best``), its mean test
    accuracy over the run (``score``, fraction), the best adaptive and best SGD variant, the
    claim's value: their paired test difference in points (``gap``, an ``Estimate`` over seeds),
    and the optimizers whose chosen rate sits on the grid's edge (``edges``: "low" or "high")."""
    out = {}
    for budget in body["budgets"]:
        runs = [r for r in body["runs"] if r["budget"] == budget]
        by_spec: dict[str, list[dict]] = {}
        for r in runs:
            by_spec.setdefault(r["spec"], []).append(r)
        val = {s: _mean([_mean(r["val"]) for r in rs]) for s, rs in by_spec.items()}
        best = {}
        for spec, v in val.items():
            name = spec.split("@")[0]
            if name not in best or v > val[best[name]]:
                best[name] = spec
        score = {name: _mean([_mean(r["test"]) for r in by_spec[spec]])
                 for name, spec in best.items()}
        adaptive = max((n for n in ADAPTIVE if n in best), key=lambda n: val[best[n]])
        plain = max((n for n in PLAIN if n in best), key=lambda n: val[best[n]])
        def seed_of(spec):
            return {r["seed"]: _mean(r["test"]) for r in by_spec[spec]}
        a, p = seed_of(best[adaptive]), seed_of(best[plain])
        gap: Estimate = mean_and_se([100 * (a[s] - p[s]) for s in sorted(a) if s in p])
        final = {name: _mean([r["test"][-1] for r in by_spec[spec]]) for name, spec in best.items()}
        edges = {}
        # a best rate on the grid's edge: the optimum may lie beyond
        for name, spec in best.items():
            lrs = sorted(float(s.split("@")[1]) for s in by_spec if s.split("@")[0] == name)
            lr = float(spec.split("@")[1])
            if len(lrs) > 1 and lr in (lrs[0], lrs[-1]):
                edges[name] = "low" if lr == lrs[0] else "high"
        out[budget] = {"best": best, "score": score, "final": final, "adaptive": adaptive,
                       "plain": plain, "gap": gap, "seeds": len(a), "edges": edges}
    return out


def budget_figure(by_budget: dict[int, dict], *, threshold: float = 2.0, learner: int,
                  live: tuple[int, Estimate] | None = None, device: str = "cpu"):
    """Left: the claim's value (best adaptive minus best SGD variant, points of mean test
    accuracy over the run) at each budget with its 95% interval, the claim's bar, and this run's
    replicate. Right: each optimizer's mean test accuracy over the run at its chosen rate."""
    from course_lib.ui.plots import new_figure

    fig, (ax, ax2) = new_figure(2, width=5.0, height=3.8)
    bs = sorted(by_budget)
    gaps = [by_budget[b]["gap"] for b in bs]
    ax.errorbar(bs, [g.value for g in gaps], yerr=[g.half_width for g in gaps], fmt="o-",
                capsize=4, label="evidence (mean over seeds)")
    if live is not None:   # one replicate: its few seeds' interval would dwarf the evidence's
        ax.plot([live[0]], [live[1].value], "s", mfc="none", color="#C44E52", ms=9,
                label="this run (its mean)")
    ax.axhline(threshold, ls="--", color="k", lw=1)
    ax.axhline(0, ls=":", color="#8C8C8C", lw=1)
    ax.annotate(f"claim: ≥ {threshold:g} points", (bs[0], threshold), textcoords="offset points",
                xytext=(4, 4), fontsize=8)
    ax.set_ylabel("best adaptive − best SGD (points)")
    ax.set_title(f"The claim over the budget (your budget: {learner})", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    names = list(by_budget[bs[0]]["score"])
    for name, style in zip(names, ("o-", "s--", "^-", "v:", "D-.")):   # Adam and AdamW can coincide
        ax2.plot(bs, [100 * by_budget[b]["score"][name] for b in bs], style, label=name)
    ax2.set_ylabel("mean test accuracy over the run (%)")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xticks(bs, [str(b) for b in bs])
        a.set_xlabel("training budget (steps of 32 reviews)")
    ax2.set_title(f"Each optimizer at its chosen rate ({device})", fontsize=10)
    ax2.legend(frameon=False, fontsize=8)
    return fig
