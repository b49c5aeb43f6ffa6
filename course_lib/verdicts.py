"""How a measured number becomes a verdict on a claim: holds, fails or inconclusive.

A rule compares one measured quantity with a threshold, allowing for the measurement's noise:
with standard error ``se`` and ``z`` (2 by default, about 95%), the interval
``value ± z·se`` decides. Entirely on the claim's side of the threshold: **holds**; entirely on
the other side: **fails**; straddling it, or not measured (None, NaN): **inconclusive**. A
deterministic count has ``se = 0``. The noise comes from the run itself: the spread of repeated
timings, the seeds, or the binomial error of an accuracy on n examples (``accuracy_se``).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

OUTCOMES = ("holds", "fails", "inconclusive")
_SYMBOL = {">=": "≥", "<=": "≤"}


@dataclass(frozen=True)
class Rule:
    quantity: str          # what is measured, with its unit, in words
    direction: str         # ">=": the claim holds when the quantity is at least the threshold
    threshold: float
    z: float = 2.0         # margin in standard errors

    def __post_init__(self) -> None:
        if self.direction not in _SYMBOL:
            raise ValueError(f"direction must be '>=' or '<=', got {self.direction!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold}")
        if not self.z >= 0:
            raise ValueError(f"z must be >= 0, got {self.z}")

    def judge(self, value: float | None, se: float = 0.0) -> str:
        """'holds', 'fails' or 'inconclusive' for a measured ``value`` with standard error ``se``."""
        if se is None or not se >= 0:
            raise ValueError(f"se must be a number >= 0, got {se!r}")
        if value is None or not math.isfinite(value) or not math.isfinite(se):
            return "inconclusive"
        lo, hi = value - self.z * se, value + self.z * se
        if self.direction == ">=":
            return "holds" if lo >= self.threshold else "fails" if hi < self.threshold else "inconclusive"
        return "holds" if hi <= self.threshold else "fails" if lo > self.threshold else "inconclusive"

    def text(self) -> str:
        noise = f" (± {self.z:g} standard errors)" if self.z else ""
        return f"holds if {self.quantity} {_SYMBOL[self.direction]} {self.threshold:g}{noise}"


def accuracy_se(accuracy: float, n: int) -> float:
    """Binomial standard error of an accuracy measured on ``n`` examples."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= accuracy <= 1:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
    return math.sqrt(accuracy * (1 - accuracy) / n)


def difference_se(*ses: float) -> float:
    """Standard error of a sum or difference of independent measurements."""
    return math.sqrt(sum(s * s for s in ses))


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean. One value has no measurable noise: its standard
    error is infinite, so a rule calls it inconclusive instead of pretending certainty."""
    if not values:
        raise ValueError("values must not be empty")
    if len(values) == 1:
        return float(values[0]), math.inf
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def paired_ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float]:
    """Mean and standard error of the per-repeat ratios ``numerator[i] / denominator[i]``: a
    speed-up from interleaved timings (``bench.compare``), where repeat i of each alternative
    ran under the same conditions."""
    if len(numerator) != len(denominator):
        raise ValueError(f"numerator and denominator need as many repeats, got "
                         f"{len(numerator)} and {len(denominator)}")
    if min(denominator, default=0) <= 0 or min(numerator, default=0) <= 0:
        raise ValueError("timings must be positive")
    return mean_and_se([a / b for a, b in zip(numerator, denominator)])


def paired_accuracy_change(correct_before, correct_after) -> tuple[float, float]:
    """Accuracy change in percentage points, and its standard error, of two models scored on
    the same examples (1/True = correct). Paired: only the examples on which they disagree
    carry noise, so this is much tighter than two independent binomial errors."""
    a = [bool(x) for x in correct_before]
    b = [bool(x) for x in correct_after]
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty lists, got {len(a)} and {len(b)}")
    n = len(a)
    d = [int(y) - int(x) for x, y in zip(a, b)]          # +1 fixed, -1 broken, 0 unchanged
    mean = sum(d) / n
    var = sum((v - mean) ** 2 for v in d) / max(1, n - 1)
    return 100 * mean, 100 * math.sqrt(var / n)
