"""Is a DDP run steadier? What DDP changes is the global batch, so measure that (lesson 08).

DDP with N ranks of batch b computes exactly what one process computes with batch N·b (the
lesson's demonstration), so whatever stability "distributed training" brings is the stability
of a larger global batch. ``run`` trains the lesson's small encoder with the worker's own
recipe (``ddp.run_training``, AdamW) for the same steps at global batches b, 2b, 4b, 8b (what
1, 2, 4 and 8 ranks would train), from several seeds, and records how much the training loss
jumps from step to step and its accuracy at the end, on the full test split (2,000 reviews: a
review is 0.05 points; the worker's own 100 validation reviews, a point each, beside it).
``python -m course_lib.tools.evidence ddp_stability`` commits it; the lesson's own runs are one
replicate.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Callable

__all__ = ["RECIPE_ARGS", "MULTIPLES", "loss_noise", "train_point", "run", "from_evidence",
           "scored_reviews"]

# The worker's default optimizer (AdamW, lr 1e-3) on the easy task, which it learns in these
# steps at every batch (96-99% validation accuracy at batch 16 and 64 in a probe); b = 16.
RECIPE_ARGS = ["--task", "easy", "--batch-size", "16", "--d-model", "64", "--n-layers", "2",
               "--steps", "150"]
MULTIPLES = (1, 2, 4, 8)   # global batch / one device's batch: ranks, or accumulation steps


def loss_noise(losses: list[float], *, tail: float = 0.5) -> float:
    """How much the training loss jumps from step to step over the last ``tail`` of the run:
    the standard deviation of successive differences divided by √2 (for independent noise of
    standard deviation σ around a slowly moving level, successive differences have σ√2)."""
    if not 0 < tail <= 1:
        raise ValueError(f"tail must be in (0, 1], got {tail}")
    last = losses[len(losses) - max(3, round(tail * len(losses))):]
    if len(last) < 3:
        raise ValueError(f"losses must hold at least 3 steps, got {len(losses)}")
    return statistics.stdev(b - a for a, b in zip(last, last[1:])) / math.sqrt(2)


def train_point(multiple: int, seed: int, *, args: list[str] = RECIPE_ARGS,
                threads: int = 0) -> dict:
    """One single-process run at ``multiple`` × the recipe's batch (what that many DDP ranks
    train), from ``seed``: its loss noise, last losses, and accuracy on the worker's validation
    split and on the full test split (2,000 reviews)."""
    from course_lib.distributed.ddp import parse_args, run_training
    from course_lib.distributed.setup import accuracy_of_params

    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    cfg = parse_args([str(a) for a in args])[0]
    t0 = time.perf_counter()
    out = run_training(replace(cfg, batch_size=cfg.batch_size * multiple, seed=seed,
                               threads=threads))
    return {"multiple": multiple, "global_batch": cfg.batch_size * multiple, "seed": seed,
            "steps": cfg.steps, "noise": loss_noise(out["losses"]),
            "final_loss": statistics.fmean(out["losses"][-10:]),
            "val_accuracy": accuracy_of_params(cfg, out["params"]),
            "test_accuracy": accuracy_of_params(cfg, out["params"], split="test", scale=1.0),
            "seconds": time.perf_counter() - t0, "losses": out["losses"]}


def run(*, seeds: tuple[int, ...] = tuple(range(6)), multiples: tuple[int, ...] = MULTIPLES,
        log: Callable[[str], None] = print) -> dict:
    """``train_point`` for every multiple and seed."""
    runs = []
    for seed in seeds:
        for k in multiples:
            runs.append(train_point(k, seed))
            r = runs[-1]
            log(f"seed {seed}, global batch {r['global_batch']}: noise {r['noise']:.4f}, "
                f"val {r['val_accuracy']:.3f}, {r['seconds']:.0f} s")
    return {"recipe": {"args": RECIPE_ARGS, "multiples": list(multiples)}, "runs": runs}


def from_evidence(evidence: dict) -> dict:
    """The ``ddp_stability`` evidence reduced: ``"noise_ratio"`` {global batch: Ratio, the
    geometric mean over seeds of its loss noise ÷ the same seed's at one device's batch},
    ``"accuracy_change"`` {global batch: Estimate of its accuracy minus one device's, points,
    paired by seed}, ``"base_batch"``, ``"seeds"``, what the accuracy counts
    (``"accuracy_key"``, ``"scored_on"``, the split, and ``"scored_reviews"``), and the training
    reviews each run passed over: ``"train_reviews"``, ``"passes"`` {global batch: passes} and
    ``"final_loss"`` {global batch: mean final training loss}."""
    from course_lib.measure.verdicts import geometric_mean, mean_and_se

    by = {(r["multiple"], r["seed"]): r for r in evidence["runs"]}
    base = {s: r for (k, s), r in by.items() if k == 1}
    if not base:
        raise ValueError("the evidence has no runs at one device's batch (multiple 1)")
    # Scored on the full test split (2,000 reviews) where the evidence has it; older evidence
    # has only the worker's 100 validation reviews, where one review is a whole point.
    key = "test_accuracy" if all("test_accuracy" in r for r in evidence["runs"]) else "val_accuracy"
    ratio, change = {}, {}
    for k in sorted({k for k, _ in by if k > 1}):
        seeds = sorted(s for kk, s in by if kk == k and s in base)
        gb = by[k, seeds[0]]["global_batch"]
        ratio[gb] = geometric_mean([by[k, s]["noise"] / base[s]["noise"] for s in seeds])
        change[gb] = mean_and_se([100 * (by[k, s][key] - base[s][key]) for s in seeds])
    return {"noise_ratio": ratio, "accuracy_change": change, "seeds": len(base),
            "base_batch": next(iter(base.values()))["global_batch"], "accuracy_key": key,
            **_passes(evidence, by),
            "scored_on": "test" if key == "test_accuracy" else "validation",
            "scored_reviews": scored_reviews(
                key, args=evidence.get("recipe", {}).get("args", RECIPE_ARGS))}


def _passes(evidence: dict, by: dict) -> dict:
    """How many times each global batch's run passed over the worker's training reviews, and
    its final training loss (mean over seeds): the larger batches' extra passes over a small
    set are part of what the comparison measures."""
    from course_lib.core.data import CorpusConfig
    from course_lib.distributed.ddp import parse_args

    cfg = parse_args([str(a) for a in evidence.get("recipe", {}).get("args", RECIPE_ARGS)])[0]
    n_train = max(1, int(CorpusConfig().n_train * cfg.data_scale))
    batches = sorted({r["global_batch"] for r in by.values()})
    return {"train_reviews": n_train,
            "passes": {gb: cfg.steps * gb / n_train for gb in batches},
            "final_loss": {gb: statistics.fmean(r["final_loss"] for r in by.values()
                                                if r["global_batch"] == gb and "final_loss" in r)
                           for gb in batches
                           if any("final_loss" in r for r in by.values()
                                  if r["global_batch"] == gb)}}


def scored_reviews(key: str, *, args: list[str] = RECIPE_ARGS) -> int:
    """How many reviews ``train_point``'s accuracy ``key`` counts: the full test split, or the
    validation split at the recipe's corpus scale (the splits' sizes, without building them)."""
    from course_lib.core.data import CorpusConfig
    from course_lib.distributed.ddp import parse_args

    sizes = CorpusConfig()
    if key == "test_accuracy":
        return sizes.n_test
    if key == "val_accuracy":
        return max(1, int(sizes.n_val * parse_args([str(a) for a in args])[0].data_scale))
    raise ValueError(f"key must be 'test_accuracy' or 'val_accuracy', got {key!r}")
