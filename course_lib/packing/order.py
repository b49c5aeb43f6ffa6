"""Lesson 02's convergence check: does the order of length-grouped batches cost accuracy?

The article's uniform-length snippet sorts the dataset once and walks it in order, so every
epoch runs from the shortest batch to the longest (a sawtooth) and ends on long reviews alone,
in the same order every epoch. The shuffled length-grouped samplers (bucketed, noisy sort) draw
new batches in a new order each epoch. ``train_arm`` trains the same model on the same reviews,
with the same initialisation and schedule, and only the sampler differs.

=================== ==================================================================
sorted, no shuffle  ``UniformLengthBatchSampler(shuffle=False)``: the article's snippet
bucketed, shuffled  ``BucketBatchSampler``: sort inside megabatches, shuffle the batches
noisy sort          ``NoisySortBatchSampler``: sort on length plus fresh noise each epoch
=================== ==================================================================
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from course_lib.core.batching import (BucketBatchSampler, NoisySortBatchSampler,
                                      UniformLengthBatchSampler)
from course_lib.core.model import build_model
from course_lib.core.padding import Collate
from course_lib.core.train import History, TrainConfig, train

ARMS = ("sorted, no shuffle", "bucketed, shuffled", "noisy sort, shuffled")

__all__ = ["ARMS", "sampler", "train_arm", "from_evidence"]


def sampler(arm: str, lengths: Sequence[int], *, batch_size: int, seed: int,
            megabatch: int = 50, noise: float = 0.01):
    """The batch sampler of ``arm`` (one of ``ARMS``) over reviews of ``lengths``."""
    if arm == "sorted, no shuffle":
        return UniformLengthBatchSampler(lengths, batch_size=batch_size, shuffle=False)
    if arm == "bucketed, shuffled":
        return BucketBatchSampler(lengths, batch_size=batch_size, megabatch_size=megabatch,
                                  seed=seed)
    if arm == "noisy sort, shuffled":
        return NoisySortBatchSampler(lengths, batch_size=batch_size, noise=noise, seed=seed)
    raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")


def train_arm(data: Dataset, lengths: Sequence[int], arm: str, *, vocab_size: int, seed: int,
              epochs: int, batch_size: int = 32, lr: float = 2e-3, preset: str = "student",
              megabatch: int = 50, noise: float = 0.01, device: torch.device | str = "cpu",
              collate_fn: Callable | None = None) -> tuple[torch.nn.Module, History]:
    """Train a fresh ``preset`` model (initialised from ``seed``) on ``data`` with ``arm``'s
    batches for ``epochs`` (the course's loop: AdamW, warm-up then cosine); returns the model
    and its history. ``collate_fn``: e.g. ``strategies.WidthLog`` to record batch widths."""
    if len(lengths) != len(data):
        raise ValueError(f"lengths must have one entry per review: {len(lengths)} for {len(data)}")
    model = build_model(vocab_size, preset=preset, seed=seed).to(device)
    loader = DataLoader(data, collate_fn=collate_fn or Collate(),
                        batch_sampler=sampler(arm, lengths, batch_size=batch_size, seed=seed,
                                              megabatch=megabatch, noise=noise))
    hist = train(model, loader, device=device, cfg=TrainConfig(epochs=epochs, lr=lr, seed=seed),
                 progress=False)
    return model, hist


def from_evidence(evidence: dict, *, tolerance: float = 1.0) -> dict:
    """The committed ``sorted_batching`` evidence (``tools.evidence``) reduced per budget:
    ``"accuracy"`` {(epochs, arm): {seed: test accuracy}}, ``"mean"`` {(epochs, arm): mean},
    ``"pairs"`` {epochs: [sorted minus bucketed, points, one per seed]}, ``"difference"``
    {epochs: ``Estimate`` of that mean}, ``"seeds_needed"`` {epochs: seeds a 95% interval of
    ± ``tolerance`` points would need (Student's t), from the spread of the paired differences},
    plus ``"budgets"``, ``"arms"`` and ``"seeds"`` (the number of seeds)."""
    import statistics

    from course_lib.measure.verdicts import mean_and_se, seeds_for_interval

    budgets, arms = list(evidence["recipe"]["budgets"]), list(evidence["recipe"]["arms"])
    if len(arms) != 2:
        raise ValueError(f"evidence must compare two arms, got {arms}")
    acc: dict = {}
    for r in evidence["runs"]:
        acc.setdefault((r["epochs"], r["arm"]), {})[r["seed"]] = r["test_accuracy"]
    pairs = {b: [100 * (acc[b, arms[0]][s] - acc[b, arms[1]][s]) for s in sorted(acc[b, arms[0]])]
             for b in budgets}
    return {"budgets": budgets, "arms": arms, "accuracy": acc,
            "seeds": len(acc[budgets[0], arms[0]]),
            "mean": {k: statistics.fmean(v.values()) for k, v in acc.items()},
            "pairs": pairs, "difference": {b: mean_and_se(d) for b, d in pairs.items()},
            "seeds_needed": {b: seeds_for_interval(d, tolerance) for b, d in pairs.items()}}
