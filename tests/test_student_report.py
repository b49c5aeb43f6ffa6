"""Lesson 06's tables and timings: checked against hand computations."""
import math

import pytest
import torch

from course_lib.distill import report as sr
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.measure.verdicts import speedup


def _runs(cells):
    return [{"student": s, "arm": a, "seed": k, "test_accuracy": v}
            for (s, a), vals in cells.items() for k, v in enumerate(vals)]


def test_effect_lines_reach_gain_loss_and_noise_by_a_t_interval():
    runs = _runs({("half", "scratch"): [0.80, 0.82, 0.81],
                  ("half", "distilled"): [0.85, 0.86, 0.86],         # +5, +4, +5: a gain
                  ("half", "hard_labels"): [0.90, 0.70, 0.85],       # noisy
                  ("half", "mse"): [0.80, 0.81, 0.80]})              # -5, -5, -6: a loss
    lines = {what: (e, call) for what, e, call in sr.effect_lines(runs)}
    kl = lines["distillation on the random-initialised student: KL vs scratch"]
    assert kl[0].value == pytest.approx(14 / 3) and kl[1] == "a gain"
    assert lines["the loss: logit MSE vs KL, same alpha and data"][1] == "a loss"
    assert lines["the extra data: the teacher's top class on the transfer set vs scratch"][1] == \
        "within the seed noise"
    assert not any("hidden" in w for w in lines)          # a cell no run has is left out
    # 2 SE would call +1.0 ± 0.46 (three seeds) a gain; Student's t with 2 dof (4.30) does not
    close = _runs({("half", "scratch"): [0.80, 0.80, 0.80], ("half", "distilled"): [0.802, 0.81, 0.818]})
    (_, e, call), = [x for x in sr.effect_lines(close) if "KL vs scratch" in x[0]]
    assert e.value > 2 * e.se and call == "within the seed noise"


def test_ladder_markdown_shows_both_runs_and_dashes_for_missing_cells():
    ref = _runs({("half", "scratch"): [0.80, 0.84], ("small", "scratch"): [0.7, 0.7]})
    live = _runs({("half", "scratch"): [0.83]})
    md = sr.ladder_markdown(ref, live, teacher_accuracy=0.9, reference_label="ref", live_label="here")
    half = next(l for l in md.splitlines() if l.startswith("| 2 layers, teacher's width"))
    t = 12.706 * 2.0                    # t(0.975, 1) x sd / sqrt(2), sd of 80 and 84 = 2 sqrt(2)
    assert f"82.0 ± {t:.1f} (2 seeds)" in half and "83.0 (1 seed)" in half
    small = next(l for l in md.splitlines() if l.startswith("| 1 layer"))
    assert small.endswith("| – |") and "90.0" in md


def test_split_seconds_times_every_model_per_repeat_and_rejects_one_repeat():
    corpus = load_corpus(CorpusConfig(n_train=8, n_val=4, n_test=40, n_transfer=4, max_length=64))
    a = build_model(len(corpus.vocab), preset="student", seed=0).eval()
    b = build_model(len(corpus.vocab), preset="teacher", seed=0).eval()
    calls = []
    a_hook = a.register_forward_hook(lambda *_: calls.append("a"))
    secs = sr.split_seconds({"a": a, "b": b}, corpus.test, batch_size=8, repeats=2, max_batches=3)
    a_hook.remove()
    assert set(secs) == {"a", "b"} and all(len(v) == 2 and min(v) > 0 for v in secs.values())
    assert len(calls) == 1 + 2 * 3                     # one warm-up, then repeats x batches
    assert speedup(secs["b"], secs["a"]).dof == 1
    with pytest.raises(ValueError, match="repeats"):
        sr.split_seconds({"a": a}, corpus.test, repeats=1)
