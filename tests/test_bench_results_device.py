import json

import pytest
import torch

from course_lib.measure import bench
from course_lib.core.precision import amp_dtype
from course_lib.core.device import capabilities, pick_device, report_markdown
from course_lib.measure.results import Recorder, load_results


class FakeClock:
    """time.perf_counter for bench: each call of a timed function moves it by a set duration,
    so the tests check the arithmetic, not how busy the machine is."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def fn(self, seconds):
        def run():
            self.now += seconds
        return run


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(bench.time, "perf_counter", c)
    return c


def test_time_fn_counts_repeats_and_leaves_the_warmup_out(clock):
    calls = []

    def fn():   # the 3 warm-up calls last 50 s (a cold start), the 5 timed ones 2, 1, 3, 1, 2 s
        calls.append(1)
        clock.now += 50.0 if len(calls) <= 3 else [2, 1, 3, 1, 2][len(calls) - 4]
    t = bench.time_fn(fn, warmup=3, repeats=5)
    assert len(calls) == 8 and t.samples == (2.0, 1.0, 3.0, 1.0, 2.0)
    assert t.median == 2.0                                   # no warm-up call was timed


def test_compare_gives_the_speedup_over_the_baseline(clock):
    r = bench.compare({"fast": clock.fn(0.01), "slow": clock.fn(0.04)}, warmup=1, repeats=3)
    assert r["fast"]["speedup"].value == pytest.approx(1.0)
    assert r["slow"]["speedup"].value == pytest.approx(0.25)
    assert r["slow"]["speedup"].se == pytest.approx(0.0) and r["slow"]["speedup"].dof == 2
    assert r["slow"]["timing"].samples == pytest.approx((0.04,) * 3)


def test_compare_rotates_the_order_of_each_repeat_unless_told_not_to():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "abc"}
    bench.compare(fns, warmup=0, repeats=4, rotate=False)
    assert "".join(order) == "abc" * 4
    order.clear()
    r = bench.compare(fns, warmup=1, repeats=4)                         # the default rotates
    assert "".join(order) == "abc" + "abc" + "bca" + "cab" + "abc"       # warm-up, then rotated
    assert all(len(v["timing"].samples) == 4 for v in r.values())


def test_compare_over_gives_one_speedup_per_input_and_their_geometric_mean(clock):
    from course_lib.measure.verdicts import geometric_mean
    calls = []

    def make(x):       # the baseline lasts x s, the other x / 2 on inputs 4 and 8, x / 3 on 6
        def base():
            calls.append(x)
            clock.now += x
        return {"base": base, "fast": clock.fn(x / (3 if x == 6 else 2))}
    r = bench.compare_over([4, 8, 6], make, warmup=1, repeats=2)
    assert calls == [4] * 3 + [8] * 3 + [6] * 3               # each input: warm-up, then its
                                                              # repeats
    assert (r["base"]["speedups"] == [1.0, 1.0, 1.0]
            and r["fast"]["median_s"] == pytest.approx([2, 4, 2]))
    assert r["fast"]["speedups"] == pytest.approx([2.0, 2.0, 3.0])
    assert r["fast"]["speedup"] == geometric_mean([2.0, 2.0, 3.0]) and r["fast"]["speedup"].dof == 2
    assert r["fast"]["speedup"].value == pytest.approx(12 ** (1 / 3))
    with pytest.raises(ValueError, match="inputs"):
        bench.compare_over([], make)
    with pytest.raises(ValueError, match="same alternatives"):
        bench.compare_over([1, 2], lambda x: {"a": clock.fn(1),
                                              **({"b": clock.fn(1)} if x == 1 else {})})


def test_bench_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        bench.time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="baseline"):
        bench.compare({"a": lambda: None}, baseline="b")
    with pytest.raises(ValueError, match="target"):
        bench.peak_rss("no_colon")


def test_peak_rss_sees_a_large_allocation():
    small = bench.peak_rss("course_lib.measure.bench:_probe_allocate", {"mib": 1})
    big = bench.peak_rss("course_lib.measure.bench:_probe_allocate", {"mib": 200})
    assert big.extra_bytes - small.extra_bytes > 150 * 2**20


def test_recorder_writes_the_documented_payload(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(tmp_path))
    r = Recorder("00_welcome", smoke=True)
    r.record("test_accuracy", 0.9, "fraction")
    r.record("test_accuracy", 0.95, "fraction")   # replaces, never duplicates
    r.record("step_ms", 12.5, "ms", device=torch.device("cpu"))
    r.skip("flash_kernels", needs="cuda", reason="no GPU here")
    path = r.save()
    data = json.loads(path.read_text())
    assert data["notebook"] == "00_welcome" and data["smoke"] is True
    assert data["results"] == [{"name": "test_accuracy", "value": 0.95, "unit": "fraction"},
                               {"name": "step_ms", "value": 12.5, "unit": "ms", "device": "cpu"}]
    assert data["skipped"] == [{"section": "flash_kernels", "needs": "cuda",
                                "reason": "no GPU here"}]
    assert "torch_version" in data["hardware"]
    assert load_results(tmp_path)["00_welcome"] == data


def test_recorder_without_directory_and_bad_names(monkeypatch):
    monkeypatch.delenv("COURSE_RESULTS_DIR", raising=False)
    r = Recorder("x", smoke=False)
    assert r.save() is None
    with pytest.raises(ValueError, match="snake_case"):
        r.record("Bad Name", 1, "s")
    with pytest.raises(ValueError, match="finite"):
        r.record("nan_value", float("nan"), "s", device="cpu")
    for unit in ("s", "ms"):   # a time without the device it ran on is refused
        with pytest.raises(ValueError, match="device="):
            r.record("step_time", 1.0, unit)
    assert r.record("speedup", 2.0, "x") == 2.0   # other units may omit it
    with pytest.raises(ValueError, match="needs must be"):
        r.skip("flash", needs="tpu", reason="")


def test_device_choice_and_report():
    assert pick_device("cpu").type == "cpu"
    assert pick_device().type in ("cuda", "mps", "cpu")
    with pytest.raises(ValueError, match="prefer"):
        pick_device("tpu")
    caps = capabilities("cpu")
    assert caps.threads == torch.get_num_threads()
    assert "| torch |" in report_markdown("cpu")
    assert amp_dtype("cpu") in (torch.bfloat16, None)


def test_timing_flags_a_spread_larger_than_its_median():
    from course_lib.measure.bench import Timing
    calm = Timing((0.010, 0.011, 0.010, 0.012, 0.011))
    busy = Timing((0.010, 0.011, 0.050, 0.090, 0.012))
    assert not calm.noisy and "noisy" not in str(calm)
    assert busy.spread > busy.median and busy.noisy and "noisy" in str(busy)


def test_forward_call_runs_the_model_in_inference_mode_inside_the_context():
    import contextlib

    from torch import nn

    from course_lib.measure import bench
    seen = []

    class Probe(nn.Module):
        def forward(self, a, b):
            seen.append(torch.is_inference_mode_enabled())
            return a + b

    @contextlib.contextmanager
    def ctx():
        seen.append("enter")
        yield
        seen.append("exit")

    a, b = torch.ones(2), torch.arange(2.0)
    assert torch.equal(bench.forward_call(Probe(), a, b)(), a + b) and seen == [True]
    seen.clear()
    bench.forward_call(Probe(), a, b, context=ctx)()
    assert seen == ["enter", True, "exit"]


def test_backward_call_matches_a_hand_backward():
    import torch
    from course_lib.measure import bench
    torch.manual_seed(0)
    m, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    got = bench.backward_call(m, x)()
    assert all(p.grad is None for p in m.parameters())   # returned, not accumulated
    m(x).sum().backward()
    assert all(torch.equal(g, p.grad) for g, p in zip(got, m.parameters()))
