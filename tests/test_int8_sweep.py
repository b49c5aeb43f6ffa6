"""Tests of course_lib.quant.sweep: the block is what it says, rows are complete, and the
'first width' rule is monotone (checked on hand-made rows, not on timings)."""
import pytest
import torch

import math

from course_lib.quant.sweep import feed_forward_block, first_width_holding, speedups
from course_lib.measure.verdicts import Rule


def test_feed_forward_block_shape_and_seed():
    a, b = feed_forward_block(8, seed=3), feed_forward_block(8, seed=3)
    assert a[0].weight.shape == (16, 8) and a[2].weight.shape == (8, 16)
    assert torch.equal(a[0].weight, b[0].weight)
    with pytest.raises(ValueError, match="width"):
        feed_forward_block(0)


def test_sweep_rows_cover_every_case():
    rows = speedups([8, 16], [1, 2], tokens=4, warmup=0, repeats=1)
    assert [(r["format"], r["width"], r["batch"]) for r in rows] == [
        (f, w, b) for w in (8, 16) for b in (1, 2) for f in ("int8", "bf16")]
    for r in rows:   # one repeat: the ratio of the two single timings, with no measurable noise
        assert r["speedup"] == pytest.approx(r["fp32_ms"] / r["low_ms"])
        assert math.isinf(r["se"]) and r["dof"] == 1
    assert [r["format"]
            for r in speedups([8], [1], formats=("bf16",), warmup=0, repeats=1)] == ["bf16"]
    with pytest.raises(ValueError, match="batches"):
        speedups([8], [0], warmup=0, repeats=1)
    with pytest.raises(ValueError, match="formats must be"):
        speedups([8], [1], formats=("fp8",), warmup=0, repeats=1)


def test_first_width_needs_every_wider_width_to_hold_with_its_noise():
    rule = Rule("speed-up", ">=", 1.2)
    rows = [{"format": "int8", "width": w, "batch": 32, "speedup": s, "se": se, "dof": 9}
            for w, s, se in ((64, 0.8, 0.05), (128, 1.6, 0.05), (256, 1.25, 0.1),
                             (512, 1.7, 0.05), (1024, 2.0, 0.05))]
    # 256 straddles 1.2 (1.25 +- 2.26 x 0.1): 128 holding alone does not make the run
    assert first_width_holding(rows, batch=32, rule=rule) == 512
    rows[2]["se"] = 0.01                                         # now 256 clears it too
    assert first_width_holding(rows, batch=32, rule=rule) == 128
    assert first_width_holding(rows, batch=32, rule=Rule("speed-up", ">=", 3.0)) is None
    assert first_width_holding(rows, batch=32, rule=Rule("speed-up", ">=", 0.5)) == 64
    with pytest.raises(ValueError, match="batch 1"):
        first_width_holding(rows, batch=1, rule=rule)
    with pytest.raises(ValueError, match="no bf16 rows"):
        first_width_holding(rows, batch=32, rule=rule, format="bf16")


def test_rows_become_one_series_per_format_and_batch():
    from course_lib.quant.sweep import as_sweep
    rows = [{"format": f, "batch": b, "width": w, "speedup": s, "se": 0.1, "dof": 4}
            for f, b, w, s in (("bf16", 1, 128, 0.5), ("int8", 32, 256, 2.0),
                               ("int8", 32, 128, 1.1), ("int8", 1, 128, 0.9))]
    got = as_sweep(rows, formats=["int8"], names={"int8": "int8", "bf16": "BF16"})
    assert list(got) == ["int8 block, batch 1", "int8 block, batch 32"]
    assert list(got["int8 block, batch 32"]) == [128, 256]
    r = got["int8 block, batch 32"][256]
    assert (r.value, r.se, r.dof, r.log) == (2.0, 0.1, 4, True)
    assert "BF16 block, batch 1" in as_sweep(rows, formats=["int8", "bf16"],
                                             names={"int8": "i", "bf16": "BF16"})
    with pytest.raises(ValueError, match="formats"):
        as_sweep(rows, formats=["fp8"], names={})


def test_the_sweep_figure_draws_each_format_and_batch_and_the_model_point():
    from course_lib.quant.sweep import sweep_figure
    rows = [{"format": f, "batch": b, "width": w, "speedup": s, "se": 0.05, "dof": 4}
            for f in ("int8", "bf16") for b in (1, 32) for w, s in ((128, 1.1), (512, 1.6))]
    fig = sweep_figure(rows, names={"int8": "int8 dynamic", "bf16": "BF16"}, threshold=1.2,
                       model_width=128, model_speedup=1.05)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert (sum("× 64 tokens" in t for t in labels) == 4
            and "the course model, int8, batch 32" in labels)
    lo, hi = ax.get_ylim()
    assert all(lo <= t <= hi for t in ax.get_yticks())


def test_log_ticks_keep_their_distance_whatever_the_range():
    import math
    from course_lib.ui.plots import spaced_log_ticks
    assert spaced_log_ticks(0.6, 2.5) == [1.0, 1.5, 2.0]           # a narrow range keeps the fine
                                                                   # ticks
    assert spaced_log_ticks(0.01, 100) == [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]
    for lo, hi in ((0.02, 3.0), (0.4, 60.0), (1.1, 1.9), (0.03, 0.9)):
        t = spaced_log_ticks(lo, hi)
        assert t and all(lo <= x <= hi for x in t)
        gaps = [math.log10(b / a) for a, b in zip(t, t[1:])]
        assert all(g >= math.log10(hi / lo) / 12 - 1e-12 for g in gaps), (lo, hi, t)
        assert (1.0 in t) == (lo <= 1 <= hi)
    with pytest.raises(ValueError, match="lo and hi"):
        spaced_log_ticks(0.0, 1.0)
