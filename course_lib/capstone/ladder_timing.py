"""What lesson 14 times on each rung: the latency of a typical batch (every rung interleaved,
the order rotated), the test set's time (timed strata of the fixed-padding subset, scaled), and a
training epoch's time (sampled steps of the course's training step, scaled by padded tokens).
"""
from __future__ import annotations

import copy
import functools
import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from course_lib.measure import bench
from course_lib.core.precision import choose_precision
from course_lib.core.train import make_step_fn
from course_lib.core.batching import BucketBatchSampler
from course_lib.capstone.ladder import Rung, applied
from course_lib.capstone.model_zoo import ModelZoo
from course_lib.core.padding import Collate
from course_lib.capstone.ladder_inputs import (PRACTITIONER, Inputs, forward_fn, run_test_set,
                                              test_loader, typical_batch)


def latency_samples(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, batch_size: int,
                    repeats: int | None = None) -> dict[tuple, list[float]]:
    """ms of each repeat of a forward pass on ``batch_size`` typical reviews, the rungs
    interleaved with the order rotated (repeat i of every rung in round i); by ``Rung.key``."""
    if not 1 <= batch_size <= len(inputs.typical):
        raise ValueError(f"batch_size must be in [1, {len(inputs.typical)}], got {batch_size}")
    fns = {r.key: forward_fn(zoo.model(r), r, *typical_batch(zoo, inputs, r, batch_size))
           for r in rungs}
    res = bench.compare(fns, warmup=zoo.settings.warmup, repeats=repeats or zoo.settings.repeats,
                        device=zoo.device, rotate=True)
    return {k: [1e3 * t for t in v["timing"].samples] for k, v in res.items()}


def latencies(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, batch_size: int,
              repeats: int | None = None) -> dict[tuple, float]:
    """Median ms of ``latency_samples``, by ``Rung.key``."""
    return {k: statistics.median(v) for k, v in latency_samples(
        zoo, inputs, rungs, batch_size=batch_size, repeats=repeats).items()}


def timed_strata(zoo: ModelZoo, inputs: Inputs, rung: Rung, *, dynamic: bool = False
                 ) -> list[tuple[object, float]]:
    """What is timed to stand for the whole test set: ``(batches, factor)`` strata whose times,
    each multiplied by its factor, add up to the set's. Fixed padding: ``fixed_test_reviews``
    random reviews (every batch costs the same), scaled to the set. Bucketing: the set's own
    batches; the costliest (by padded tokens) that make up half of all padded tokens are timed
    in full, and of the rest every ``bucket_sample``-th, scaled by padded tokens (a ratio
    estimate: a few wide batches, whose attention grows as L², dominate the time and are never
    sampled away). Dynamic padding (``dynamic``): the split's batches in its own order, all
    of them wide (a batch of random reviews holds a long one), so a plain systematic sample
    does: every ``dynamic_sample``-th batch in width order, scaled by padded tokens. Accuracy is
    scored on every review (``test_loader``)."""
    s, test = zoo.settings, zoo.corpus.test
    loader = test_loader(zoo, inputs, rung, dynamic=dynamic)
    tokens = lambda b: b["input_ids"].numel()   # noqa: E731
    if dynamic:
        batches = sorted(loader, key=tokens)
        sample = batches[s.dynamic_sample // 2::s.dynamic_sample] or batches
        return [(sample, sum(map(tokens, batches)) / sum(map(tokens, sample)))]
    if not rung.bucketing:
        return [(loader, len(test) / len(loader.dataset))]
    if s.bucket_sample <= 1:
        return [(loader, 1.0)]
    batches = sorted(loader, key=tokens, reverse=True)
    total, acc, cut = sum(map(tokens, batches)), 0, 0
    while cut < len(batches) and acc < total / 2:
        acc, cut = acc + tokens(batches[cut]), cut + 1
    top, rest = batches[:cut], batches[cut:]
    sample = rest[s.bucket_sample // 2::s.bucket_sample]
    if not sample:
        return [(top + rest, 1.0)]
    return [(top, 1.0), (sample, sum(map(tokens, rest)) / sum(map(tokens, sample)))]


def test_set_samples(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *,
                     practitioner: bool = False) -> dict[tuple, list[float]]:
    """Seconds to run the whole test set, each repeat, interleaved with the order rotated, by
    ``Rung.key``: the strata of ``timed_strata``, each timed and scaled, added up per repeat;
    with ``practitioner``, ``PRACTITIONER`` (dynamic padding) too, under the key
    ``("practitioner",)``. No warm-up: ``accuracy`` and ``latencies`` ran every model before."""
    runs = [(r.key, r, False) for r in rungs] + ([(("practitioner",), PRACTITIONER, True)]
                                                 if practitioner else [])
    strata = {k: timed_strata(zoo, inputs, r, dynamic=d) for k, r, d in runs}
    fns = {(k, i): functools.partial(run_test_set, zoo, inputs, r, part)
           for k, r, _ in runs for i, (part, _) in enumerate(strata[k])}
    res = bench.compare(fns, warmup=0, repeats=zoo.settings.test_repeats, device=zoo.device,
                        rotate=True)
    return {k: [sum(res[(k, i)]["timing"].samples[j] * f for i, (_, f) in enumerate(parts))
                for j in range(zoo.settings.test_repeats)] for k, parts in strata.items()}


def epoch_sample(zoo: ModelZoo, padding: str) -> tuple[list[dict], list[int]]:
    """A few collated training batches standing for an epoch, and the width of every batch of
    the epoch. ``padding``: "fixed" (random batches padded to ``fixed_length``), "bucketed", or
    "dynamic" (random batches padded to their longest); bucketed and dynamic batches are picked
    evenly over the epoch's batch widths, in width order."""
    n, s = zoo.corpus.train.lengths, zoo.settings
    if padding == "bucketed":
        plan = list(BucketBatchSampler(n, batch_size=s.train_batch, seed=zoo.seed))
    else:
        perm = torch.randperm(len(n), generator=torch.Generator().manual_seed(zoo.seed))
        plan = [perm[i:i + s.train_batch].tolist() for i in range(0, len(n), s.train_batch)]
    if padding == "fixed":
        k, cost = s.fixed_train_batches, len
        widths = [s.fixed_length] * len(plan)
    else:
        k, cost = s.bucket_train_batches, lambda b: max(n[i] for i in b)   # noqa: E731
        widths = [max(n[i] for i in b) for b in plan]
    k, by_cost = min(k, len(plan)), sorted(plan, key=cost)
    collate = Collate(max_length=s.fixed_length if padding == "fixed" else None)
    return [collate([zoo.corpus.train[i] for i in by_cost[(2 * j + 1) * len(plan) // (2 * k)]])
            for j in range(k)], widths


def _training_steps(zoo: ModelZoo, rung: Rung, batches: list[dict]) -> Callable:
    """One training step per call, cycling over ``batches``, on a copy of the float model
    (it may be the teacher, which ``distill`` froze: the copy trains again)."""
    model = copy.deepcopy(zoo.model(replace(rung, int8=False))).requires_grad_(True)
    name = choose_precision(zoo.device).name if rung.amp else "fp32"
    fns = [make_step_fn(model, b, precision_name=name, device=zoo.device) for b in batches]
    # the first call (the warm-up) takes the last batch, so that the timed calls then run the
    # batches in their order (by width, for bucketing): ``ladder_speedups`` relies on it
    steps = itertools.cycle(fns[-1:] + fns[:-1])

    def step():
        with applied(replace(rung, amp=False), device_type=zoo.device.type, dtype=None):
            next(steps)()
    return step


def train_epoch_samples(zoo: ModelZoo, rungs: Sequence[Rung], *, practitioner: bool = False
                        ) -> dict[tuple, list[float]]:
    """Seconds per epoch of training the float model each rung serves with its training
    techniques (bucketing, amp, sdpa; int8 comes after training), by ``Rung.key``; with
    ``practitioner``, ``PRACTITIONER`` too (dynamic padding), under ``("practitioner",)``. Each
    timed step runs one of a few batches of one epoch's plan (fixed padding: any; bucketed and
    dynamic: spread over the batch widths, in the order of their width), scaled to the epoch;
    their mean estimates the epoch. After a warm-up step each, the steps are interleaved in
    rounds, the order rotated from round to round and the fewer fixed-padding steps spread over
    the rounds, so drift hits all alike."""
    def padding(r):
        return "bucketed" if r.bucketing else "fixed"
    todo = {(r.distill, r.prune, r.bucketing, r.amp, r.sdpa): (r, padding(r)) for r in rungs}
    if practitioner:
        todo[("practitioner",)] = (PRACTITIONER, "dynamic")
    sample = {p: epoch_sample(zoo, p) for p in {p for _, p in todo.values()}}
    steps = {k: _training_steps(zoo, r, sample[p][0]) for k, (r, p) in todo.items()}
    for step in steps.values():
        step()
    rounds = max((len(b) for b, _ in sample.values()), default=0)
    due = {k: {i * rounds // len(sample[p][0]) for i in range(len(sample[p][0]))}
           for k, (_, p) in todo.items()}
    times: dict[tuple, list[float]] = {k: [] for k in todo}
    for j in range(rounds):
        now = [(k, step) for k, step in steps.items() if j in due[k]]
        now = dict(now[j % len(now):] + now[:j % len(now)]) if now else {}
        for k, v in (bench.compare(now, warmup=0, repeats=1, device=zoo.device).items()
                     if now else ()):
            times[k].append(v["timing"].median)
    per = {k: [t * len(sample[p][1]) for t in times[k]] for k, (_, p) in todo.items()}
    out = {r.key: per[(r.distill, r.prune, r.bucketing, r.amp, r.sdpa)] for r in rungs}
    return out | ({("practitioner",): per[("practitioner",)]} if practitioner else {})


def median_or_none(xs):
    """The median of a metric's samples (None where the metric was not measured)."""
    return statistics.median(xs) if xs else None


def mean_or_none(xs):
    """The mean of a metric's samples (None where the metric was not measured)."""
    return statistics.fmean(xs) if xs else None
