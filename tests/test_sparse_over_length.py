"""Sparse attention over length: the sweep's bookkeeping, the slope fit, the online-softmax
trace."""

import pytest
import torch

from course_lib.attention import sparse as SP
from course_lib.attention.figures import online_softmax_trace, tiling_figure
from course_lib.measure.bench import Timing


def _fake(times):
    """A sweep result with the given median times (ms) per kernel and length."""
    rows = {}
    for L, per in times.items():
        rows[L] = {k: {"timing": Timing([t / 1e3 * f for f in (0.98, 1.0, 1.02)])}
                   for k, t in per.items()}
    return {"lengths": list(times), "window": 64, "block_size": 128, "rows": rows}


def test_slope_recovers_the_exponent_and_ratios_pair_the_repeats():
    res = _fake({L: {"sdpa": 1e-4 * L ** 2, "flex, block mask": 0.05 * L}
                 for L in (512, 1024, 2048, 4096)})
    assert SP.slope(res, "sdpa") == pytest.approx(2.0, abs=1e-6)
    assert SP.slope(res, "flex, block mask") == pytest.approx(1.0, abs=1e-6)
    r = SP.ratio_to_dense(res, "flex, block mask")
    assert r[1024].value == pytest.approx(0.05 * 1024 / (1e-4 * 1024 ** 2))
    with pytest.raises(ValueError, match="fewer than two"):
        SP.slope(_fake({512: {"sdpa": 1.0}, 1024: {"sdpa": 2.0, "x": 1.0}}), "x")


def test_sweep_times_every_kernel_and_counts_tiles_without_flex():
    res = SP.sparse_sweep([64, 128], window=8, block_size=32, heads=2, head_dim=8, repeats=2,
                          flex=False, progress=False)
    assert res["flex"] == "flex=False"
    assert set(res["rows"][64]) == {"sdpa", "sdpa, window mask", "tiled, window mask"}
    assert res["tiles_kept"][128] == pytest.approx((4 + 2 * 3) / 16)   # 4 x 4 tiles, 3 diagonals
    assert res["density"][64] == pytest.approx(float(
        ((torch.arange(64)[:, None] - torch.arange(64)[None, :]).abs() <= 8).float().mean()))
    with pytest.raises(ValueError, match="repeats"):
        SP.sparse_sweep([64, 128], window=8, repeats=1, flex=False)
    with pytest.raises(ValueError, match="lengths"):
        SP.sparse_sweep([64], window=8, flex=False)


def test_online_softmax_trace_ends_at_the_rows_logsumexp():
    x = torch.randn(300, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4 + 500
    trace = online_softmax_trace(x, 64)
    assert len(trace) == 5
    assert trace[-1]["lse"] == pytest.approx(float(torch.logsumexp(x, 0)), abs=1e-9)
    assert trace[-1]["max"] == pytest.approx(float(x.max()))
    assert all(0 < r["rescale"] <= 1 for r in trace[1:])
    with pytest.raises(ValueError, match="block"):
        online_softmax_trace(x, 0)
    fig, _ = tiling_figure(n_blocks=4, query_block=2)
    assert len(fig.axes) == 2
