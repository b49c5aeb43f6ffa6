"""The optimizer race over budgets: the rate is chosen on validation, the gap scored on test and
paired by seed; a tiny real run stores every cell of the grid."""
import pytest

from course_lib.optim import race_budget as RB


def _run(budget, spec, seed, val, test):
    return {"budget": budget, "spec": spec, "seed": seed, "steps": [1, 2], "val": [val, val],
            "test": [test, test], "seconds": [0.1, 0.2]}


def test_from_evidence_chooses_on_validation_and_pairs_by_seed():
    runs = []
    for seed, noise in ((0, 0.0), (1, 0.02), (2, -0.01)):
        runs += [_run(64, "adamw@0.001", seed, 0.60, 0.61 + noise),
                 _run(64, "adamw@0.01", seed, 0.80, 0.78 + noise),
                 _run(64, "sgd@0.1", seed, 0.55, 0.70),
                 _run(64, "sgd@1", seed, 0.65, 0.60 + noise / 2)]
    body = {"budgets": [64], "runs": runs}
    got = RB.from_evidence(body)[64]
    assert got["best"] == {"adamw": "adamw@0.01", "sgd": "sgd@1"}   # by validation, not by test
    assert got["adaptive"] == "adamw" and got["plain"] == "sgd"
    diffs = [100 * ((0.78 + n) - (0.60 + n / 2)) for n in (0.0, 0.02, -0.01)]
    assert got["gap"].value == pytest.approx(sum(diffs) / 3)
    assert got["gap"].dof == 2 and got["seeds"] == 3
    assert got["edges"] == {"adamw": "high", "sgd": "high"}


def test_a_tiny_run_stores_every_cell(monkeypatch):
    body = RB.run(seeds=(0,), budgets=(3,), grid={"sgd": [0.1], "adamw": [1e-3]}, scale=0.02,
                  log=lambda m: None)
    assert {(r["budget"], r["spec"]) for r in body["runs"]} == {(3, "sgd@0.1"), (3, "adamw@0.001")}
    assert all(r["steps"][-1] == 3 and len(r["test"]) == len(r["val"]) for r in body["runs"])
    assert body["setup"]["grad_clip"] == 0.0
    with pytest.raises(ValueError, match="seeds"):
        RB.run(seeds=(), budgets=(3,))
