"""Lesson 04's regression check: every recipe trains, a diverged run counts, not vanishes."""
import math

import pytest
import torch

from course_lib.precision import regression as pr
from course_lib.measure.judging import judge
from course_lib.core.data import CorpusConfig, load_corpus


def run_(recipe, seed, mae, diverged=None):
    return pr.RegressionRun(recipe, seed, mae, 0, diverged)


def test_ratio_is_the_geometric_mean_over_seeds_and_a_diverged_run_is_infinitely_worse():
    runs = {"fp32": [run_("fp32", s, m) for s, m in enumerate([0.5, 0.4, 0.6])],
            "fp16": [run_("fp16", s, m) for s, m in enumerate([0.55, 0.4, 0.66])],
            "fp16-pure": [run_("fp16-pure", 0, math.inf, 1), run_("fp16-pure", 1, 0.4),
                          run_("fp16-pure", 2, 0.6)]}
    est = pr.ratio_to_fp32(runs, "fp16")
    assert est.value == pytest.approx((1.1 * 1.0 * 1.1) ** (1 / 3)) and est.dof == 2
    pure = pr.ratio_to_fp32(runs, "fp16-pure")
    assert pure.value == math.inf
    assert judge("fp16_bad_for_regression", pure.value, se=pure.se, dof=pure.dof,
                 evidence="constructed").outcome == "holds"
    assert judge("fp16_bad_for_regression", est.value, se=est.se, dof=est.dof,
                 evidence="constructed").outcome == "inconclusive"   # 3 seeds, t = 4.30


def test_every_recipe_trains_and_divergence_is_recorded_consistently():
    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0, n_test=64),
                       scale=0.02)
    runs = pr.run(easy, recipes=pr.RECIPES, seeds=[0], steps=3, length=24)
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


def test_offset_shifts_every_target_and_a_16_bit_prediction_never_beats_the_rounding_floor():
    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0, n_test=64),
                       scale=0.02)
    shifted = pr.with_offset(easy, 1024)
    assert [r.rating for r in shifted.test.reviews] == [r.rating + 1024 for r in easy.test.reviews]
    assert [r.text for r in shifted.train.reviews] == [r.text for r in easy.train.reviews]
    assert pr.with_offset(easy, 0) is easy
    with pytest.raises(ValueError, match="offset must be"):
        pr.with_offset(easy, -1)
    # rounding_floor by hand: FP16 keeps multiples of 2 in [2048, 4096), ties to even
    assert pr.rounding_floor([2049.0, 2050.0, 2051.5], "fp16") == pytest.approx((1 + 0 + 0.5) / 3)
    assert pr.rounding_floor([3.0], "bf16") == 0.0
    targets = [r.rating for r in shifted.test.reviews]
    floor = pr.rounding_floor(targets, "fp16")
    assert floor > 0.1 > pr.rounding_floor([r.rating for r in easy.test.reviews], "fp16")
    # an FP16 prediction sits on FP16's grid, so it misses each target at least by the rounding
    run = pr.train_one(easy, "fp16", seed=0, steps=2, length=24, offset=1024)
    assert run.offset == 1024.0 and run.mae >= floor - 1e-6
    fp32 = pr.train_one(easy, "fp32", seed=0, steps=2, length=24, offset=1024)
    assert fp32.mae < 2.0       # the head starts at the mean: no 1,024-star bias to learn
    with pytest.raises(ValueError, match="dtype must be"):
        pr.rounding_floor([1.0], "fp8")


def test_pure_fp16_adamw_breaks_on_epsilon_not_on_regression():
    from course_lib.core.model import build_model
    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0, n_test=64),
                       scale=0.02)
    from course_lib.core.batching import make_loader
    batch = next(iter(make_loader(easy.train, batch_size=8, seed=0, max_length=24)))
    for task, n in (("regression", 1), ("classification", 2)):
        model = build_model(len(easy.vocab), preset="student", n_outputs=n, seed=0)
        before = [p.clone() for p in model.parameters()]
        default = pr.half_adamw_step(model, batch, eps=1e-8, task=task)
        assert default["eps_in_fp16"] == 0.0 and default["nonfinite"] > 0, task
        assert pr.half_adamw_step(model, batch, eps=1e-4, task=task)["nonfinite"] == 0, task
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # a copy stepped
