"""The reference run of lesson 06: what it records, and its statistics against a hand computation."""
import math

import pytest
import torch

from course_lib.distill import ladder as sl
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.distill.students import StudentRecipe


def test_summary_and_effect_match_a_hand_computation():
    runs = [{"student": "half", "arm": a, "seed": s, "test_accuracy": acc}
            for a, s, acc in [("scratch", 0, 0.80), ("scratch", 1, 0.84), ("scratch", 2, 0.82),
                              ("distilled", 0, 0.85), ("distilled", 1, 0.86), ("distilled", 2, 0.84)]]
    s = sl.summary(runs)
    assert s["half", "scratch"].value == pytest.approx(82.0)
    assert s["half", "scratch"].se == pytest.approx(2.0 / math.sqrt(3))   # sd of 80, 84, 82 is 2
    e = sl.effect(runs, ("half", "distilled"), ("half", "scratch"))
    assert e.value == pytest.approx(3.0)                  # differences 5, 2, 2
    assert e.se == pytest.approx(math.sqrt(3.0) / math.sqrt(3)) and e.dof == 2
    with pytest.raises(ValueError, match="share no seed"):
        sl.effect(runs, ("half", "distilled"), ("small", "scratch"))


def test_a_tiny_grid_runs_saves_and_loads(tmp_path):
    corpus = load_corpus(CorpusConfig(n_train=24, n_val=8, n_test=8, n_transfer=16, max_length=64))
    teacher = build_model(len(corpus.vocab), preset="teacher", seed=0, d_model=32, n_heads=2, d_ff=64)
    cached = torch.randn(40, 2)
    grid = {"small": ("scratch",), "half_from_teacher": ("distilled",)}
    recipe = StudentRecipe(steps=2, batch_size=8)
    runs = sl.run_grid(corpus, teacher, cached, grid=grid, seeds=(0, 1), recipe=recipe, progress=False)
    assert [(r["student"], r["arm"], r["seed"]) for r in runs] == [
        ("small", "scratch", 0), ("half_from_teacher", "distilled", 0),
        ("small", "scratch", 1), ("half_from_teacher", "distilled", 1)]
    assert all(0 <= r["test_accuracy"] <= 1 and r["seconds"] > 0 for r in runs)
    path = sl.save(tmp_path / "r.json", runs, recipe=recipe, device="cpu", teacher_accuracy=0.5)
    doc = sl.load(path)
    assert doc["runs"] == runs and doc["recipe"]["steps"] == 2 and doc["machine"]["device"] == "cpu"
    with pytest.raises(FileNotFoundError, match="course_lib.tools.student_ladder"):
        sl.load(tmp_path / "missing.json")
