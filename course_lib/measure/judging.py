"""How a lesson's measurements become a verdict on a registered claim (``measure.claims``).

``judge`` decides a claim at one point; ``judge_over`` decides it over a sweep of the condition
that decides it and gives the verdict one word from what the points show:

- **holds**: every measured point holds;
- **holds from** / **holds up to** / **holds between**: the holding points form one run at the
  top, at the bottom or in the middle of the sweep (the boundary is named by the sentence);
- **holds in part**: points hold in more than one run, or the series disagree on the boundary;
- **holds nowhere**: no point holds and at least one fails;
- **unresolved**: every measured point is inconclusive.

Points not measured (None) are listed apart and never change the word. Points whose outcomes
differ only within noise are not a condition: before the word names a boundary, the holding
points must differ from the others by more than noise (``differs``: a pairwise test at 95% with a
Bonferroni correction for the number of pairs compared); where none does, the points are pooled
(``pool``: their common value, with no more precision than the best of them) and the word is the
pooled result (holds, holds nowhere or unresolved).

What follows from arithmetic (counts, calculators, FLOP formulas) is not judged at all: it is a
``Demonstration``. A sweep whose every point is exact (standard error 0) is refused unless the
claim says why an exact number is still a measurement (``Claim.exact_measurement``), and exact
values must be passed explicitly (``verdicts.exact``): a plain float is refused, so no noisy
measurement is ever read as exact by accident. The sentence and the map of a verdict are drawn
by ``course_lib.ui.verdicts``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS, Claim
from course_lib.measure.verdicts import Estimate, Ratio, t_quantile

# The words a verdict can carry: one point's outcome, then a sweep's words (module docstring).
POINT_OUTCOMES = ("holds", "fails", "inconclusive")
SWEEP_WORDS = ("holds", "holds from", "holds up to", "holds between", "holds in part",
               "holds nowhere", "unresolved")
VERDICT_WORDS = tuple(dict.fromkeys(POINT_OUTCOMES + SWEEP_WORDS))


class Point(NamedTuple):
    """One point of a sweep: the condition's value, the measurement there, its outcome."""

    at: float
    value: float | None
    se: float
    dof: float
    outcome: str
    series: str = ""      # a second, fixed condition the sweep was run at ("at 512 tokens")

    @property
    def measured(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    def estimate(self, claim: Claim) -> Estimate:
        return (Ratio if claim.rule.log else Estimate)(self.value, self.se, self.dof)


@dataclass(frozen=True)
class Verdict:
    claim: str
    outcome: str          # a word of VERDICT_WORDS
    value: float | None   # at the learner's point (the whole verdict's for a one-point claim)
    se: float
    evidence: str         # the measurement in words, with the hardware it ran on
    dof: float = math.inf  # degrees of freedom behind se (inf: a large-sample normal interval)
    points: tuple[Point, ...] = ()   # the sweep over the claim's condition (``judge_over``)
    learner: Point | None = None     # the learner's default point among them
    source: str = "live"  # what it rests on: "live" (this run) or a committed evidence file
    pooled: Estimate | None = field(default=None)   # set when the points agree within noise

    @property
    def measured_points(self) -> tuple[Point, ...]:
        return tuple(p for p in self.points if p.measured)

    @property
    def unmeasured_points(self) -> tuple[Point, ...]:
        return tuple(p for p in self.points if not p.measured)

    def as_dict(self) -> dict:
        d = {"claim": self.claim, "outcome": self.outcome, "value": self.value,
             "se": self.se, "dof": None if math.isinf(self.dof) else self.dof,
             "evidence": self.evidence, "source": self.source}
        if self.points:
            d["points"] = [_point_dict(p) for p in self.points]
            d["learner"] = _point_dict(self.learner)
        if self.pooled is not None:
            d["pooled"] = _estimate_dict(self.pooled)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Verdict:
        """The verdict a results file recorded (``as_dict``), to draw its map and sentence."""
        points = tuple(_point(p) for p in d.get("points", ()))
        learner = _point(d["learner"]) if d.get("learner") else None
        pooled = d.get("pooled")
        dof = d.get("dof")
        return cls(d["claim"], d["outcome"], d.get("value"), float(d.get("se") or 0.0),
                   d.get("evidence", ""), math.inf if dof is None else float(dof), points,
                   learner, d.get("source", "live"),
                   None if pooled is None else Estimate(pooled["value"], pooled["se"],
                                                        math.inf if pooled["dof"] is None
                                                        else pooled["dof"]))


def _point_dict(p: Point) -> dict:
    return {"at": p.at, "series": p.series, "value": p.value, "se": p.se,
            "dof": None if math.isinf(p.dof) else p.dof, "outcome": p.outcome}


def _point(d: Mapping) -> Point:
    dof = d.get("dof")
    return Point(float(d["at"]), d.get("value"), float(d.get("se") or 0.0),
                 math.inf if dof is None else float(dof), d["outcome"], d.get("series", ""))


def _estimate_dict(e: Estimate) -> dict:
    return {"value": e.value, "se": e.se, "dof": None if math.isinf(e.dof) else e.dof}


def _claim(claim_id: str) -> Claim:
    if claim_id not in CLAIMS:
        raise ValueError(f"claim_id must be one of {sorted(CLAIMS)}, got {claim_id!r}")
    return CLAIMS[claim_id]


def _refuse_arithmetic(claim: Claim, ses: list[float]) -> None:
    if ses and all(se == 0 for se in ses) and not claim.exact_measurement:
        raise ValueError(
            f"claim {claim.id!r}: every value is exact (se = 0), so it follows from arithmetic "
            f"and cannot come out otherwise: show it as a Demonstration, or give the claim an "
            f"exact_measurement reason (why an exact number is still a measurement)")


def judge(claim_id: str, value: float | None, *, se: float, dof: float = math.inf,
          evidence: str) -> Verdict:
    """The verdict of ``claim_id`` at one point, for a measured ``value`` (standard error ``se``,
    required: 0 only for an exact measurement the claim allows, from evidence with ``dof``
    degrees of freedom: ``verdicts.Estimate`` carries all three)."""
    claim = _claim(claim_id)
    if value is not None and math.isfinite(value):
        _refuse_arithmetic(claim, [se])
    outcome = claim.rule.judge(value, se, dof)
    return Verdict(claim_id, outcome, None if value is None else float(value), float(se),
                   evidence, float(dof))


def differs(a: Estimate, b: Estimate, *, log: bool, confidence: float) -> bool:
    """Whether two independent estimates differ by more than noise: the interval of ``a - b``
    (of ``log a - log b`` for ratios) at ``confidence`` (Student's t at the smaller dof)
    excludes 0. Exact values differ when they are not equal."""
    if log and a.value > 0 and b.value > 0:
        da, db = math.log(a.value), math.log(b.value)
        sa, sb = a.se / a.value, b.se / b.value
    else:
        da, db, sa, sb = a.value, b.value, a.se, b.se
    se = math.hypot(sa, sb)
    if not math.isfinite(se):
        return False
    if se == 0:
        return da != db
    return abs(da - db) > t_quantile(0.5 + confidence / 2, min(a.dof, b.dof)) * se


def pool(estimates: list[Estimate], *, log: bool) -> Estimate:
    """The common value of estimates that agree within noise: their inverse-variance weighted
    mean (on the log scale for ratios), with the error of the most precise of them, never less.
    Points of one sweep often share what they are measured against (the same baseline runs,
    the same seeds, the same test set), so pooling them cannot be trusted to add precision the
    way independent measurements would: it only lets the common value, not one point, decide.
    Exact estimates (se 0) give their plain mean."""
    vals = [math.log(e.value) if log else e.value for e in estimates]
    ses = [e.se / e.value if log else e.se for e in estimates]
    if any(s == 0 for s in ses):
        exact = [v for v, s in zip(vals, ses) if s == 0]
        m, s, dof = sum(exact) / len(exact), 0.0, math.inf
    else:
        w = [1 / s ** 2 for s in ses]
        m = sum(wi * v for wi, v in zip(w, vals)) / sum(w)
        best = min(range(len(ses)), key=ses.__getitem__)
        s, dof = ses[best], float(estimates[best].dof)
    if log:
        return Ratio(math.exp(m), math.exp(m) * s, dof)
    return Estimate(m, s, dof)


def _run_word(outcomes: list[str]) -> str:
    """The word for one series' measured outcomes, in the order of the condition."""
    holds = [i for i, o in enumerate(outcomes) if o == "holds"]
    if not holds:
        return "holds nowhere" if "fails" in outcomes else "unresolved"
    if len(holds) == len(outcomes):
        return "holds"
    if holds != list(range(holds[0], holds[-1] + 1)):
        return "holds in part"
    if holds[-1] == len(outcomes) - 1:
        return "holds from"
    return "holds up to" if holds[0] == 0 else "holds between"


def sweep_word(points: list[Point]) -> str:
    """The word for measured points: per series, then the series' common word ("holds in
    part" where their boundaries differ in kind; no points: unresolved)."""
    if not points:
        return "unresolved"
    words = set()
    for series in dict.fromkeys(p.series for p in points):
        mine = sorted((p for p in points if p.series == series), key=lambda p: p.at)
        words.add(_run_word([p.outcome for p in mine]))
    if len(words) == 1:
        return words.pop()
    if words <= {"holds nowhere", "unresolved"}:
        return "holds nowhere"
    return "holds in part"


def judge_over(claim_id: str, sweep: Mapping, *, learner: float | tuple[str, float],
               evidence: str, source: str = "live") -> Verdict:
    """The verdict of ``claim_id`` over a sweep of its condition (``Claim.condition``).

    ``sweep`` maps each value of the condition to its measurement (an ``Estimate``;
    ``verdicts.exact(x)`` for an exact value; None where it could not be measured), or maps
    series names (a second condition held fixed, such as "at 512 tokens") to such mappings.
    ``learner`` is the lesson's default point (``(series, value)`` with series), which must be in
    the sweep. The word follows the module docstring."""
    claim = _claim(claim_id)
    if claim.condition is None:
        raise ValueError(f"claim {claim_id!r} has no condition to sweep: use judge()")
    series_map = (sweep if sweep and all(isinstance(v, Mapping) for v in sweep.values())
                  else {"": sweep})
    points = []
    for series, values in series_map.items():
        for at, m in values.items():
            if m is not None and not isinstance(m, Estimate):
                raise ValueError(
                    f"sweep value at {claim.condition.name} {at} ({series or 'the sweep'}) must be "
                    f"an Estimate (value, se, dof), verdicts.exact(x) for an exact value, or None "
                    f"for a point not measured; got {type(m).__name__} {m!r}")
            value, se, dof = ((None, 0.0, math.inf) if m is None
                              else (float(m.value), float(m.se), float(m.dof)))
            points.append(Point(float(at), value, se, dof, claim.rule.judge(value, se, dof),
                                series))
    if len(points) < 2:
        raise ValueError(f"sweep must hold at least two points of {claim.condition.name}, "
                         f"got {len(points)}")
    series, at = learner if isinstance(learner, tuple) else ("", learner)
    mine = next((p for p in points if p.series == series and p.at == float(at)), None)
    if mine is None:
        raise ValueError(f"learner must be a point of the sweep, got {learner!r}; the sweep has "
                         f"{sorted({(p.series, p.at) for p in points})}")
    measured = [p for p in points if p.measured]
    _refuse_arithmetic(claim, [p.se for p in measured])
    word, pooled = _word(claim, measured)
    return Verdict(claim_id, word, mine.value, mine.se, evidence, mine.dof, tuple(points),
                   mine, source, pooled)


def _word(claim: Claim, measured: list[Point]) -> tuple[str, Estimate | None]:
    if not measured:
        return "unresolved", None
    outcomes = {p.outcome for p in measured}
    if "holds" not in outcomes or outcomes == {"holds"}:
        return sweep_word(measured), None
    # Some points hold and some do not: a boundary only if a holding point differs from a
    # non-holding one by more than noise (Bonferroni over the pairs compared).
    holding = [p for p in measured if p.outcome == "holds"]
    others = [p for p in measured if p.outcome != "holds"]
    pairs = len(holding) * len(others)
    confidence = 1 - (1 - claim.rule.confidence) / pairs
    log = claim.rule.log
    if any(differs(h.estimate(claim), o.estimate(claim), log=log, confidence=confidence)
           for h in holding for o in others):
        return sweep_word(measured), None
    pooled = pool([p.estimate(claim) for p in measured], log=log)
    outcome = claim.rule.judge(pooled.value, pooled.se, pooled.dof)
    word = {"holds": "holds", "fails": "holds nowhere", "inconclusive": "unresolved"}[outcome]
    return word, pooled


def nearest(points, x: float) -> float:
    """The point of a sweep nearest to ``x`` (``points``: the condition's values, or a mapping
    keyed by them): where the learner's own setting sits in a sweep measured elsewhere, such as
    committed evidence. A tie goes to the smaller point."""
    xs = sorted(points)
    if not xs:
        raise ValueError("points must hold at least one point of the sweep")
    return min(xs, key=lambda p: abs(p - x))


@dataclass(frozen=True)
class Shown:
    """A demonstration as a lesson ran it: whether its exact check came out, and the numbers."""

    demonstration: str
    ok: bool
    numbers: str

    def as_dict(self) -> dict:
        return {"demonstration": self.demonstration, "ok": self.ok, "numbers": self.numbers}


def show(demo_id: str, *, ok: bool, numbers: str) -> Shown:
    """A demonstration as it came out here: ``ok``, its exact check's result; ``numbers``, what
    was compared, in words."""
    if demo_id not in DEMONSTRATIONS:
        raise ValueError(f"demo_id must be one of {sorted(DEMONSTRATIONS)}, got {demo_id!r}")
    return Shown(demo_id, bool(ok), numbers)
