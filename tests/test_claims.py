"""The claims registry and its verdict rules: every outcome reachable, noise respected."""
import math
from pathlib import Path

import pytest

from course_lib.measure.claims import ARTICLES, CLAIMS
from course_lib.measure.judging import judge
from course_lib.measure.results import Recorder
from course_lib.measure.verdicts import (OUTCOMES, Estimate, Rule, accuracy_se, difference_se,
                                         mean_and_se, speedup)

ROOT = Path(__file__).resolve().parents[1]


def _evidence_for(rule: Rule) -> dict[str, tuple[float | None, float]]:
    """(value, se) that must give each outcome under ``rule``, built from its threshold."""
    t, sign = rule.threshold, 1 if rule.direction == ">=" else -1
    step = max(abs(t), 1.0)
    return {"holds": (t + sign * step, step / 100), "fails": (t - sign * step, step / 100),
            "inconclusive": (t + sign * step, step)}   # the noise straddles the threshold


@pytest.mark.parametrize("cid", sorted(CLAIMS))
def test_every_rule_can_give_every_outcome(cid):
    for outcome, (value, se) in _evidence_for(CLAIMS[cid].rule).items():
        assert judge(cid, value, se=se, evidence="constructed").outcome == outcome
    assert judge(cid, None, se=0.0, evidence="not measured").outcome == "inconclusive"
    assert judge(cid, math.nan, se=0.0, evidence="not measured").outcome == "inconclusive"


@pytest.mark.parametrize("cid", sorted(CLAIMS))
def test_every_claim_is_complete_and_names_a_real_lesson(cid):
    c = CLAIMS[cid]
    assert c.article in ARTICLES and c.original and c.english and c.rule.quantity
    assert (ROOT / "notebooks" / f"{c.lesson}.ipynb").exists(), c.lesson


def test_rule_boundaries_and_errors():
    r = Rule("speed-up", ">=", 1.2)
    assert r.judge(1.2) == "holds" and r.judge(1.19) == "fails"
    assert r.judge(1.3, 0.04) == "holds" and r.judge(1.3, 0.06) == "inconclusive"
    assert r.judge(1.1, 0.04) == "fails" and r.judge(1.1, 0.06) == "inconclusive"
    lo = Rule("error", "<=", 0.0)
    assert lo.judge(0) == "holds" and lo.judge(1) == "fails"
    # a diverged run (infinite error) is beyond any threshold; NaN or unknown noise decide nothing
    assert (r.judge(math.inf) == "holds" and lo.judge(math.inf) == "fails"
            and r.judge(-math.inf) == "fails")
    assert r.judge(math.nan) == "inconclusive" and r.judge(math.inf, math.inf) == "inconclusive"
    assert "≥ 1.2" in r.text() and "Student's t" in r.text()
    with pytest.raises(ValueError, match="direction"):
        Rule("x", ">", 1.0)
    with pytest.raises(ValueError, match="se must be"):
        r.judge(1.0, -1.0)
    with pytest.raises(ValueError, match="claim_id must be one of"):
        judge("no_such_claim", 1.0, se=0.1, evidence="")
    assert set(OUTCOMES) == {"holds", "fails", "inconclusive"}


def test_noise_helpers_match_hand_computations():
    assert accuracy_se(0.5, 100) == pytest.approx(0.05)
    assert difference_se(0.03, 0.04) == pytest.approx(0.05)
    assert mean_and_se([2.0, 4.0]) == pytest.approx((3.0, 1.0, 1.0))  # stdev sqrt(2) / sqrt(2)
    assert mean_and_se([5.0]) == (5.0, math.inf, 1.0)     # one sample: noise unknown
    assert Rule("x", ">=", 1.0).judge(*mean_and_se([5.0])) == "inconclusive"
    # ratios 2 and 3: geometric mean sqrt(6); the log-ratios' standard error is ln(1.5) / 2
    assert speedup([4.0, 6.0], [2.0, 2.0]) == pytest.approx(
        (math.sqrt(6), math.sqrt(6) * math.log(1.5) / 2, 1.0))
    assert speedup([2.0, 1.0], [1.0, 2.0]).value == pytest.approx(1.0)   # 2x then 0.5x: none
    # unpaired: the ratio of the means (of the totals they stand for)
    assert speedup([10.0, 30.0], [5.0], paired=False).value == pytest.approx(4.0)
    from course_lib.measure.verdicts import quotient
    q = quotient(Estimate(6.0, 0.3, 4), Estimate(2.0, 0.2, 9))   # relative errors 5% and 10%
    assert q.value == pytest.approx(3.0) and q.se == pytest.approx(3.0 * math.hypot(0.05, 0.1))
    assert q.dof == 4 and q.log
    with pytest.raises(ValueError, match="as many repeats"):
        speedup([1.0], [1.0, 2.0])
    e = Estimate(1.5, 0.1, 2.0)                           # "±" is the 95% half-width: t(2) = 4.30
    assert f"{e:.2f×}" == "1.50× ± 0.43" and f"{Estimate(-1.0, 0.5):+.1f}" == "-1.0 ± 1.0"
    assert (f"{Estimate(3.0, 0.0):.1f}" == "3.0"
            and f"{Estimate(3.0, math.inf, 1.0):.1f}" == "3.0 (one sample)")
    with pytest.raises(ValueError):
        accuracy_se(1.5, 10)


def test_recorder_keeps_one_verdict_per_claim_and_only_known_units():
    rec = Recorder("01_padding", smoke=True)
    rec.verdict(judge("dynamic_padding_faster", 2.0, se=0.01, evidence="first"))
    v = judge("dynamic_padding_faster", 1.0, se=0.01, evidence="second")
    assert rec.verdict(v) is None                          # a statement: nothing to print
    assert [v["evidence"] for v in rec.payload()["verdicts"]] == ["second"]
    assert rec.payload()["verdicts"][0]["outcome"] == "fails"
    with pytest.raises(ValueError, match="unit of 'speed' must be one of"):
        rec.record("speed", 2.0, "times")
    assert rec.record("gain", -1.5, "points") == -1.5      # signed, never clamped
    assert rec.record("sqnr", 31.0, "dB") == 31.0
    got = rec.record("count_of_things", 3, "count")
    assert got == 3 and f"{got}" == "3" and got * 2 == 6          # a count stays whole
    assert f"{rec.record('ratio', 0.5, 'fraction')}" == "0.5"
    assert rec.payload()["results"][-2]["value"] == 3.0            # stored as a number either way
    assert hasattr(got, "_ipython_display_") and got._ipython_display_() is None   # shows nothing


def test_paired_accuracy_change_matches_a_hand_count():
    from course_lib.measure.verdicts import paired_accuracy_change

    before = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1]
    after = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1]    # one broken, two fixed: +1 of 10 = +10 points
    diff, se, dof = paired_accuracy_change(before, after)
    d = [0, 0, 0, -1, 0, 0, 1, 1, 0, 0]
    var = sum((x - 0.1) ** 2 for x in d) / 9
    assert diff == pytest.approx(10.0) and se == pytest.approx(100 * math.sqrt(var / 10))
    assert dof == 9                                                       # 10 paired items
    same = paired_accuracy_change([1, 0, 1] * 100, [1, 0, 1] * 100)   # identical on 300 examples
    assert same.value == 0.0 and same.half_width == pytest.approx(100 * 3 / 300)   # rule of three
    one = paired_accuracy_change([1], [1])                   # one example decides nothing
    assert Rule("change", ">=", -1.0).judge(*one) == "inconclusive"
    with pytest.raises(ValueError, match="equally long"):
        paired_accuracy_change([1], [1, 0])


@pytest.mark.parametrize("dof, table", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776),
                                        (9, 2.262), (29, 2.045), (math.inf, 1.960)])
def test_t_quantile_matches_the_printed_table(dof, table):
    from course_lib.measure.verdicts import t_quantile
    assert t_quantile(0.975, dof) == pytest.approx(table, abs=1e-3)


def test_few_seeds_earn_a_wide_interval_where_2_se_would_have_called_it():
    """Three seeds, a +3.5 ± 1.6 point difference (lesson 02's convergence run): 2 SE would say
    it clears 0; Student's t with 2 degrees of freedom (4.30) says inconclusive."""
    est = mean_and_se([1.7, 2.1, 6.7])
    assert (est.dof == 2 and est.value == pytest.approx(3.5)
            and est.se == pytest.approx(1.6, abs=0.01))
    rule = Rule("difference (points)", ">=", 0.0)
    assert est.value - 2 * est.se > 0                        # the old rule would have called it
    assert rule.judge(*est) == "inconclusive"
    assert rule.judge(est.value, est.se, dof=1e6) == "holds"   # the same numbers from a big sample
    with pytest.raises(ValueError, match="dof"):
        rule.judge(1.0, 0.1, dof=0)


def test_difference_call_reaches_gain_loss_and_noise():
    from course_lib.measure.verdicts import Estimate, difference_call
    assert difference_call(Estimate(3.0, 1.0, 1e9)) == "a gain"
    assert difference_call(Estimate(-3.0, 1.0, 1e9)) == "a loss"
    assert difference_call(Estimate(3.0, 1.0, 2.0)) == "within the noise"    # t(0.975, 2) = 4.30
    assert difference_call(Estimate(3.0, float("inf"), 1.0)) == "within the noise"


def test_demonstrations_are_apart_from_claims_and_show_their_check():
    from course_lib.measure.claims import DEMONSTRATIONS
    from course_lib.measure.judging import show
    from course_lib.ui.verdicts import demonstration_markdown
    assert not set(DEMONSTRATIONS) & set(CLAIMS)
    for d in DEMONSTRATIONS.values():
        assert d.check and (ROOT / "notebooks" / f"{d.lesson}.ipynb").exists()
    ok = show("float_layouts", ok=True, numbers="3 of 3")
    assert "**Shown.**" in demonstration_markdown(ok) and "3 of 3" in demonstration_markdown(ok)
    assert "bug" in demonstration_markdown(show("float_layouts", ok=False, numbers="2 of 3"))
    assert "**Formula:**" in demonstration_markdown(show("pruning_shrinks_model", ok=True,
                                                         numbers="x"))
    with pytest.raises(ValueError, match="demo_id must be one of"):
        show("no_such_fact", ok=True, numbers="")
    rec = Recorder("03_floating_point", smoke=True)
    rec.demonstration(show("float_layouts", ok=False, numbers="first"))
    rec.demonstration(ok)
    assert rec.payload()["demonstrations"] == [ok.as_dict()] and rec.payload()["verdicts"] == []


def test_a_ratio_is_judged_and_printed_on_the_log_scale():
    from course_lib.measure.verdicts import Ratio, Rule, speedup, t_quantile
    # every repeat ran faster, but noisily: the symmetric interval (4.93 ± 8.7) would reach below 0
    e = speedup([10, 12, 30], [2, 5, 3])
    assert isinstance(e, Ratio) and e.log
    lo, hi = e.interval
    f = math.exp(t_quantile(0.975, 2) * e.se / e.value)
    assert (lo, hi) == pytest.approx((e.value / f, e.value * f)) and lo > 0
    assert math.log(e.value) == pytest.approx((math.log(lo) + math.log(hi)) / 2)
    assert f"{e:.2f×}" == f"{e.value:.2f}× ({lo:.2f}–{hi:.2f})"
    assert e.errors == pytest.approx((e.value - lo, hi - e.value))
    x, se, dof = e                       # still unpacks as (value, se, dof)
    linear, ratio = Rule("q", ">=", 1.1), Rule("q", ">=", 1.1, log=True)
    tight = Ratio(2.0, 0.3, 4)           # linear 2 ± 0.83: clears 1.1; log: 2 ×/÷ 1.52, clears too
    assert linear.judge(*tight) == ratio.judge(*tight) == "holds"
    skew = Ratio(3.0, 1.0, 4)            # linear: 3 ± 2.78 straddles 1.1; log: 3 / 2.53 = 1.19
                                         # clears it
    assert linear.judge(*skew) == "inconclusive" and ratio.judge(*skew) == "holds"
    assert "log scale" in ratio.text() and "log scale" not in linear.text()
    with pytest.raises(ValueError, match="threshold > 0"):
        Rule("q", ">=", 0.0, log=True)


def test_nearest_point_of_a_sweep():
    from course_lib.measure.judging import nearest
    assert nearest([4, 16, 64], 20) == 16 and nearest({4: "a", 64: "b"}, 40) == 64
    assert nearest([2, 6], 4) == 2   # a tie goes to the smaller point
    with pytest.raises(ValueError, match="points"):
        nearest([], 3)
