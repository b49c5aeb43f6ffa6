"""Lesson 04's regression check: every recipe trains, a diverged run counts, not vanishes."""
import math

import pytest

from course_lib.precision import regression as pr
from course_lib.measure.claims import judge
from course_lib.core.data import CorpusConfig, load_corpus


def run_(recipe, seed, mae, diverged=None):
    return pr.RegressionRun(recipe, seed, mae, 0, diverged)


def test_ratio_is_the_per_seed_mean_and_a_diverged_run_is_infinitely_worse():
    runs = {"fp32": [run_("fp32", s, m) for s, m in enumerate([0.5, 0.4, 0.6])],
            "fp16": [run_("fp16", s, m) for s, m in enumerate([0.55, 0.4, 0.66])],
            "fp16-pure": [run_("fp16-pure", 0, math.inf, 1), run_("fp16-pure", 1, 0.4),
                          run_("fp16-pure", 2, 0.6)]}
    est = pr.ratio_to_fp32(runs, "fp16")
    assert est.value == pytest.approx((1.1 + 1.0 + 1.1) / 3) and est.dof == 2
    pure = pr.ratio_to_fp32(runs, "fp16-pure")
    assert pure.value == math.inf
    assert judge("fp16_bad_for_regression", pure.value, se=pure.se, dof=pure.dof,
                 evidence="constructed").outcome == "holds"
    assert judge("fp16_bad_for_regression", est.value, se=est.se, dof=est.dof,
                 evidence="constructed").outcome == "inconclusive"   # 3 seeds, t = 4.30


def test_every_recipe_trains_and_divergence_is_recorded_consistently():
    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0, n_test=64), scale=0.02)
    runs = pr.run(easy, seeds=[0], steps=3, length=24)
    assert set(runs) == set(pr.RECIPES)
    assert all(len(v) == 1 for v in runs.values())
    assert math.isfinite(runs["fp32"][0].mae) and runs["fp32"][0].diverged_at is None
    for r in (v[0] for v in runs.values()):
        assert (r.diverged_at is None) == math.isfinite(r.mae), r
    mean, floor = pr.predict_mean_mae(easy)
    assert 1 <= mean <= 5 and floor > 0
    with pytest.raises(ValueError, match="recipe must be one of"):
        pr.train_one(easy, "fp8", seed=0, steps=1, length=8)
    with pytest.raises(ValueError, match="seeds"):
        pr.run(easy, seeds=[], steps=1, length=8)
