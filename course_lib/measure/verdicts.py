"""How a measured number becomes a verdict on a claim: holds, fails or inconclusive.

A rule compares one measured quantity with a threshold, allowing for the measurement's noise:
a 95% interval ``value ± t·se`` decides, where ``se`` is the standard error and ``t`` the
Student's t quantile for the evidence's degrees of freedom (``dof``: n - 1 for the mean of n
seeds, repeats or paired differences; infinite, the normal 1.96, for a binomial accuracy on
thousands of reviews). With 3 seeds ``t`` is 4.30, not 2: few samples earn wide intervals.
Entirely on the claim's side of the threshold: **holds**; entirely on the other side:
**fails**; straddling it, or not measured (None, NaN): **inconclusive**. A deterministic count
has ``se = 0``. The helpers below return ``Estimate(value, se, dof)``.

One "±" in the whole course: an ``Estimate`` prints as ``value ± half-width of its 95%
interval`` (``f"{e:+.1f}"``), never as value ± standard error. A ratio (a speed-up, an error
ratio: a ``Ratio``, what ``speedup`` and ``geometric_mean`` return) has its interval on the log
scale, because ratios multiply: ``value ×/÷ exp(t·se/value)``, printed as a range
(``f"{e:.2f×}"`` gives ``1.66× (1.50-1.84)``). A symmetric "±" on a ratio would reach below 0
for a noisy speed-up (4.65× ± 4.49) and call it inconclusive when every repeat ran faster.
One speed-up statistic: ``speedup``, the geometric mean of paired time ratios.
"""
from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import NamedTuple

OUTCOMES = ("holds", "fails", "inconclusive")
# The course's one confidence level: every interval an Estimate prints and every rule's default.
CONFIDENCE = 0.95
_Q = 0.5 + CONFIDENCE / 2        # the two-sided interval's upper quantile
_SYMBOL = {">=": "≥", "<=": "≤"}


class Estimate(NamedTuple):
    value: float
    se: float                  # standard error
    dof: float = math.inf      # degrees of freedom of the evidence behind ``se``

    @property
    def log(self) -> bool:
        """Whether the interval is multiplicative (a ``Ratio``)."""
        return False

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval (Student's t for ``dof``): ``value ± t·se``, or for a ratio
        (``log``) ``value / f`` to ``value · f`` with ``f = exp(t·se / value)``, symmetric on
        the log scale. The value itself when exact; unbounded when the noise is unknown."""
        if self.se == 0:
            return (self.value, self.value)
        if not math.isfinite(self.se):
            return (0.0 if self.log else -math.inf, math.inf)
        h = t_quantile(_Q, self.dof) * self.se
        if self.log and self.value > 0:
            f = math.exp(h / self.value)
            return (self.value / f, self.value * f)
        return (self.value - h, self.value + h)

    @property
    def errors(self) -> tuple[float, float]:
        """(below, above): the distances from the value to the interval's ends, as
        matplotlib's ``yerr`` takes them (different for a ratio)."""
        lo, hi = self.interval
        return (self.value - lo, hi - self.value)

    @property
    def half_width(self) -> float:
        """Half the width of the 95% interval: ``t(0.975, dof) * se`` (0 for an exact count,
        infinite when the noise is unknown)."""
        if self.se == 0:
            return 0.0
        return math.inf if not math.isfinite(self.se) else t_quantile(_Q, self.dof) * self.se

    def __format__(self, spec: str) -> str:
        """``f"{e:+.1f}"`` gives ``+2.3 ± 0.4`` (the 95% half-width), ``f"{e:.2f×}"`` gives
        ``1.87× ± 0.05``, or for a ratio (``log``) its interval ``1.87× (1.80-1.95)``;
        ``(one sample)`` when the noise is unknown, the value alone when exact."""
        ratio = spec.endswith(("×", "x"))
        spec = spec[:-1] if ratio else spec
        value = _signed_zero(format(self.value, spec), spec) + ("×" if ratio else "")
        if self.se == 0 or not math.isfinite(self.value):
            return value
        if not math.isfinite(self.se):
            return f"{value} (one sample)"
        plain = spec.replace('+', '').replace(' ', '')
        if self.log and self.value > 0:
            lo, hi = self.interval
            return f"{value} ({format(lo, plain)}–{format(hi, plain)})"
        return f"{value} ± {format(self.half_width, plain)}"


def _signed_zero(text: str, spec: str) -> str:
    """A value that rounds to zero printed without a minus sign ("-0.00" reads as a loss)."""
    if text.startswith("-") and re.fullmatch(r"-[0.,]*%?", text):
        return ("+" if "+" in spec else "") + text[1:]
    return text


class Ratio(Estimate):
    """An ``Estimate`` of a ratio (a speed-up, an error ratio): the same three numbers, with
    its interval on the log scale (``value ×/÷ exp(t·se/value)``) and printed as a range."""

    __slots__ = ()

    @property
    def log(self) -> bool:
        return True


@functools.lru_cache(maxsize=512)
def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile: the ``t`` with P(T <= t) = ``p`` for ``dof`` degrees of freedom.

    The density is integrated (Simpson's rule) and the CDF inverted by bisection: no SciPy
    needed, 4 digits exact (t(0.975, 2) = 4.303). ``dof`` infinite gives the normal quantile."""
    if not 0.5 <= p < 1:
        raise ValueError(f"p must be in [0.5, 1), got {p}")
    if not dof > 0:
        raise ValueError(f"dof must be > 0, got {dof}")
    if dof > 1e4:
        return statistics.NormalDist().inv_cdf(p)
    c = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)

    def cdf(t: float, n: int = 400) -> float:       # 0.5 + the density's integral over [0, t]
        f = lambda x: c * (1 + x * x / dof) ** (-(dof + 1) / 2)   # noqa: E731
        h = t / n
        return 0.5 + h / 3 * (f(0) + f(t) + sum((4 if i % 2 else 2) * f(i * h)
                                                for i in range(1, n)))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Rule:
    quantity: str          # what is measured, with its unit, in words
    direction: str         # ">=": the claim holds when the quantity is at least the threshold
    threshold: float
    confidence: float = CONFIDENCE   # two-sided interval around the measurement
    log: bool = False          # a ratio: judged with its interval on the log scale (see Estimate)

    def __post_init__(self) -> None:
        if self.direction not in _SYMBOL:
            raise ValueError(f"direction must be '>=' or '<=', got {self.direction!r}")
        if self.log and not self.threshold > 0:
            raise ValueError(f"a ratio rule (log=True) needs a threshold > 0, got {self.threshold}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    def margin(self, se: float, dof: float = math.inf) -> float:
        """Half-width of the interval: Student's t for ``dof`` times ``se``."""
        return 0.0 if se == 0 else t_quantile(0.5 + self.confidence / 2, dof) * se

    def judge(self, value: float | None, se: float = 0.0, dof: float = math.inf) -> str:
        """'holds', 'fails' or 'inconclusive' for a measured ``value`` with standard error
        ``se`` from evidence with ``dof`` degrees of freedom."""
        if se is None or not se >= 0:
            raise ValueError(f"se must be a number >= 0, got {se!r}")
        if dof is None or not dof > 0:
            raise ValueError(f"dof must be > 0, got {dof!r}")
        if value is not None and math.isinf(value) and math.isfinite(se):
            # An infinite measurement (a run that diverged) lies beyond any finite threshold.
            return "holds" if (value > 0) == (self.direction == ">=") else "fails"
        if value is None or not math.isfinite(value) or not math.isfinite(se):
            return "inconclusive"
        m = self.margin(se, dof)
        if self.log and value > 0:
            f = math.exp(m / value)
            lo, hi = value / f, value * f
        else:
            lo, hi = value - m, value + m
        if self.direction == ">=":
            return ("holds" if lo >= self.threshold else "fails" if hi < self.threshold
                    else "inconclusive")
        return ("holds" if hi <= self.threshold else "fails" if lo > self.threshold
                else "inconclusive")

    def text(self, *, exact: bool = False) -> str:
        """The rule in words: what is measured, then the bar; ``exact``: the measurement is a
        count or an exact check with no noise, so no interval is mentioned."""
        bar = f"{_SYMBOL[self.direction]} {self.threshold:g}"
        if exact:
            return f"measured: {self.quantity}; holds if {bar} (an exact count: no noise)"
        scale = ", on the log scale: ratios multiply" if self.log else ""
        return (f"measured: {self.quantity}; holds if {bar} with the whole {self.confidence:.0%} "
                f"interval (Student's t{scale}) on that side, fails if the whole interval is on "
                f"the other")


def exact(value: float) -> Estimate:
    """An exact value (a count, a deterministic measurement: standard error 0), said
    explicitly: ``judging.judge_over`` refuses plain numbers, so noise is never dropped silently."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"an exact value must be finite, got {value}")
    return Estimate(value, 0.0)


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


def mean_and_se(values: list[float]) -> Estimate:
    """Mean, standard error of the mean, and n - 1 degrees of freedom. One value has no
    measurable noise: its standard error is infinite, so a rule calls it inconclusive instead
    of pretending certainty."""
    if not values:
        raise ValueError("values must not be empty")
    if len(values) == 1:
        return Estimate(float(values[0]), math.inf, 1.0)
    return Estimate(statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)),
                    float(len(values) - 1))


def _quadratic_fit(times: Sequence[float], x: Sequence[float]):
    """Least squares of time on (1, x, x²), columns scaled to about 1: (beta, covariance,
    scale, dof)."""
    import torch

    n = len(times)
    X = torch.tensor([[1.0, v, v * v] for v in x], dtype=torch.float64)
    y = torch.tensor(list(times), dtype=torch.float64)
    scale = torch.diag(1 / X.abs().amax(0).clamp_min(1e-300))   # conditioning: columns to ~1
    Xs = X @ scale
    beta = torch.linalg.lstsq(Xs, y.unsqueeze(1)).solution.squeeze(1)
    resid = y - Xs @ beta
    # The sandwich (HC3) covariance: timing noise grows with the step's cost (a wide batch
    # varies by more milliseconds than a narrow one), which the plain s²(X'X)⁻¹ assumes away
    # and which would leave a wide epoch's total too sure of itself. HC3 errs wide with few
    # samples (about 1.2-1.5 times the true spread at 16 samples), never narrow.
    bread = torch.linalg.pinv(Xs.T @ Xs)
    leverage = ((Xs @ bread) * Xs).sum(1).clamp(max=1 - 1e-9)
    meat = Xs.T @ (Xs * (resid / (1 - leverage)).pow(2).unsqueeze(1))
    return beta, bread @ meat @ bread, scale, float(n - 3)


def _design_sum(population: Sequence[float], scale):
    import torch

    return torch.tensor([[1.0, v, v * v] for v in population], dtype=torch.float64).sum(0) @ scale


def _check_fit_inputs(times, x, *populations) -> bool:
    """Whether a quadratic can be fitted (at least 4 samples at 3 distinct x)."""
    if len(times) != len(x) or not times or not all(populations):
        raise ValueError("times and x must have one value each per sample, and populations "
                         "must not be empty")
    return len(times) >= 4 and len(set(x)) >= 3


def regression_total(times: Sequence[float], x: Sequence[float], population: Sequence[float]
                     ) -> Estimate:
    """The total of a quantity over ``population`` (say, every batch width of an epoch) from a
    sample of it (``times`` measured at ``x``): a quadratic least-squares fit of time on x (a
    training step's cost grows with the batch width, its attention with the width's square),
    summed over the population. Its standard error comes from the fit's residuals, the timing
    noise around the width model, not from the widths the sample covers by design
    (``g' Σ g`` with ``g`` the population's summed design row and Σ the fit's sandwich
    covariance, which lets the noise grow with the width); n - 3 degrees of freedom. Fewer than 4
    samples, or fewer than 3 distinct x: the mean scaled to the population, with an infinite
    error."""
    if not _check_fit_inputs(times, x, population):
        return Estimate(statistics.fmean(times) * len(population), math.inf, 1.0)
    beta, cov, scale, dof = _quadratic_fit(times, x)
    g = _design_sum(population, scale)
    return Estimate(float(g @ beta), math.sqrt(max(float(g @ cov @ g), 0.0)), dof)


def regression_ratio(times: Sequence[float], x: Sequence[float], slow: Sequence[float],
                     fast: Sequence[float]) -> Estimate:
    """How many times faster an epoch of batches at widths ``fast`` runs than one at widths
    ``slow``, both totals from one quadratic fit of the sampled step ``times`` on width ``x``
    (``regression_total``; steps of both epochs may be pooled in the fit, since a step's time
    depends on its width). The error is the delta method through the fit's covariance:
    ``∇r' Σ ∇r`` with ``r = g_slow·β / g_fast·β``, n - 3 degrees of freedom; a ``Ratio``.
    Too few samples for a fit (or a fit that makes an epoch's time negative): the widths'
    ratio, cost taken as proportional to width, with an infinite error (unresolved)."""
    # Too few samples to fit, or a fit so loose that an epoch's time comes out negative: the
    # step's cost taken as proportional to its width, with an unknown (infinite) error.
    crude = Ratio(sum(slow) / sum(fast), math.inf, 1.0)
    if not _check_fit_inputs(times, x, slow, fast):
        return crude
    beta, cov, scale, dof = _quadratic_fit(times, x)
    gs, gf = _design_sum(slow, scale), _design_sum(fast, scale)
    ts, tf = float(gs @ beta), float(gf @ beta)
    if not (ts > 0 and tf > 0):
        return crude
    grad = (gs * tf - gf * ts) / tf ** 2
    return Ratio(ts / tf, math.sqrt(max(float(grad @ cov @ grad), 0.0)), dof)


def speedup(slow: list[float], fast: list[float], *, paired: bool = True) -> Estimate:
    """How many times faster ``fast`` ran than ``slow``: the course's one speed-up statistic.

    Paired (the default: repeat i of both ran the same work under the same conditions,
    interleaved by ``bench.compare``): the geometric mean of the per-repeat ratios
    ``slow[i] / fast[i]``, its standard error from the spread of the log-ratios (the delta
    method: ``value * se(log)``) with n - 1 degrees of freedom; drift that hits both alike
    cancels. Geometric, because ratios multiply: twice as fast on one repeat and half as fast
    on the next is no speed-up at all (1×), where the arithmetic mean of the ratios says 1.25×.
    Unpaired (``paired=False``: samples of different work, such as steps of different batches
    standing for an epoch): the ratio of the two means, that is of the totals they stand for,
    with the relative errors in quadrature and the smaller sample's n - 1 degrees of freedom.
    (Samples that differ by design, such as steps of batches of many widths, need a model of
    that difference first: ``regression_total``.) Also a ratio of other positive measurements
    (errors, sizes)."""
    if not slow or not fast:
        raise ValueError("slow and fast must not be empty")
    if min(slow) <= 0 or min(fast) <= 0:
        raise ValueError("times must be positive")
    if paired:
        if len(slow) != len(fast):
            raise ValueError(f"paired slow and fast need as many repeats, got {len(slow)} and "
                             f"{len(fast)}")
        return geometric_mean([a / b for a, b in zip(slow, fast)])
    return quotient(mean_and_se(list(slow)), mean_and_se(list(fast)))


def quotient(a: Estimate, b: Estimate) -> Estimate:
    """``a / b`` for two independent estimates: relative errors in quadrature, the smaller
    degrees of freedom (conservative); a ``Ratio``."""
    if not (a.value > 0 and b.value > 0):
        raise ValueError(f"a quotient needs two positive values, got {a.value} and {b.value}")
    value = a.value / b.value
    return Ratio(value, value * math.hypot(a.se / a.value, b.se / b.value), min(a.dof, b.dof))


def seeds_for_interval(differences: list[float], half_width: float) -> int:
    """How many seeds a mean of paired differences needs for its 95% interval (Student's t,
    seeds - 1 degrees of freedom) to be ± ``half_width``, at the spread of ``differences``:
    the power a replicated comparison would need to resolve that difference."""
    if len(differences) < 2 or not half_width > 0:
        raise ValueError("differences must hold at least 2 values and half_width must be > 0")
    sd = statistics.stdev(differences)
    n = 2
    while t_quantile(_Q, n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return n


def geometric_mean(ratios: list[float]) -> Estimate:
    """Geometric mean of positive ratios with the delta-method standard error (see ``speedup``);
    one ratio has an infinite standard error, identical ratios a zero one."""
    if not ratios or min(ratios) <= 0:
        raise ValueError("ratios must be a non-empty list of positive numbers")
    logs = mean_and_se([math.log(r) for r in ratios])
    value = math.exp(logs.value)
    return Ratio(value, value * logs.se if math.isfinite(logs.se) else math.inf, logs.dof)


def over_seeds(values: Sequence[float], test_ses: Sequence[float], *,
               test_dof: float = math.inf) -> Estimate:
    """One noise model for a result measured over seeds on one shared test set: the mean of the
    seeds' ``values``, with a standard error that keeps the test set's own noise (the seeds share
    its examples, so averaging them does not shrink it: the mean of their squared ``test_ses``)
    and adds the spread the seeds cause (their variance over their number); Welch-Satterthwaite
    degrees of freedom. One seed: its test-set error alone."""
    if not values or len(values) != len(test_ses):
        raise ValueError("values and test_ses must be non-empty and as long as each other")
    k = len(values)
    test = statistics.fmean(s * s for s in test_ses)
    between = statistics.variance(values) / k if k > 1 else 0.0
    se2 = test + between
    if se2 == 0:
        return Estimate(statistics.fmean(values), 0.0, math.inf)
    dof = se2 ** 2 / ((test ** 2 / test_dof if test else 0.0)
                      + (between ** 2 / (k - 1) if k > 1 and between else 0.0))
    return Estimate(statistics.fmean(values), math.sqrt(se2), dof)


def across_rounds(rounds: Sequence[Mapping]) -> dict:
    """One ratio per key from several rounds of the same sweep (an evidence run repeats a whole
    sweep so that what moves between runs, machine load above all, is in the error): the
    geometric mean of each key's per-round ratios, with rounds - 1 degrees of freedom. Keys
    missing from a round are judged on the rounds that have them."""
    if not rounds:
        raise ValueError("rounds must hold at least one round")
    keys = list(dict.fromkeys(k for r in rounds for k in r))
    return {k: geometric_mean([float(r[k]) for r in rounds if k in r]) for k in keys}


def paired_accuracy_change(correct_before, correct_after) -> Estimate:
    """Accuracy change in percentage points, and its standard error, of two models scored on
    the same examples (1/True = correct). Paired: only the examples on which they disagree
    carry noise, so this is much tighter than two independent binomial errors. When no example
    changed, the interval is ± 300/n points (the rule of three), never zero."""
    a = [bool(x) for x in correct_before]
    b = [bool(x) for x in correct_after]
    if len(a) != len(b) or not a:
        raise ValueError(f"need two equally long, non-empty lists, got {len(a)} and {len(b)}")
    n = len(a)
    d = [int(y) - int(x) for x, y in zip(a, b)]          # +1 fixed, -1 broken, 0 unchanged
    mean = sum(d) / n
    if not any(d):
        # No example changed: the sample spread is 0, but n examples only bound how often the
        # two models disagree, below 3/n at 95% (the rule of three): that bound is the interval.
        return Estimate(0.0, 100 * 3 / n / t_quantile(_Q, max(1, n - 1)), float(max(1, n - 1)))
    var = sum((v - mean) ** 2 for v in d) / max(1, n - 1)
    return Estimate(100 * mean, 100 * math.sqrt(var / n), float(max(1, n - 1)))


def difference_call(e: Estimate, *, confidence: float = CONFIDENCE) -> str:
    """A measured difference in words: "a gain" or "a loss" when its interval (Student's t for
    its degrees of freedom) excludes 0, else "within the noise"."""
    half = t_quantile(0.5 + confidence / 2, e.dof) * e.se
    return "within the noise" if not abs(e.value) > half else "a gain" if e.value > 0 else "a loss"


def fmt(e: Estimate, *, digits: int = 1) -> str:
    """A ratio estimate as the lessons print it: ``12.3× (11.9–12.7)`` (its 95% interval), or
    ``12.3× (one sample)`` when the noise is unknown; ``digits`` after the point."""
    return format(e, f",.{digits}f×")
