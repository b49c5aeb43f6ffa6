"""Tests of course_lib.int8_sweep: the block is what it says, rows are complete, and the
'first width' rule is monotone (checked on hand-made rows, not on timings)."""
import pytest
import torch

from course_lib.int8_sweep import feed_forward_block, first_width_reaching, int8_speedups


def test_feed_forward_block_shape_and_seed():
    a, b = feed_forward_block(8, seed=3), feed_forward_block(8, seed=3)
    assert a[0].weight.shape == (16, 8) and a[2].weight.shape == (8, 16)
    assert torch.equal(a[0].weight, b[0].weight)
    with pytest.raises(ValueError, match="width"):
        feed_forward_block(0)


def test_sweep_rows_cover_every_case():
    rows = int8_speedups([8, 16], [1, 2], tokens=4, warmup=0, repeats=1)
    assert [(r["width"], r["batch"]) for r in rows] == [(8, 1), (8, 2), (16, 1), (16, 2)]
    for r in rows:
        assert r["speedup"] == pytest.approx(r["fp32_ms"] / r["int8_ms"])
    with pytest.raises(ValueError, match="batches"):
        int8_speedups([8], [0], warmup=0, repeats=1)


def test_first_width_needs_every_wider_width_to_hold():
    rows = [{"width": w, "batch": 32, "speedup": s} for w, s in
            ((64, 0.8), (128, 1.6), (256, 1.2), (512, 1.7), (1024, 2.0))]
    assert first_width_reaching(rows, batch=32, target=1.5) == 512     # 128 dips back at 256
    assert first_width_reaching(rows, batch=32, target=3.0) is None
    assert first_width_reaching(rows, batch=32, target=0.5) == 64
    with pytest.raises(ValueError, match="batch 1"):
        first_width_reaching(rows, batch=1, target=1.5)
