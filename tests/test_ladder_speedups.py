"""Lesson 12's speed-ups with their errors, against hand computations."""
import math

import pytest

from course_lib.capstone import ladder_speedups as S
from course_lib.measure.verdicts import Estimate, fmt, speedup


def _point(name, **samples):
    return {"name": name, "samples": samples}


def test_a_paired_speedup_is_the_geometric_mean_of_per_repeat_ratios():
    base = _point("base", latency_b32_ms=[10.0, 12.0, 11.0])
    fast = _point("fast", latency_b32_ms=[5.0, 4.0, 5.5])
    e = S.rung_speedup(base, fast, "latency_b32_ms")
    logs = [math.log(2.0), math.log(3.0), math.log(2.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    value = math.exp(mean)                              # (2 * 3 * 2) ** (1/3) = 2.289...
    assert e == pytest.approx(Estimate(value, value * sd / math.sqrt(3), 2.0))
    assert e == speedup([10.0, 12.0, 11.0], [5.0, 4.0, 5.5])
    # drift that hits both alike cancels: the same ratio every repeat, no noise
    drift = S.rung_speedup(_point("b", test_set_s=[4.0, 8.0]), _point("f", test_set_s=[1.0, 2.0]), "test_set_s")
    assert drift.value == pytest.approx(4.0) and drift.se == pytest.approx(0.0)
    assert S.rung_speedup(base, base, "latency_b32_ms") == Estimate(1.0, 0.0, math.inf)


def test_an_unpaired_speedup_adds_relative_errors_in_quadrature():
    base = _point("base", train_epoch_s=[100.0, 110.0, 90.0, 100.0, 100.0]) | {"width_ordered": True}
    fast = _point("fast", train_epoch_s=[10.0, 12.0, 8.0]) | {"width_ordered": True}
    e = S.rung_speedup(base, fast, "train_epoch_s")
    # successive differences, by hand: base 10, -20, 10, 0; fast 2, -4
    ma, sa = 100.0, math.sqrt((100 + 400 + 100 + 0) / (2 * 4) / 5)
    mb, sb = 10.0, math.sqrt((4 + 16) / (2 * 2) / 3)
    assert e.value == pytest.approx(10.0)
    assert e.se == pytest.approx(10.0 * math.sqrt((sa / ma) ** 2 + (sb / mb) ** 2))
    assert e.dof == pytest.approx(2 * 2 ** 2 / (3 * 3 - 4))   # the smaller sample's
    one = S.rung_speedup(base, _point("once", train_epoch_s=[10.0]), "train_epoch_s")
    assert one.value == pytest.approx(10.0) and math.isinf(one.se)
    # fixed padding (not width-ordered): the plain standard error, n - 1 degrees of freedom
    plain = S.rung_speedup(_point("b", train_epoch_s=[100.0, 110.0, 90.0, 100.0, 100.0]), fast, "train_epoch_s")
    sa = math.sqrt(200 / 4) / math.sqrt(5)
    assert plain.se == pytest.approx(10.0 * math.sqrt((sa / 100) ** 2 + (sb / mb) ** 2))
    assert plain.dof == pytest.approx(2 * 2 ** 2 / (3 * 3 - 4))     # fast's, the smaller


def test_an_epoch_of_widths_is_not_noise():
    # bucketed steps by width: a steep trend (x1 to x8) with 2% noise; the plain spread calls
    # the trend noise, successive differences see mostly the noise
    import random
    rng = random.Random(0)
    widths = [1 + 7 * i / 15 for i in range(16)]
    slow = [w * (1 + 0.02 * rng.gauss(0, 1)) for w in widths]
    fast = [w / 2 * (1 + 0.02 * rng.gauss(0, 1)) for w in widths]
    plain = S.speedup(slow, fast, paired=False)
    ordered = S.speedup(slow, fast, paired=False, ordered=True)
    assert plain.value == ordered.value == pytest.approx(2.0, rel=0.03)
    assert ordered.se < plain.se / 4
    # without a trend the two estimate the same noise
    flat = [1 + 0.05 * rng.gauss(0, 1) for _ in range(400)]
    a = S.speedup(flat, flat[::-1], paired=False)
    b = S.speedup(flat, flat[::-1], paired=False, ordered=True)
    assert b.se == pytest.approx(a.se, rel=0.2)


def test_bad_input_names_the_metric_or_the_repeats():
    a, b = _point("a", test_set_s=[1.0, 2.0]), _point("b", test_set_s=[1.0])
    with pytest.raises(ValueError, match="metric"):
        S.rung_speedup(a, b, "size_bytes")
    with pytest.raises(ValueError, match="same rounds"):
        S.rung_speedup(a, b, "test_set_s")
    with pytest.raises(ValueError, match="no latency_b1_ms samples"):
        S.rung_speedup(_point("a", latency_b1_ms=[]), b, "latency_b1_ms")


def test_product_and_ratio_propagate_relative_errors():
    p = S.product([Estimate(2.0, 0.2, 4.0), Estimate(3.0, 0.6, 9.0)])
    assert p.value == pytest.approx(6.0) and p.dof == 4.0
    assert p.se == pytest.approx(6.0 * math.sqrt(0.1 ** 2 + 0.2 ** 2))
    r = S.ratio(Estimate(3.0, 0.3, 5.0), p)
    assert r.value == pytest.approx(0.5) and r.dof == 4.0
    assert r.se == pytest.approx(0.5 * math.sqrt(0.1 ** 2 + 0.1 ** 2 + 0.2 ** 2))


def test_the_multiply_check_and_the_targets_reach_every_outcome():
    assert S.multiply_call(Estimate(1.0, 0.01, 10.0)) == "roughly true"
    assert S.multiply_call(Estimate(0.5, 0.01, 10.0)) == "not true"
    assert S.multiply_call(Estimate(2.0, 0.01, 10.0)) == "not true"
    assert S.multiply_call(Estimate(0.8, 0.2, 2.0)) == "inconclusive"   # t(2) = 4.30 widens it
    assert S.multiply_call(Estimate(0.8, 0.2, 1e9)) == "inconclusive"
    assert S.target_call(Estimate(20.0, 1.0, 10.0), 15) == "met"
    assert S.target_call(Estimate(10.0, 1.0, 10.0), 15) == "not met"
    assert S.target_call(Estimate(16.0, 1.0, 2.0), 15) == "inconclusive"
    assert S.target_call(Estimate(16.0, math.inf, 1.0), 15) == "inconclusive"
    assert fmt(Estimate(12.34, 0.41, 3.0)) == "12.3× ± 1.3"   # 95%: t(3) = 3.18 x the SE
    assert fmt(Estimate(12.34, math.inf, 1.0)) == "12.3× (one sample)"
    assert fmt(Estimate(1.234, 0.041, 3.0), digits=2) == "1.23× ± 0.13"


def test_combined_call_reaches_every_outcome():
    assert S.combined_call(["roughly true", "roughly true"]) == "roughly true"
    assert S.combined_call(["roughly true", "not true"]) == "not true"
    assert S.combined_call(["roughly true", "inconclusive"]) == "inconclusive"
    with pytest.raises(ValueError, match="calls"):
        S.combined_call([])
