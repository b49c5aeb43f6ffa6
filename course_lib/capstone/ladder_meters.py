"""Lesson 14's table: ``measure`` runs every meter on each rung (accuracy, ``ladder_inputs``;
latency, the test set's time and a training epoch's time, ``ladder_timing``; size and peak
memory, ``ladder_memory``) and returns the rows and every point.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch
from course_lib.core.progress import tqdm

from course_lib.capstone.ladder import Rung
from course_lib.capstone.ladder_analysis import pareto_front
from course_lib.capstone.ladder_speedups import epoch_estimate
from course_lib.capstone.model_zoo import ModelZoo, model_device
from course_lib.capstone.ladder_inputs import PRACTITIONER, Inputs, rung_correct
from course_lib.capstone.ladder_memory import peaks_mib
from course_lib.capstone.ladder_timing import (epoch_sample, latency_samples, mean_or_none,
                                               median_or_none, test_set_samples,
                                               train_epoch_samples)

MiB = 2**20


def measure(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *,
            others: Sequence[Rung] = (), progress: bool = True,
            practitioner: dict | None = None) -> tuple[list[dict], dict[tuple, dict]]:
    """Measure ``rungs`` fully and ``others`` (e.g. ``combinations()``) for accuracy, latency
    and size, and the training time of every point that trains the teacher. Returns the rows
    of ``rungs`` and every point by ``Rung.key`` (None where a metric was not measured). Given
    a dict, ``practitioner`` is filled with ``PRACTITIONER``'s test set and training epoch,
    timed interleaved with the rungs' (its samples pair with theirs)."""
    points = list({r.key: r for r in [*others, *rungs]}.values())
    correct: dict[tuple, torch.Tensor] = {}   # one score per model and precision
    for r in tqdm(points, desc="accuracy", disable=not progress, leave=False):
        k = (*ModelZoo.key(r), r.amp)
        if k not in correct:
            correct[k] = rung_correct(zoo, inputs, r)
    acc = {k: float(v.float().mean()) for k, v in correct.items()}
    # Every repeat for the points whose speed-ups carry an error: the rungs, each technique
    # alone (the "speed-ups multiply" check divides by those) and every combination that lacks
    # one available technique (the guide's "on top" pairs); one for the other combinations.
    full, n_avail = {r.key for r in rungs}, max((len(r.techniques) for r in points), default=0)
    repeated = [*rungs, *(r for r in points if len(r.techniques) in (1, n_avail - 1)
                          and r.key not in full)]
    b1, b32, keys = {}, {}, {r.key for r in repeated}
    for group, repeats in ((repeated, None), ([r for r in points if r.key not in keys], 1)):
        if group:
            b1.update(latency_samples(zoo, inputs, group, batch_size=1, repeats=repeats))
            b32.update(latency_samples(zoo, inputs, group, batch_size=len(inputs.typical),
                                       repeats=repeats))
    # The test set is timed for the rungs and for every point on the accuracy-vs-latency front
    # (batch 32): the best configuration within an accuracy bound is one of those.
    scored = [{"key": r.key, "latency_b32_ms": statistics.median(b32[r.key]),
               "test_accuracy": acc[(*ModelZoo.key(r), r.amp)]} for r in points]
    front = {p["key"] for p in pareto_front(scored, x="latency_b32_ms")}
    extra = practitioner is not None
    test_s = test_set_samples(zoo, inputs, [*rungs, *(r for r in points
                                                     if r.key in front and r.key not in full)],
                              practitioner=extra)
    train_s = train_epoch_samples(zoo, [r for r in points if r.key in full
                                        or not (r.distill or r.prune)], practitioner=extra)
    design = {p: {"x": [b["input_ids"].shape[1] for b in batches], "population": widths}
              for p in ("bucketed", "dynamic")[:2 if extra else 1]
              for batches, widths in [epoch_sample(zoo, p)]}
    if extra:
        k, teacher = ("practitioner",), (*ModelZoo.key(PRACTITIONER), False)
        if teacher not in correct:   # the rungs did not include the FP32 teacher
            correct[teacher] = rung_correct(zoo, inputs, PRACTITIONER)
            acc[teacher] = float(correct[teacher].float().mean())
        practitioner.update({"name": PRACTITIONER.name, "techniques": PRACTITIONER.techniques,
                             "test_accuracy": acc[teacher], "test_correct": correct[teacher],
                             "test_set_s": median_or_none(test_s[k]),
                             "train_epoch_s": mean_or_none(train_s[k]),
                             "train_design": design["dynamic"],
                             "samples": {"test_set_s": test_s[k], "train_epoch_s": train_s[k]}})
    peak = peaks_mib(zoo, inputs, rungs)
    table = {r.key: {"name": r.name, "key": r.key, "techniques": r.techniques,
                     # where it ran: int8 models stay on the CPU even on a GPU machine
                     "device": model_device(zoo.model(r)).type,
                     "test_accuracy": acc[(*ModelZoo.key(r), r.amp)],
                     # each test review right or wrong, in test-split order (paired changes)
                     "test_correct": correct[(*ModelZoo.key(r), r.amp)],
                     "test_set_s": median_or_none(test_s.get(r.key)),
                     "latency_b1_ms": median_or_none(b1[r.key]),
                     "latency_b32_ms": median_or_none(b32[r.key]),
                     "train_epoch_s": mean_or_none(train_s.get(r.key)),
                     # the widths its timed training steps stand for (ladder_speedups)
                     "train_design": design["bucketed"] if r.bucketing else None,
                     "size_bytes": zoo.size_bytes(r), "peak_mib": peak.get(r.key),
                     # every timed sample, for the errors of the speed-ups (ladder_speedups)
                     "samples": {"test_set_s": test_s.get(r.key, []), "latency_b1_ms": b1[r.key],
                                 "latency_b32_ms": b32[r.key],
                                 "train_epoch_s": train_s.get(r.key, [])}}
             for r in points}
    # the one estimate of an epoch
    for row in [*table.values(), *([practitioner] if extra else [])]:
        if row.get("train_design") and row["samples"]["train_epoch_s"]:
            row["train_epoch_s"] = epoch_estimate(row).value
    return [{**table[r.key], "name": r.name} for r in rungs], table
