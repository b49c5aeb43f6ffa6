"""The claims registry and its verdict rules: every outcome reachable, noise respected."""
import math
from pathlib import Path

import pytest

from course_lib.claims import ARTICLES, CLAIMS, judge
from course_lib.results import Recorder
from course_lib.verdicts import (OUTCOMES, Rule, accuracy_se, difference_se, mean_and_se,
                                 paired_ratio)

ROOT = Path(__file__).resolve().parents[1]


def _evidence_for(rule: Rule) -> dict[str, tuple[float | None, float]]:
    """(value, se) that must give each outcome under ``rule``, built from its threshold."""
    t, sign = rule.threshold, 1 if rule.direction == ">=" else -1
    step = max(abs(t), 1.0)
    return {"holds": (t + sign * step, 0.0), "fails": (t - sign * step, 0.0),
            "inconclusive": (t + sign * step, step)}   # the noise straddles the threshold


@pytest.mark.parametrize("cid", sorted(CLAIMS))
def test_every_rule_can_give_every_outcome(cid):
    for outcome, (value, se) in _evidence_for(CLAIMS[cid].rule).items():
        assert judge(cid, value, se=se, evidence="constructed").outcome == outcome
    assert judge(cid, None, evidence="not measured").outcome == "inconclusive"
    assert judge(cid, math.nan, evidence="not measured").outcome == "inconclusive"


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
    assert "≥ 1.2" in r.text() and "standard errors" in r.text()
    with pytest.raises(ValueError, match="direction"):
        Rule("x", ">", 1.0)
    with pytest.raises(ValueError, match="se must be"):
        r.judge(1.0, -1.0)
    with pytest.raises(ValueError, match="claim_id must be one of"):
        judge("no_such_claim", 1.0, evidence="")
    assert set(OUTCOMES) == {"holds", "fails", "inconclusive"}


def test_noise_helpers_match_hand_computations():
    assert accuracy_se(0.5, 100) == pytest.approx(0.05)
    assert difference_se(0.03, 0.04) == pytest.approx(0.05)
    assert mean_and_se([2.0, 4.0]) == pytest.approx((3.0, 1.0))      # stdev sqrt(2) / sqrt(2)
    assert mean_and_se([5.0]) == (5.0, math.inf)     # one sample: noise unknown
    assert Rule("x", ">=", 1.0).judge(*mean_and_se([5.0])) == "inconclusive"
    assert paired_ratio([4.0, 6.0], [2.0, 2.0]) == pytest.approx((2.5, 0.5))  # ratios 2 and 3
    with pytest.raises(ValueError, match="as many repeats"):
        paired_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        accuracy_se(1.5, 10)


def test_recorder_keeps_one_verdict_per_claim_and_only_known_units():
    rec = Recorder("01_padding", smoke=True)
    rec.verdict(judge("fixed_size_inputs", 1, evidence="first"))
    rec.verdict(judge("fixed_size_inputs", 0, evidence="second"))
    assert [v["evidence"] for v in rec.payload()["verdicts"]] == ["second"]
    assert rec.payload()["verdicts"][0]["outcome"] == "fails"
    with pytest.raises(ValueError, match="unit of 'speed' must be one of"):
        rec.record("speed", 2.0, "times")
    assert rec.record("gain", -1.5, "points") == -1.5      # signed, never clamped
    assert rec.record("sqnr", 31.0, "dB") == 31.0


def test_paired_accuracy_change_matches_a_hand_count():
    from course_lib.verdicts import paired_accuracy_change

    before = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1]
    after = [1, 1, 1, 0, 0, 0, 1, 1, 1, 1]    # one broken, two fixed: +1 of 10 = +10 points
    diff, se = paired_accuracy_change(before, after)
    d = [0, 0, 0, -1, 0, 0, 1, 1, 0, 0]
    var = sum((x - 0.1) ** 2 for x in d) / 9
    assert diff == pytest.approx(10.0) and se == pytest.approx(100 * math.sqrt(var / 10))
    assert paired_accuracy_change([1, 0, 1], [1, 0, 1]) == (0.0, 0.0)   # identical: no noise
    with pytest.raises(ValueError, match="equally long"):
        paired_accuracy_change([1], [1, 0])
