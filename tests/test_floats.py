"""course_lib.floats.formats: bit layouts against torch's own dtypes, the derived table,
rounding."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.floats import in_torch as float_torch
from course_lib.floats import formats as floats
from course_lib.floats.formats import FORMATS

STORED = [n for n, f in FORMATS.items() if f.dtype is not None]
INT = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


def torch_value(bits: int, name: str) -> float:
    f = FORMATS[name]
    signed = bits - (1 << f.bits) if f.bits > 8 and bits >> (f.bits - 1) else bits
    return torch.tensor([signed], dtype=INT[f.bits]).view(f.dtype).double().item()


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


@pytest.mark.parametrize("name", STORED)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_bit_round_trip_matches_torch_bit_view(name, data):
    f = FORMATS[name]
    bits = data.draw(st.integers(0, (1 << f.bits) - 1))
    value = floats.decode(bits, name)
    assert same(value, torch_value(bits, name))
    if not math.isnan(value):
        assert floats.encode(value, name) == bits


def torch_bits(value: float, fmt: str) -> int:
    """The bit pattern torch produces when it converts an FP32 ``value`` to ``fmt``'s dtype."""
    f = floats.get_format(fmt)
    ints = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[f.bits]
    src = torch.float64 if f.bits == 64 else torch.float32
    return int(torch.tensor([value], dtype=src).to(f.dtype).view(ints).item()) % (1 << f.bits)


@pytest.mark.parametrize("name", [n for n in STORED if n != "fp64"])
@settings(max_examples=300, deadline=None)
@given(x=st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_rounding_matches_torch_conversion(name, x):
    ours, torchs = floats.encode(x, name), torch_bits(x, name)
    if name == "fp8_e4m3" and float_torch.torch_e4m3_overflow() == "nan" and \
            floats.classify(torchs, name) == "nan":
        # a torch in OCP's non-saturating mode: only values beyond the range may differ, and
        # there we saturate to the largest finite value, as the saturating mode says
        assert abs(x) > 448 and floats.decode(ours, name) == math.copysign(448, x)
        return
    assert ours == torchs


def test_e4m3_overflow_mode_is_one_of_ocps_two(monkeypatch):
    assert float_torch.torch_e4m3_overflow() in ("saturates", "nan")
    assert floats.decode(floats.encode(1000.0, "fp8_e4m3"), "fp8_e4m3") == 448.0   # ours saturates
    real = torch.Tensor.to

    def nan_mode(t, *a, **k):   # a torch in the non-saturating mode, as torch 2.9.1 was reported
        out = real(t, *a, **k)
        return (out if out.dtype != torch.float8_e4m3fn
                else real(torch.full_like(t, math.nan), *a, **k))
    monkeypatch.setattr(torch.Tensor, "to", nan_mode)
    assert float_torch.torch_e4m3_overflow() == "nan"


@pytest.mark.parametrize("name", STORED)
def test_derived_table_equals_finfo(name):
    for what, (derived, torch_says) in float_torch.check_finfo(name).items():
        assert derived == torch_says, (name, what)


def test_table_covers_every_format():
    rows = floats.table()
    assert [r["format"] for r in rows] == list(FORMATS)
    assert {r["format"]: r["max"] for r in rows}["fp8_e4m3"] == 448.0


def test_fp8_hand_computed_cases():
    # E4M3: 0.1 = 1.6 * 2^-4 -> mantissa 1.101b = 1.625; E5M2 -> 1.10b = 1.5
    assert floats.round_to("0.1", "fp8_e4m3") == 1.625 / 16
    assert floats.round_to("0.1", "fp8_e5m2") == 1.5 / 16
    assert floats.round_to(448, "fp8_e4m3") == 448 and floats.round_to(1e6, "fp8_e4m3") == 448
    assert floats.encode(448, "fp8_e4m3") == 0b0_1111_110
    assert floats.round_to(57344, "fp8_e5m2") == 57344
    assert floats.round_to(61440, "fp8_e5m2") == math.inf      # tie at max + half ulp -> inf
    assert floats.round_to(2.0 ** -9, "fp8_e4m3") == 2.0 ** -9   # smallest subnormal
    assert floats.round_to(2.0 ** -11, "fp8_e4m3") == 0.0         # below half of it
    assert floats.classify(0b0_1111_111, "fp8_e4m3") == "nan"
    assert floats.classify(0b0_11111_00, "fp8_e5m2") == "inf"


def test_tf32_hand_computed_cases():
    # ulp(1) = 2^-10: a half-ulp tie goes to even (1.0); 1.5 ulp goes up to 2 ulp
    assert floats.round_to(1 + 2 ** -11, "tf32") == 1.0
    assert floats.round_to(1 + 3 * 2 ** -11, "tf32") == 1 + 2 ** -9
    assert floats.round_to("3.14159", "tf32") == 3.140625
    x = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 3.14159, math.inf, -2.5e-3])
    want = [floats.round_to(float(v), "tf32") for v in x[[0, 1, 2, 4]]]
    got = float_torch.simulate_tf32(x)
    assert got[[0, 1, 2, 4]].tolist() == want and got[3] == math.inf
    assert (got.view(torch.int32)[[0, 1, 2, 4]] & 0x1FFF == 0).all()


def test_store_reports_error_of_the_decimal():
    s = floats.store("0.1", "fp32")
    assert s.stored == torch.tensor(0.1, dtype=torch.float32).item()
    assert s.sign == "0" and len(s.exponent) == 8 and len(s.mantissa) == 23
    assert 0 < s.abs_error < 2e-9 and s.kind == "normal"
    assert floats.store("0.1", "fp64").abs_error > 0   # even fp64 cannot hold 0.1
    assert floats.store(70000, "fp16").kind == "inf"
    assert floats.store(1e-7, "fp16").kind == "subnormal"
    assert floats.store(1e-8, "fp16").kind == "zero"   # below half the smallest subnormal


def test_running_sum_stalls_in_fp16():
    v = torch.full((4096,), 1e-4)
    assert abs(float_torch.running_sum(v, "fp32")[-1].item() - 0.4096) < 1e-3
    assert float_torch.running_sum(v, "fp16")[-1].item() < 0.3


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="format must be one of"):
        floats.encode(1.0, "fp12")
    with pytest.raises(ValueError, match="finite"):
        floats.store("inf", "fp16")
    with pytest.raises(ValueError, match="finite"):
        floats.store("abc", "fp16")
    with pytest.raises(ValueError, match="no infinity"):
        floats.encode(math.inf, "fp8_e4m3")
    with pytest.raises(ValueError, match="torch dtype"):
        float_torch.check_finfo("tf32")
    with pytest.raises(ValueError, match="bits must be in"):
        floats.decode(1 << 16, "fp16")
    with pytest.raises(ValueError, match="float32"):
        float_torch.simulate_tf32(torch.ones(2, dtype=torch.float64))


def test_gradient_magnitudes_are_autograd_gradients_by_hand():
    from torch import nn

    from course_lib.floats.in_torch import gradient_magnitudes
    lin = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0.0, -2.0]]))
    batches = [torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([[0.5, 0.0, -1.0]]), torch.ones(1, 3)]
    def loss_fn(m, x):                                # d/dW = x: the gradient is the input itself
        return m(x).sum()
    got = gradient_magnitudes(lin, batches, batches=2, loss_fn=loss_fn)
    assert got.tolist() == [1.0, 2.0, 0.5, 1.0]       # zeros dropped, third batch not used
    assert lin.weight.grad is None                    # left with no gradient
    with pytest.raises(ValueError, match="batches must be"):
        gradient_magnitudes(lin, batches, batches=0, loss_fn=loss_fn)


def test_short_switches_to_scientific_outside_readable_range():
    from course_lib.floats.formats import short
    assert (short(65504.0) == "6.55e+04" and short(0.0009765625) == "9.766e-04"
            and short(1.5) == "1.5")


def test_stochastic_rounding_lands_on_a_neighbour_and_is_exact_on_average():
    from course_lib.floats.in_torch import repeated_updates, stochastic_round_bf16
    g = torch.Generator().manual_seed(0)
    for x in (1.0 + 1e-3, -(3.0 + 0.01), 1e-20):
        t = torch.full((20000,), x)
        r = stochastic_round_bf16(t, generator=g).float()
        down = t.to(torch.bfloat16).float()[0]         # a BF16 neighbour of x, then the other
        gap = (torch.nextafter(down.to(torch.bfloat16),
                               torch.tensor(float("inf"), dtype=torch.bfloat16)).float()
               - down).abs()
        assert set(r.unique().tolist()) <= {down.item(), (down + gap).item(), (down - gap).item()}
        se = gap / (2 * 20000 ** 0.5)                   # a Bernoulli step of size gap:
                                                        # sd <= gap / 2
        assert abs(r.mean().item() - x) < 4 * se.item() + 1e-30
    with pytest.raises(ValueError, match="float32"):
        stochastic_round_bf16(torch.ones(2, dtype=torch.float64), generator=g)
    # 0.001 is under half BF16's gap at 1.0 (2^-8): round to nearest never moves the weight
    upd = repeated_updates(1.0, 1e-3, 200, generator=torch.Generator().manual_seed(0))
    assert upd["bf16"] == 1.0 and upd["fp32"] == pytest.approx(1.2, abs=1e-4)
    assert upd["exact"] == pytest.approx(1.2) and abs(upd["bf16_stochastic"] - 1.2) < 0.1


def test_the_accumulator_probe_separates_the_hypotheses_against_fp64():
    """Each hypothesis is exact arithmetic rounded at the end: an FP32 accumulator rounds the
    FP64 value once (at most half an FP16 step off), a tree of FP16 sums drifts, an FP16 running
    sum drifts most; the probe needs at least 2 values and 1 trial."""
    probe = float_torch.accumulator_probe(n=1024, trials=4,
                                          generator=torch.Generator().manual_seed(0))
    e = probe["error_in_steps"]
    assert e["fp32 accumulator"] <= 0.5 < e["fp16 pairwise sum"] < e["fp16 running sum"]
    assert probe["matches"]["fp16 running sum"] < 4 and probe["trials"] == 4
    with pytest.raises(ValueError, match="n must be"):
        float_torch.accumulator_probe(n=1, generator=torch.Generator())
