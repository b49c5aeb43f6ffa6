import time

import pytest
import torch

from course_lib.optim import compile as cc
from course_lib.measure.hardware import (Machine, Op, encoder_layer_ops, forward_flops,
                                         measure_bandwidth, measure_matmul_flops, mfu,
                                         training_step_flops)
from course_lib.core.model import EncoderConfig, build_model


def test_measurements_divide_the_work_by_the_median_time(monkeypatch):
    # A fake clock that advances 0.5 s per reading: every timed call lasts exactly 0.5 s, so the
    # estimates must equal the work counted by hand over 0.5 s.
    import course_lib.measure.bench as bench
    clock = iter(x * 0.5 for x in range(10_000))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    assert measure_matmul_flops(size=64, repeats=3) == pytest.approx(2 * 64 ** 3 / 0.5)
    assert measure_bandwidth(mib=4, repeats=3) == pytest.approx(2 * 4 * 2 ** 20 / 0.5)
    with pytest.raises(ValueError, match="size"):
        measure_matmul_flops(size=4)
    with pytest.raises(ValueError, match="mib"):
        measure_bandwidth(mib=0)


def test_machine_records_the_format_and_counts_of_its_peaks(monkeypatch):
    """The peaks are counted work over the measured median: 2 n^3 FLOPs for an n x n matmul,
    read + write bytes for a copy (the timer replaced by a fixed median of 0.5 s)."""
    import course_lib.measure.hardware as H
    from course_lib.measure.bench import Timing

    def fixed(fn, **_):
        fn()
        return Timing((0.5,))
    monkeypatch.setattr(H, "time_fn", fixed)
    m32 = H.measure_machine(matmul_size=64, copy_mib=1, repeats=1)
    m16 = H.measure_machine(matmul_size=64, copy_mib=1, repeats=1, dtype=torch.bfloat16)
    assert (m32.dtype, m16.dtype) == ("float32", "bfloat16")
    assert m32.peak_flops == m16.peak_flops == 2 * 64 ** 3 / 0.5
    assert m32.bandwidth == 2 * 2 ** 20 / 0.5


def test_roofline_and_ridge_point():
    m = Machine("cpu", peak_flops=100e9, bandwidth=10e9)
    assert m.ridge_point == 10.0
    low, high = Op("copy-like", 1e6, 1e6), Op("matmul-like", 1e9, 1e6)
    assert low.attainable(m) == 10e9 and low.bound(m) == "memory"
    assert high.attainable(m) == 100e9 and high.bound(m) == "compute"


def test_forward_flops_match_torch_flop_counter():
    """Our analytic matmul FLOPs agree with torch's FlopCounterMode (which counts matmuls)."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = EncoderConfig(vocab_size=50, d_model=32, n_heads=2, n_layers=2, d_ff=64)
    torch.manual_seed(0)
    model = build_model(50, d_model=32, n_heads=2, n_layers=2, d_ff=64).train()
    ids = torch.randint(1, 50, (3, 20))
    with FlopCounterMode(display=False) as counter:
        model(ids, torch.ones_like(ids, dtype=torch.bool))
    counted = counter.get_total_flops()
    linear = ("QKV projection", "output projection", "FFN up", "FFN down")
    ops = encoder_layer_ops(cfg, batch=3, length=20)
    head = 2 * 3 * 32 * 2
    linear_flops = cfg.n_layers * sum(op.flops for op in ops if op.name in linear) + head
    attention = cfg.n_layers * sum(op.flops for op in ops
                                   if op.name in ("scores Q·Kᵀ", "weights·V"))
    # FlopCounterMode counts every linear layer; it counts attention only where it knows the
    # fused attention kernel in use (not CPU's flash kernel in every torch version).
    assert counted in (pytest.approx(linear_flops, rel=1e-6),
                       pytest.approx(linear_flops + attention, rel=1e-6))
    ours = linear_flops + attention
    # matmuls only, MFU's convention
    assert forward_flops(cfg, batch=3, length=20) == pytest.approx(ours)
    assert (training_step_flops(cfg, batch=3, length=20)
            == 3 * forward_flops(cfg, batch=3, length=20))


def test_mfu_and_errors():
    assert mfu(50e9, 1.0, 100e9) == 0.5
    with pytest.raises(ValueError, match="seconds"):
        mfu(1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="batch"):
        encoder_layer_ops(EncoderConfig(vocab_size=10), batch=0, length=4)


def test_compile_falls_back_cleanly_when_unavailable(monkeypatch):
    monkeypatch.setenv("COURSE_NO_COMPILE", "1")
    ok, reason = cc.compile_support()
    assert not ok and "COURSE_NO_COMPILE" in reason
    f = lambda x: x * 2 + 1  # noqa: E731
    res = cc.compile_or_eager(f, (torch.ones(3),))
    assert res.fn is f and not res.compiled and "COURSE_NO_COMPILE" in res.reason
    monkeypatch.delenv("COURSE_NO_COMPILE")
    monkeypatch.delattr(torch, "compile")
    assert cc.compile_support() == (False, cc.compile_support()[1])
    assert "torch.compile" in cc.compile_support()[1]


def test_compile_falls_back_when_the_compiler_fails(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated backend crash")
    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(cc, "compile_support", lambda device="cpu": (True, "available"))
    def f(x):
        time.sleep(0.01)
        return x + 1
    res = cc.compile_or_eager(f, (torch.ones(2),))
    assert res.fn is f and not res.compiled and "simulated backend crash" in res.reason
    assert res.first_call_seconds >= 0.01   # the eager first call was timed, not skipped


def test_no_cxx_compiler_means_no_inductor_on_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_NO_COMPILE", raising=False)
    from course_lib.core import device
    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    ok, reason = device.compile_support("cpu")
    if device.sys.platform != "win32":
        assert not ok and "C++" in reason


def test_graph_counter_counts_recompilations_of_a_trivial_function():
    """Dynamo capture only (the counting backend generates no code): fast."""
    f = lambda x: (x * 2).sum()  # noqa: E731
    calls = [(torch.ones(n),) for n in (3, 4, 5, 6)]
    assert cc.count_graphs(f, calls, dynamic=False) == 4      # one per shape
    assert cc.count_graphs(f, calls, dynamic=True) == 1       # one symbolic graph
    assert cc.count_graphs(f, calls[:1] * 3, dynamic=False) == 1


def test_attention_flop_share_is_the_closed_form_and_half_at_2d_plus_dff():
    from course_lib.measure.hardware import attention_flop_share, attention_half_length
    for d, f in ((128, 256), (64, 256), (256, 1024)):
        cfg = EncoderConfig(vocab_size=50, d_model=d, n_heads=4, d_ff=f, n_layers=2)
        for L in (16, 300, 2048):
            assert attention_flop_share(cfg, length=L) == pytest.approx(L / (L + 2 * d + f))
        assert attention_flop_share(cfg, length=attention_half_length(cfg)) == pytest.approx(0.5)
