"""Pruned models over the fine-tune budget: how many steps give back what the cut took.

Lesson 05 can afford a few dozen fine-tune steps; whether a pruned model keeps the dense
model's accuracy depends on how long it is fine-tuned afterwards, so the claim is judged over
that budget. ``run`` prunes the baseline four ways (``VARIANTS``), fine-tunes each copy for each
budget from several seeds (the seed orders the data and draws dropout; the cut itself is
deterministic), and scores every copy on the test split. ``python -m course_lib.tools.evidence
pruning_budget`` commits the result; the lesson's own short fine-tune is one replicate beside it.

    from course_lib.pruning import budget
    doc = load_evidence("pruning_budget")
    sweep = budget.from_evidence(doc)["change"]   # {variant label: {steps: Estimate (points)}}
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

from course_lib.core.model import EncoderClassifier, keep_layers

__all__ = ["VARIANTS", "BUDGETS", "build_variant", "run", "from_evidence"]

# What each variant removes; labels as the lesson prints them.
VARIANTS = {
    "layers": "layers [0, 2] of 4",            # DistilBERT-style: every other layer
    "heads50": "-50% attention heads",
    "ffn90": "-90% FFN neurons",
    "masked50": "50% of weights masked (global magnitude)",   # unstructured: the same shapes
}
BUDGETS = (0, 40, 160, 640)   # fine-tune steps (batch 32); 0 = the cut alone
FT_LR = 5e-4                  # masks.fine_tune's default: the lesson's fine-tunes use it too


def build_variant(baseline: EncoderClassifier, name: str) -> EncoderClassifier:
    """A fresh pruned copy of ``baseline`` (the baseline itself is left unchanged)."""
    from course_lib.pruning import masks
    from course_lib.pruning.structured import prune_ffn_neurons, prune_heads

    if name not in VARIANTS:
        raise ValueError(f"name must be one of {tuple(VARIANTS)}, got {name!r}")
    if name == "layers":
        return keep_layers(baseline, list(range(0, baseline.cfg.n_layers, 2)))
    if name == "heads50":
        return prune_heads(baseline, amount=0.5)
    if name == "ffn90":
        return prune_ffn_neurons(baseline, amount=0.9)
    m = masks.copy_model(baseline)
    masks.prune_unstructured(m, amount=0.5, scope="global")
    return m


def run(corpus, baseline: EncoderClassifier, *, seeds: tuple[int, ...] = (0, 1, 2, 3),
        budgets: tuple[int, ...] = BUDGETS, variants: tuple[str, ...] = tuple(VARIANTS),
        batch_size: int = 32, log: Callable[[str], None] = print) -> dict:
    """Every variant, budget and seed fine-tuned on the whole labelled training split (batch
    ``batch_size``, ``FT_LR``, warm-up then cosine over the budget) and scored on the test
    split. Budget 0 is deterministic and run once (seed ``None``)."""
    from course_lib.core.batching import make_loader
    from course_lib.core.evaluate import evaluate
    from course_lib.measure.scoring import score
    from course_lib.measure.verdicts import paired_accuracy_change
    from course_lib.pruning.masks import fine_tune

    if any(b < 0 for b in budgets):
        raise ValueError(f"budgets must be >= 0 steps, got {budgets}")
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    val = make_loader(corpus.val, batch_size=64, shuffle=False)
    baseline = baseline.eval()
    labels = torch.tensor([r.label for r in corpus.test.reviews])
    dense_correct = score(baseline, test, labels).correct
    runs = []
    for name in variants:
        for steps in budgets:
            for seed in ((None,) if steps == 0 else seeds):
                model, t0 = build_variant(baseline, name), time.perf_counter()
                if steps:
                    loader = make_loader(corpus.train, batch_size=batch_size, seed=seed)
                    fine_tune(model, loader, steps=steps, lr=FT_LR, seed=seed)
                model.eval()
                runs.append({"variant": name, "steps": steps, "seed": seed,
                             "seconds": time.perf_counter() - t0,
                             "test_accuracy": evaluate(model, test)["accuracy"],
                             "val_accuracy": evaluate(model, val)["accuracy"]})
                # the test set's own noise, paired against the dense model (every run: one
                # noise model for the whole curve, ``verdicts.over_seeds``)
                e = paired_accuracy_change(dense_correct, score(model, test, labels).correct)
                runs[-1] |= {"paired_se": e.se, "paired_dof": e.dof}
                log(f"{name} {steps} steps seed {seed}: test {runs[-1]['test_accuracy']:.4f}")
    return {"recipe": {"variants": dict((v, VARIANTS[v]) for v in variants),
                       "budgets": list(budgets), "batch_size": batch_size, "lr": FT_LR,
                       "training_reviews": len(corpus.train), "test_reviews": len(corpus.test),
                       "dense_test_accuracy": evaluate(baseline, test)["accuracy"]},
            "runs": runs}


def from_evidence(evidence: dict) -> dict:
    """The ``pruning_budget`` evidence reduced: ``"change"`` {variant label: {steps: Estimate
    of the test-accuracy change from the dense model, points}}: every point with one noise
    model, the seeds' spread and the test set's paired noise together (``verdicts.over_seeds``;
    budget 0 is one deterministic model, so the test set's alone), where the evidence stored
    each run's paired error; an evidence run from before that has it at budget 0 only, and its
    later points carry the seed spread alone. ``"accuracy"`` {(variant, steps): [test accuracy per
    run]}, ``"dense"`` (the dense model's test accuracy), ``"seeds"`` (the number of seeds)."""
    from course_lib.measure.verdicts import Estimate, mean_and_se, over_seeds

    recipe = evidence["recipe"]
    dense = recipe["dense_test_accuracy"]
    acc: dict = {}
    paired = {}
    for r in evidence["runs"]:
        acc.setdefault((r["variant"], r["steps"]), []).append(r["test_accuracy"])
        if "paired_se" in r:
            paired.setdefault((r["variant"], r["steps"]), []).append((r["paired_se"],
                                                                      r["paired_dof"]))
    change = {}
    for (name, steps), accs in acc.items():
        d = [100 * (a - dense) for a in accs]
        ses = paired.get((name, steps))
        if ses is not None and len(ses) == len(d):   # seeds and the test set: one noise model
            e = over_seeds(d, [se for se, _ in ses], test_dof=min(dof for _, dof in ses))
        elif len(d) > 1:                           # an older evidence run: seed spread alone
            e = mean_and_se(d)
        else:
            e = Estimate(d[0], math.inf, 1.0)
        change.setdefault(recipe["variants"][name], {})[steps] = e
    seeds = max(len(v) for v in acc.values())
    return {"change": change, "accuracy": acc, "dense": dense, "seeds": seeds,
            "budgets": recipe["budgets"]}
