"""Lesson 14's speed-ups with their noise: every ratio of two measured times gets a standard
error and degrees of freedom (``verdicts.Estimate``), so that a target or the "speed-ups
multiply" check can come out "inconclusive" when the timings cannot tell.

Where the samples come from (``ladder_meters.measure`` stores them under ``"samples"``):

- latencies and the test set: ``bench.compare`` with the order rotated, so repeat i of every
  point ran in the same round: the speed-up is the geometric mean of the per-repeat ratios
  (``verdicts.speedup``, n - 1 degrees of freedom);
- a training epoch: the times of a few timed steps (fixed padding: any batch; bucketed and
  dynamic padding: spread over the batch widths), so the two arms are not paired: the ratio of
  the two epoch estimates (``epoch_estimate``), relative errors in quadrature. Where the steps
  stand for many widths, the epoch comes from a fit of step time on width summed over the
  epoch's widths (``verdicts.regression_total``), whose error is the timing noise around the
  fit: the spread of widths, which the sample covers by design, is not noise.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from course_lib.measure.verdicts import (Estimate, Ratio, Rule, fmt,  # noqa: F401  (fmt: re-exported)
                                        mean_and_se, quotient, regression_total, speedup)

PAIRED = ("latency_b1_ms", "latency_b32_ms", "test_set_s")   # interleaved, repeat by repeat
UNPAIRED = ("train_epoch_s",)                                  # steps of different batches


def rung_speedup(base: dict, point: dict, metric: str) -> Estimate:
    """How many times faster ``point`` is than ``base`` on ``metric`` (time before / after),
    from the samples both carry (``verdicts.speedup``, paired where the two were timed in the
    same rounds); infinite standard error from a single sample."""
    if metric not in PAIRED + UNPAIRED:
        raise ValueError(f"metric must be one of {PAIRED + UNPAIRED}, got {metric!r}")
    if point is base:
        return Ratio(1.0, 0.0, math.inf)
    a, b = base["samples"].get(metric), point["samples"].get(metric)
    if not a or not b:
        raise ValueError(f"no {metric} samples for {base['name']!r} or {point['name']!r}")
    if metric in PAIRED:
        if len(a) != len(b):
            raise ValueError(f"{metric}: {base['name']!r} and {point['name']!r} were not timed in "
                             f"the same rounds ({len(a)} and {len(b)} repeats)")
    if metric in PAIRED:
        return speedup(list(a), list(b))
    return quotient(epoch_estimate(base), epoch_estimate(point))


def epoch_estimate(point: dict) -> Estimate:
    """A point's training epoch in seconds with its error. Steps that stand for batches of many
    widths (``point["train_design"]``: the widths timed and every width of the epoch) give the
    epoch through a fit of step time on width (``verdicts.regression_total``): the error is the
    timing noise around it, not the spread of widths the sample covers by design. Fixed padding
    (one shape): the mean of the scaled steps and its plain error."""
    samples = list(point["samples"]["train_epoch_s"])
    design = point.get("train_design")
    if not design:
        return mean_and_se(samples)
    n = len(design["population"])
    return regression_total([t / n for t in samples], design["x"], design["population"])


def product(estimates: Sequence[Estimate]) -> Estimate:
    """The product of independent speed-ups: relative errors in quadrature, the fewest
    degrees of freedom (conservative)."""
    value = math.prod(e.value for e in estimates)
    rel = math.sqrt(sum((e.se / e.value) ** 2 for e in estimates))
    return Ratio(value, value * rel, min(e.dof for e in estimates))


# "Speed-ups multiply" when the measured stack is within a factor 4/3 of the product of the
# techniques' speed-ups alone: a band, so two one-sided rules.
MULTIPLY_BAND = (0.75, 4 / 3)


def multiply_call(r: Estimate, *, band: tuple[float, float] = MULTIPLY_BAND) -> str:
    """"roughly true" when the 95% interval of measured / predicted lies inside ``band``,
    "not true" when it lies wholly outside, else "inconclusive"."""
    low, high = (Rule("measured / predicted", ">=", band[0], log=True).judge(r.value, r.se, r.dof),
                 Rule("measured / predicted", "<=", band[1], log=True).judge(r.value, r.se, r.dof))
    if low == "holds" and high == "holds":
        return "roughly true"
    if "fails" in (low, high):
        return "not true"
    return "inconclusive"


def combined_call(calls: Sequence[str]) -> str:
    """Several stacks' ``multiply_call``s as one: "not true" if any is, "roughly true" if all
    are, else "inconclusive"."""
    if not calls:
        raise ValueError("calls must not be empty")
    return ("not true" if "not true" in calls else
            "roughly true" if set(calls) == {"roughly true"} else "inconclusive")


def target_call(e: Estimate, target: float) -> str:
    """A speed-up target in words: "met", "not met" or "inconclusive" (``Rule`` ``>=``)."""
    return {"holds": "met", "fails": "not met", "inconclusive": "inconclusive"}[
        Rule("speed-up", ">=", target).judge(e.value, e.se, e.dof)]
