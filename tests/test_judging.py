"""A verdict's word from what its points show, its sentence and its map (measure.judging,
ui.verdicts): one test per word, noise that is not a condition, arithmetic refused."""
import math

import pytest

from course_lib.measure.claims import CLAIMS
from course_lib.measure.judging import (SWEEP_WORDS, Verdict, differs, judge, judge_over, pool,
                                        sweep_word)
from course_lib.measure.verdicts import Estimate, Ratio, exact
from course_lib.ui import verdicts as ui

SPEED = "dynamic_padding_faster"     # ratio >= 1.1 over batch size, log scale
ACC = "pruning_keeps_accuracy"       # change >= -1 point over the fine-tune budget
GROW = "activations_grow_with_length"   # exact counts allowed (exact_measurement)


def r(x, se=0.02, dof=9):
    return Ratio(x, se, dof)


def word(sweep, learner=None, claim=SPEED):
    return judge_over(claim, sweep, learner=learner or next(iter(sweep)), evidence="constructed")


def test_every_word_from_its_points():
    assert word({1: r(2.0), 8: r(1.8), 64: r(1.5)}).outcome == "holds"
    assert word({1: r(1.0), 8: r(1.5), 64: r(2.0)}).outcome == "holds from"
    assert word({1: r(2.0), 8: r(1.5), 64: r(1.0)}).outcome == "holds up to"
    assert word({1: r(1.0), 8: r(1.5), 64: r(1.0)}).outcome == "holds between"
    assert word({1: r(1.5), 8: r(1.0), 64: r(1.5)}).outcome == "holds in part"
    assert word({1: r(0.9), 8: r(1.0), 64: r(1.1, 0.3)}).outcome == "holds nowhere"
    assert word({1: r(1.1, 0.3), 8: r(1.05, 0.3)}).outcome == "unresolved"
    assert set(SWEEP_WORDS) >= {word({1: r(2.0), 8: r(1.5)}).outcome}


def test_no_boundary_word_without_a_holding_point():
    """06's soft targets read "depends" from inconclusive, inconclusive, fails: no point holds,
    so the word is "holds nowhere"; all inconclusive is "unresolved", never "depends"."""
    v = word({1: Estimate(0.5, 1.0, 4), 8: Estimate(-0.5, 1.0, 4), 64: Estimate(-5.0, 0.5, 4)},
             claim=ACC)
    assert v.outcome == "holds nowhere" and v.pooled is None
    assert "depends" not in {word({1: r(x), 2: r(y)}).outcome
                             for x in (0.5, 2.0) for y in (0.5, 2.0)}


def test_an_unmeasured_point_is_listed_apart_and_changes_nothing():
    v = word({1: r(2.0), 8: r(1.8), 64: None})
    assert v.outcome == "holds" and [p.at for p in v.unmeasured_points] == [64.0]
    assert "not measured at 64" in ui.sentence(v)
    mine = judge_over(SPEED, {1: r(2.0), 8: None}, learner=8, evidence="c")
    assert mine.outcome == "holds" and "was not measured" in ui.sentence(mine)
    assert judge_over(SPEED, {1: None, 8: None}, learner=1, evidence="c").outcome == "unresolved"


def test_points_that_agree_within_noise_are_pooled_not_a_condition():
    """08's stability: +0.84 ± 1.01, +1.29 ± 1.01, +0.86 ± 0.88 (95% half-widths) against a bar of
    +1 read "depends"; the three agree, so the word is the pooled result."""
    rule = CLAIMS[ACC].rule          # >= -1 point
    shifted = {32: Estimate(-0.9, 0.5), 64: Estimate(0.2, 0.5), 128: Estimate(-0.8, 0.45)}
    outcomes = [rule.judge(*e) for e in shifted.values()]
    assert "holds" in outcomes and len(set(outcomes)) > 1      # differing outcomes ...
    v = word(shifted, claim=ACC)
    assert v.pooled is not None and v.outcome in ("holds", "holds nowhere", "unresolved")
    expected = pool(list(shifted.values()), log=False)
    assert v.pooled == pytest.approx(expected)
    assert rule.judge(*expected) == {"holds": "holds", "holds nowhere": "fails",
                                     "unresolved": "inconclusive"}[v.outcome]
    assert "agree within noise" in ui.sentence(v)
    # ... while a difference far beyond the noise is a real boundary
    assert word({1: Estimate(-5.0, 0.3, 9), 8: Estimate(0.0, 0.3, 9)},
                claim=ACC).outcome == "holds from"


def test_pool_and_differs_match_hand_computations():
    e = pool([Estimate(1.0, 1.0, 4), Estimate(3.0, 0.5, 6)], log=False)
    assert e.value == pytest.approx((1 * 1 + 3 * 4) / 5)          # weights 1/se²: 1 and 4
    assert e.se == 0.5 and e.dof == 6                               # the best point's, no less
    g = pool([Ratio(2.0, 0.2, 4), Ratio(8.0, 0.8, 4)], log=True)   # equal relative errors
    assert g.value == pytest.approx(4.0) and isinstance(g, Ratio)
    # difference 2, se hypot(0.5, 0.5) = 0.707, t(0.975, 9) = 2.262: 1.6 < 2 resolved
    assert differs(Estimate(0.0, 0.5, 9), Estimate(2.0, 0.5, 9), log=False, confidence=0.95)
    assert not differs(Estimate(0.0, 0.5, 9), Estimate(1.0, 0.5, 9), log=False, confidence=0.95)
    assert differs(exact(1.0), exact(2.0), log=False, confidence=0.95)
    assert not differs(Estimate(1.0, math.inf, 1), Estimate(9.0, 0.1, 9), log=False,
                       confidence=0.95)


def test_arithmetic_is_refused_and_exact_values_are_explicit():
    with pytest.raises(ValueError, match="must be an Estimate"):
        judge_over(SPEED, {1: 1.0, 8: 2.0}, learner=1, evidence="c")       # a plain float
    with pytest.raises(ValueError, match="follows from arithmetic"):
        judge_over(SPEED, {1: exact(1.0), 8: exact(2.0)}, learner=1, evidence="c")
    with pytest.raises(ValueError, match="follows from arithmetic"):
        judge(SPEED, 2.0, se=0.0, evidence="c")
    assert CLAIMS[GROW].exact_measurement                                  # says why
    v = judge_over(GROW, {256: exact(1.2), 1024: exact(1.8)}, learner=256, evidence="c")
    assert v.outcome == "holds from"
    assert [c for c, claim in CLAIMS.items() if claim.exact_measurement] == [GROW]


@pytest.mark.parametrize("cid", sorted(c for c, claim in CLAIMS.items() if claim.condition))
def test_every_swept_claim_can_come_out_either_way(cid):
    """A swept claim's rule reaches holds and fails from numbers a sweep can produce: the sweep,
    not the set-up, decides."""
    rule = CLAIMS[cid].rule
    t, sign = rule.threshold, 1 if rule.direction == ">=" else -1
    step = max(abs(t), 1.0) / 2
    v = judge_over(cid, {1: Estimate(t - sign * step, step / 50, 9),
                         2: Estimate(t + sign * step, step / 50, 9)}, learner=1, evidence="c")
    assert [p.outcome for p in v.points] == ["fails", "holds"] and v.outcome == "holds from"


def test_the_sentence_is_short_and_names_the_boundary_and_the_learner():
    two_series = judge_over(SPEED, {"short reviews": {1: r(1.0), 8: r(1.5), 64: r(2.0)},
                                    "long reviews": {1: r(0.8), 8: r(0.9), 64: r(1.4)}},
                            learner=("short reviews", 8), evidence="c")
    for v in (two_series, word({1: r(1.0), 8: r(1.5), 64: r(2.0)}),
              word({1: r(0.9), 8: r(1.0), 64: r(1.1, 0.3)}),
              word({1: r(1.1, 0.3), 8: r(1.05, 0.3)})):
        text = ui.sentence(v)
        assert len(text.split()) <= 32, text
        assert "your point" in text
    text = ui.sentence(two_series)
    assert text.startswith("Holds from batch size 8 (short reviews) and from batch size 64 (long "
                           "reviews); your point at batch size 8, short reviews: 1.50×")
    two = judge_over(SPEED, {"int8 block, batch 1": {1: r(1.0), 8: r(1.5)},
                             "int8 block, batch 32": {1: r(1.5), 8: r(1.6)}},
                     learner=("int8 block, batch 32", 1), evidence="c")
    assert ui.sentence(two) == ("Holds from batch size 8 (batch 1) and everywhere (batch 32); your "
                                "point at batch size 1, batch 32: 1.50× (1.46–1.55), holds.")
    assert two_series.outcome == "holds from"
    nowhere = ui.sentence(word({1: r(0.9), 8: r(1.0), 64: r(1.1, 0.3)}))
    assert nowhere.startswith("Holds nowhere (fails at 1–8; unresolved at 64); "
                              "your point at batch size")
    ev = judge_over(SPEED, {1: r(1.0), 8: r(1.5)}, learner=8, evidence="c", source="data/x.json")
    assert "your point (evidence) at batch size 8" in ui.sentence(ev)
    assert ui.clause(ev) == "holds from batch size 8; at your point it holds"
    assert ui.clause(word({1: r(2.0), 8: r(1.8)})) == "holds at every point measured"
    assert ui.clause(word({1: r(1.1, 0.3), 8: r(1.05, 0.3)})).startswith("is unresolved: every")


def test_a_verdict_survives_its_results_file_and_draws_one_map():
    from course_lib.ui.plots import layout_problems

    v = judge_over(SPEED, {"a": {1: r(1.0), 8: r(1.5), 64: None}, "b": {1: r(0.8), 8: r(1.3)}},
                   learner=("a", 8), evidence="c")
    back = Verdict.from_dict(v.as_dict())
    assert back == v and ui.sentence(back) == ui.sentence(v)
    fig = ui.map_figure(v, reference=[word({1: r(1.2), 8: r(1.6)})])
    ax = fig.axes[0]
    assert "\nverdict: holds from batch size 8 (a)" in ax.get_title() and ax.get_xlabel()
    assert not layout_problems(fig)
    table = ui.points_table(v)
    assert table.count("\n") == 2 + 4 and "not measured" in table and "(your point)" in table
    pooled = word({1: Estimate(-0.5, 1.0, 4), 8: Estimate(0.5, 1.0, 4)}, claim=ACC)
    assert Verdict.from_dict(pooled.as_dict()).pooled == pytest.approx(pooled.pooled)
    assert ui.recorded({"claim": "no_longer_a_claim", "outcome": "depends"}) is None
    assert ui.recorded_sentence({"claim": "no_longer_a_claim", "outcome": "depends"}) == "depends"
    with pytest.raises(ValueError, match="one point"):
        ui.map_figure(judge(SPEED, 1.5, se=0.1, evidence="c"))


def test_many_series_name_the_learners_and_count_the_others():
    v = judge_over(SPEED, {"a (x)": {1: r(1.0), 8: r(1.5)}, "b": {1: r(0.5), 8: r(0.6)},
                           "c": {1: r(1.5), 8: r(1.6)}, "d": {1: r(1.5), 8: r(0.6)}},
                   learner=("a (x)", 8), evidence="c")
    text = ui.sentence(v)
    assert text.startswith("For a, holds from batch size 8 (2 of 3 other series hold somewhere)")
    assert len(text.split()) <= 32


def test_series_that_disagree_on_the_kind_of_boundary_hold_in_part():
    assert sweep_word([]) == "unresolved"
    v = judge_over(SPEED, {"a": {1: r(1.0), 8: r(1.5)}, "b": {1: r(1.5), 8: r(1.0)}},
                   learner=("a", 1), evidence="c")
    assert v.outcome == "holds in part"


def test_the_reference_runs_sentences_are_short():
    """Every verdict of every committed reference run, drawn anew from its points, reads in
    about 30 words (a sentence of the map, not the map in words)."""
    from course_lib.tools.saved_runs import load_runs

    long = {}
    for run, data in load_runs().items():
        for d in (v for lesson in data["lessons"].values() for v in lesson.get("verdicts", [])):
            v = ui.recorded(d)
            if v is not None and len(ui.sentence(v).split()) > 32:
                long[f"{run}: {d['claim']}"] = ui.sentence(v)
    assert not long, long
