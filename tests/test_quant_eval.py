"""Tests of course_lib.quant.evaluate: the paired change and the rule's outcome match a hand
computation on hand-made logits; 'holds down to b bits' is monotone; a real sweep on a small
model sees 8 bits agree with FP32 far more than 2 bits per tensor."""
import math

import pytest
import torch

from course_lib.core.model import build_model
from course_lib.quant.evaluate import (Scored, bit_sweep, compare_to, lowest_holding,
                                       rounded_to_zero, score)
from course_lib.measure.verdicts import Rule, t_quantile

RULE = Rule("accuracy change (points)", ">=", -1.0)


def _scored(right: list[bool]) -> Scored:
    labels = torch.zeros(len(right), dtype=torch.long)
    logits = torch.tensor([[1.0, 0.0] if r else [0.0, 1.0] for r in right])
    return Scored(logits, labels)


def test_compare_to_is_the_paired_change_by_hand():
    ref = _scored([True] * 90 + [False] * 10)
    other = _scored([True] * 85 + [False] * 5 + [False] * 5 + [True] * 5)   # 5 broken, 5 fixed
    row = compare_to(ref, other, RULE)
    assert row["accuracy"] == pytest.approx(0.90) and row["agreement"] == pytest.approx(0.90)
    assert row["change"] == 0.0
    d = [0] * 85 + [-1] * 5 + [0] * 5 + [1] * 5                     # per-review difference
    sd = math.sqrt(sum(v * v for v in d) / 99)
    assert row["se"] == pytest.approx(100 * sd / 10) and row["dof"] == 99
    m = t_quantile(0.975, 99) * row["se"]
    assert row["outcome"] == ("holds" if -m >= -1.0 else "inconclusive")
    worse = compare_to(ref, _scored([True] * 60 + [False] * 40), RULE)
    assert worse["change"] == pytest.approx(-30.0) and worse["outcome"] == "fails"
    same = compare_to(ref, ref, RULE)
    # no review changed: the rule of three bounds the change at ±3 points on 100 reviews
    assert same["change"] == 0 and same["se"] == pytest.approx(3 / t_quantile(0.975, 99))
    assert same["outcome"] == "inconclusive"    # ±3 reaches past the -1 point bar
    with pytest.raises(ValueError, match="labels"):
        Scored(torch.zeros(3, 2), torch.zeros(4, dtype=torch.long))


def test_lowest_holding_stops_at_the_first_width_that_does_not_hold():
    sweep = {("per_channel", b): {"outcome": o} for b, o in
             ((8, "holds"), (6, "holds"), (4, "inconclusive"), (3, "holds"), (2, "fails"))}
    assert lowest_holding(sweep, "per_channel") == 6          # 3 holding does not count
    sweep["per_channel", 8]["outcome"] = "fails"
    assert lowest_holding(sweep, "per_channel") is None
    with pytest.raises(ValueError, match="per_tensor"):
        lowest_holding(sweep, "per_tensor")


def test_bit_sweep_on_a_small_model():
    model = build_model(50, preset="teacher", seed=0, d_model=32, n_layers=1, d_ff=64).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (40, 12), generator=gen)
    loader = [{"input_ids": ids[i:i + 10], "attention_mask": torch.ones(10, 12, dtype=torch.bool),
               "index": torch.arange(i, i + 10)} for i in range(0, 40, 10)]
    with torch.no_grad():
        labels = model(ids, torch.ones(40, 12, dtype=torch.bool)).argmax(-1)  # FP32 is 100% right
    ref = score(model, loader, labels)
    assert ref.accuracy == 1.0
    sweep = bit_sweep(model, loader, labels, bits=[8, 2], granularities=["per_tensor"], rule=RULE,
                      ref=ref)
    assert set(sweep) == {("per_tensor", 8), ("per_tensor", 2)}
    assert sweep["per_tensor", 8]["agreement"] >= sweep["per_tensor", 2]["agreement"]
    for row in sweep.values():   # against a perfect reference, accuracy is the agreement
        assert row["accuracy"] == pytest.approx(row["agreement"])
        assert row["change"] == pytest.approx(100 * (row["accuracy"] - 1.0))


def test_rounded_to_zero_by_hand():
    from torch import nn
    m = nn.Sequential(nn.Linear(2, 2, bias=False))
    with torch.no_grad():   # row 0 is small next to row 1: at 2 bits one step per tensor zeroes it
        m[0].weight.copy_(torch.tensor([[0.15, -0.2], [4.0, 3.0]]))
    # per tensor: step 4.0, so 0.15 and -0.2 round to 0 and 3.0 to one step (2 of 4 zeroed);
    # per row: row 0's step is 0.2, 0.15 / 0.2 = 0.75 rounds to one step (none zeroed)
    assert rounded_to_zero(m, bits=2, granularity="per_tensor") == pytest.approx(2 / 4)
    assert rounded_to_zero(m, bits=2, granularity="per_channel") == 0
