"""The optimizer race: run_budget's determinism and curves on both splits, the grid's edges and
their extension by hand, and the wall-clock convergence measure against a hand integral."""
import math

import pytest
import torch
from torch import nn

from course_lib.optim.race import (RunResult, accuracy_over_time, best_per_optimizer, extend_grid,
                                   grid_edges, lr_grid, race, run_budget, summarize)
from course_lib.core.train import History


def tiny_problem():
    """A linear model on 64 random points: fast enough to train many times."""
    torch.manual_seed(0)
    x = torch.randn(64, 6, dtype=torch.float32)

    class DS(torch.utils.data.Dataset):
        def __len__(self): return 64
        def __getitem__(self, i): return {"label": int(x[i].sum() > 0), "index": i}

    ds = DS()

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 2)
        def forward(self, ids, mask):
            return self.lin(x[ids])

    def collate(items):
        idx = torch.tensor([it["index"] for it in items])
        return {"input_ids": idx, "attention_mask": torch.ones_like(idx, dtype=torch.bool),
                "labels": torch.tensor([it["label"] for it in items]), "index": idx}

    def loader(seed, shuffle=True):
        return torch.utils.data.DataLoader(ds, batch_size=16, shuffle=shuffle, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(seed))

    def build(seed):
        torch.manual_seed(seed)
        return Tiny()
    return build, loader


def test_run_budget_and_summarize():
    build, loader = tiny_problem()
    specs = {"adamw": dict(lr=0.05), "lamb": dict(lr=0.05),
             "sgd_momentum": dict(lr=0.5, optimizer="sgd_momentum")}
    res = run_budget(build, loader, loader(0, shuffle=False), specs=specs, seeds=(0, 1),
                     epochs=3, eval_every=4)
    assert len(res) == 6 and {r.optimizer for r in res} == set(specs)
    for r in res:
        assert r.curve_steps[-1] == 12 and len(r.history.step_loss) == 12
        assert 0 <= r.final_accuracy <= 1
    s = summarize(res, target=0.0)
    assert s["adamw"]["seeds"] == 2 and s["adamw"]["reached"] == 2
    assert s["adamw"]["mean_steps_to_target"] == 4
    # same seed, same optimizer: identical
    again = run_budget(build, loader, loader(0, shuffle=False), specs={"adamw": dict(lr=0.05)},
                       seeds=(0,), epochs=3, eval_every=4)
    assert again[0].history.step_loss == res[0].history.step_loss
    with pytest.raises(ValueError, match="eval_every"):
        run_budget(build, loader, None, specs=specs, eval_every=0)


def test_steps_to():
    r = RunResult("x", 0, History(), [10, 20, 30], [0.5, 0.7, 0.9])
    assert (r.steps_to(0.7) == 20 and r.steps_to(0.95) is None
            and math.isnan(RunResult("y", 0, History()).final_accuracy))


def test_curve_mean_lr_grid_and_best_per_optimizer():
    r = RunResult("x", 0, History(), [10, 20, 30], [0.5, 0.7, 0.9])
    assert r.curve_mean == pytest.approx(0.7)
    assert math.isnan(RunResult("y", 0, History()).curve_mean)
    specs = lr_grid({"sgd": [0.1, 0.3], "adamw": [1e-3]}, adamw={"weight_decay": 0.1})
    assert specs == {"sgd@0.1": {"optimizer": "sgd", "lr": 0.1},
                     "sgd@0.3": {"optimizer": "sgd", "lr": 0.3},
                     "adamw@0.001": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.1}}
    summary = {"sgd@0.1": {"mean_curve_accuracy": 0.6}, "sgd@0.3": {"mean_curve_accuracy": 0.7},
               "adamw@0.001": {"mean_curve_accuracy": 0.65}}
    assert best_per_optimizer(summary) == {"sgd": "sgd@0.3", "adamw": "adamw@0.001"}
    with pytest.raises(ValueError, match="grid"):
        lr_grid({"sgd": []})


def test_score_split_and_training_clock():
    build, loader = tiny_problem()
    res = run_budget(build, loader, loader(0, shuffle=False), specs={"adamw": dict(lr=0.05)},
                     seeds=(0,), epochs=3, eval_every=4, score_loader=loader(1, shuffle=False))
    r = res[0]
    assert len(r.score_accuracy) == len(r.curve_accuracy) == len(r.curve_seconds) == 3
    assert r.score_accuracy == r.curve_accuracy          # the same reviews in another order: same
                                                         # accuracy
    assert (all(b > a for a, b in zip(r.curve_seconds, r.curve_seconds[1:]))
            and r.curve_seconds[0] > 0)
    assert r.train_seconds <= r.seconds                  # evaluation is off the training clock
    assert summarize(res)["adamw"]["mean_score_accuracy"] == pytest.approx(r.score_mean)
    assert math.isnan(RunResult("y", 0, History()).score_mean)


def test_grid_edges_and_extension_by_hand():
    grid = {"sgd": [0.1, 0.3, 1.0], "adam": [1e-3, 3e-3, 1e-2], "lamb": [0.01, 0.03], "one": [0.5]}
    best = {"sgd": "sgd@0.1", "adam": "adam@0.003", "lamb": "lamb@0.03", "one": "one@0.5"}
    edges = grid_edges(best, grid)
    assert edges == {"sgd": "low", "lamb": "high"}        # a one-value grid has no edge to leave
    new = extend_grid(grid, edges)
    assert new["sgd"] == pytest.approx(0.1 / 3) and new["lamb"] == pytest.approx(0.09)


def test_race_extends_the_grid_past_an_edge(monkeypatch):
    import course_lib.optim.race as race_mod
    calls = []

    def fake_run_budget(build, loader, val, *, specs, **kw):   # accuracy peaks at lr 0.03
        calls.append(sorted(specs))
        out = []
        for name, spec in specs.items():
            acc = 0.6 - abs(math.log10(spec["lr"] / 0.03)) / 10
            out.append(RunResult(name, 0, History(), [1], [acc], final_accuracy=acc))
        return out

    monkeypatch.setattr(race_mod, "run_budget", fake_run_budget)
    runs, grid, edges = race(None, None, None, grid={"sgd": [0.001, 0.003, 0.01]}, extend_rounds=3)
    assert grid["sgd"] == pytest.approx([0.001, 0.003, 0.01, 0.01 * 10 / 3, 0.01 * (10 / 3) ** 2])
    assert edges == {} and len(calls) == 3               # stopped once the best left the edge
    _, _, still = race(None, None, None, grid={"sgd": [0.001, 0.003]}, extend_rounds=1)
    assert still == {"sgd": "high"}                      # out of rounds: reported, not hidden


def test_accuracy_over_time_by_hand():
    r = RunResult("x", 0, History(), [10, 20], [0.7, 0.9], score_accuracy=[0.6, 0.8],
                  curve_seconds=[2.0, 4.0])
    # score curve: (0, 0.5) -> (2, 0.6) -> (4, 0.8); area to 4 s = 2*0.55 + 2*0.7 = 2.5
    assert accuracy_over_time(r, 4.0) == pytest.approx(2.5 / 4)
    # to 3 s: 2*0.55 + 1*(0.6 + 0.7)/2 = 1.75
    assert accuracy_over_time(r, 3.0) == pytest.approx(1.75 / 3)
    assert accuracy_over_time(r, 4.0, split="val") == pytest.approx((2 * 0.6 + 2 * 0.8) / 4)
    with pytest.raises(ValueError, match="horizon"):
        accuracy_over_time(r, 5.0)
    with pytest.raises(ValueError, match="curve"):
        accuracy_over_time(RunResult("y", 0, History(), [1], [0.5]), 1.0)
