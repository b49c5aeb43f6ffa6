"""Lesson 14's speed-ups with their errors, against hand computations."""
import math
import statistics

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
    drift = S.rung_speedup(_point("b", test_set_s=[4.0, 8.0]), _point("f", test_set_s=[1.0, 2.0]),
                           "test_set_s")
    assert drift.value == pytest.approx(4.0) and drift.se == pytest.approx(0.0)
    assert S.rung_speedup(base, base, "latency_b32_ms") == Estimate(1.0, 0.0, math.inf)


def test_an_unpaired_speedup_adds_relative_errors_in_quadrature():
    base = _point("base", train_epoch_s=[100.0, 110.0, 90.0, 100.0, 100.0])
    fast = _point("fast", train_epoch_s=[10.0, 12.0, 8.0])
    e = S.rung_speedup(base, fast, "train_epoch_s")
    ma, sa = 100.0, math.sqrt(200 / 4) / math.sqrt(5)
    mb, sb = 10.0, math.sqrt(8 / 2) / math.sqrt(3)
    assert e.value == pytest.approx(10.0)
    assert e.se == pytest.approx(10.0 * math.sqrt((sa / ma) ** 2 + (sb / mb) ** 2))
    assert e.dof == 2.0                                 # the smaller sample's n - 1
    one = S.rung_speedup(base, _point("once", train_epoch_s=[10.0]), "train_epoch_s")
    assert one.value == pytest.approx(10.0) and math.isinf(one.se)


def test_an_epoch_of_many_widths_is_fitted_not_averaged():
    # bucketed steps over widths 20..250 (a x10 spread in cost) with 2% timing noise: the epoch
    # comes from the fit over every width, its error from the noise, not from the spread
    import random
    from course_lib.measure.verdicts import regression_total
    rng = random.Random(0)
    cost = lambda w: 0.01 + 0.001 * w + 4e-6 * w * w         # noqa: E731
    epoch = [rng.randint(20, 250) for _ in range(200)]
    x = sorted(epoch)[12::25]                                  # 8 widths, quantiles
    steps = [cost(w) * (1 + 0.02 * rng.gauss(0, 1)) * len(epoch) for w in x]   # scaled as measured
    point = {"name": "b", "samples": {"train_epoch_s": steps},
             "train_design": {"x": x, "population": epoch}}
    e = S.epoch_estimate(point)
    ref = regression_total([t / len(epoch) for t in steps], x, epoch)
    assert (e.value, e.se, e.dof) == (pytest.approx(ref.value, rel=1e-9),
                                      pytest.approx(ref.se, rel=1e-6), ref.dof)
    assert e.value == pytest.approx(sum(map(cost, epoch)), rel=0.03)
    plain = S.epoch_estimate({"name": "p", "samples": {"train_epoch_s": steps}})
    assert e.se < plain.se / 5                                  # the plain error counts the widths
    base = _point("base",
                  train_epoch_s=[10 * sum(map(cost, epoch))] * 2 + [10.5 * sum(map(cost, epoch))])
    r = S.rung_speedup(base, point, "train_epoch_s")    # fixed padding's plain mean over the fit
    assert r.value == pytest.approx(statistics.fmean(base["samples"]["train_epoch_s"]) / e.value)
    assert r.dof == 2.0                                   # the base's n - 1, fewer than the fit's 5
    few_widths = {**point, "train_design": {"x": [x[0]] * 4 + [x[1]] * 4, "population": epoch}}
    assert math.isinf(S.epoch_estimate(few_widths).se)   # two widths cannot fit a quadratic


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
    from course_lib.measure.verdicts import quotient
    r = quotient(Estimate(3.0, 0.3, 5.0), p)
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


def test_regression_total_models_width_and_keeps_the_noise():
    import random
    from course_lib.measure.verdicts import regression_total
    rng = random.Random(1)
    cost = lambda w: 0.05 + 0.002 * w + 1e-5 * w * w          # noqa: E731  a step by width
    epoch = [rng.randint(20, 250) for _ in range(300)]          # every batch width of an epoch
    x = sorted(epoch)[::300 // 8][:8]                           # 8 widths over the range
    exact = regression_total([cost(w) for w in x], x, epoch)
    assert exact.value == pytest.approx(sum(map(cost, epoch)), rel=1e-9) and exact.se < 1e-9
    noisy = [cost(w) * (1 + 0.02 * rng.gauss(0, 1)) for w in x]
    e = regression_total(noisy, x, epoch)
    assert e.dof == 5 and e.value == pytest.approx(sum(map(cost, epoch)), rel=0.05)
    assert 0.002 < e.se / e.value < 0.03                        # about the 2% noise, not the x10
                                                                # width spread
    few = regression_total([1.0, 2.0], [10, 20], epoch)
    assert few.value == pytest.approx(1.5 * 300) and math.isinf(few.se)
    with pytest.raises(ValueError, match="one value each"):
        regression_total([1.0], [1, 2], epoch)


def test_regression_ratio_recovers_the_epochs_ratio_and_its_noise():
    """An epoch's speed-up from one fit of sampled steps (lesson 02's pool sweep): exact without
    noise; with noise, its standard error matches the spread over repeated samples."""
    import random
    import statistics

    from course_lib.measure.verdicts import Ratio, regression_ratio, regression_total

    def cost(w):
        return 1e-3 + 2e-5 * w + 1e-8 * w * w

    rng = random.Random(0)
    slow, fast = ([rng.randint(300, 512) for _ in range(100)],
                  [rng.randint(20, 200) for _ in range(100)])
    x = [rng.randint(20, 512) for _ in range(16)]
    exact = regression_ratio([cost(w) for w in x], x, slow, fast)
    assert isinstance(exact, Ratio) and exact.se < 1e-9
    assert exact.value == pytest.approx(sum(map(cost, slow)) / sum(map(cost, fast)))
    draws = []
    for _ in range(300):
        t = [cost(w) * (1 + rng.gauss(0, 0.05)) for w in x]
        draws.append(regression_ratio(t, x, slow, fast))
        assert draws[-1].value == pytest.approx(regression_total(t, x, slow).value
                                                / regression_total(t, x, fast).value)
    spread = statistics.stdev(d.value for d in draws)
    assert 0.9 < statistics.fmean(d.se for d in draws) / spread < 1.8   # HC3: errs wide, not narrow
    crude = regression_ratio([1.0, 2.0], [10, 20], slow, fast)                # too few to fit
    assert crude.se == math.inf and crude.value == pytest.approx(sum(slow) / sum(fast))
    wild = regression_ratio([1.0, -5.0, 1.0, 9.0], [20, 100, 300, 512], slow, fast)
    assert wild.se == math.inf                                # a negative epoch: no fit, no error
