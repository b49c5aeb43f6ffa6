"""Saved-activation accounting, checked against hand counts on models small enough to reason
about."""
import math

import pytest
import torch
from torch import nn

from course_lib.measure.memory import growth_exponent, parameter_state_bytes, saved_activation_bytes
from course_lib.core.model import build_model, count_parameters


class TwoLinear(nn.Module):
    """Linear -> ReLU -> Linear: saves x (for W1's grad), relu's output (for W2's grad and
    relu's own backward: one storage)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16, bias=False), nn.Linear(16, 4, bias=False)

    def forward(self, x, mask):
        return self.b(torch.relu(self.a(x)))


def test_counts_match_a_hand_count_and_skip_parameters():
    x = torch.randn(5, 8, requires_grad=False)
    got = saved_activation_bytes(TwoLinear(), x, None)
    assert got == 4 * (5 * 8 + 5 * 16)          # input and relu output, fp32; weights excluded


def test_encoder_activations_grow_with_length_and_dwarf_nothing_at_short_lengths():
    torch.manual_seed(0)
    model = build_model(40, preset="student")
    small, large = (saved_activation_bytes(model, torch.randint(1, 40, (2, n)),
                                           torch.ones(2, n, dtype=torch.bool)) for n in (16, 64))
    k = growth_exponent(small, large, length_small=16, length_large=64)
    assert 0.9 <= k <= 2.1                       # at least linear, at most quadratic
    assert model.training                        # left in train mode, as built
    assert parameter_state_bytes(model) == 16 * count_parameters(model)   # AdamW, fp32


def test_growth_exponent_hand_values_and_errors():
    assert growth_exponent(1.0, 4.0, length_small=10, length_large=20) == pytest.approx(2.0)
    assert growth_exponent(3.0, 24.0, length_small=64, length_large=512) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="> 0"):
        growth_exponent(0.0, 1.0, length_small=1, length_large=2)
    with pytest.raises(ValueError, match="length_small < length_large"):
        growth_exponent(1.0, 2.0, length_small=4, length_large=4)
    assert math.isfinite(growth_exponent(1.0, 1.0, length_small=1, length_large=2))


def test_memory_by_width_matches_a_direct_count_and_finds_the_crossover():
    from course_lib.measure.memory import memory_by_width

    rows = memory_by_width(50, [64, 256, 2048], batch=8, length=128)
    m = build_model(50, preset="teacher", seed=0, d_model=256, d_ff=512, n_heads=4, n_layers=4)
    ids = torch.randint(2, 50, (8, 128))
    direct = saved_activation_bytes(m, ids, torch.ones_like(ids, dtype=torch.bool))
    assert rows[1]["activation_bytes"] == direct                       # the formula is exact
    assert rows[1]["parameters"] == count_parameters(m)
    assert rows[1]["parameter_state_bytes"] == parameter_state_bytes(m)
    ratios = [r["ratio"] for r in rows]
    assert ratios == sorted(ratios) and ratios[0] < 1 < ratios[-1]   # parameters grow as width²
    with pytest.raises(ValueError, match="widths"):
        memory_by_width(50, [100], batch=1, length=8)


def test_memory_by_length_equals_a_direct_count_and_its_exponents_a_hand_computation():
    from course_lib.measure.memory import fitted_exponents, memory_by_length

    tiny = build_model(40, preset="teacher", d_model=32, n_heads=2, d_ff=64, n_layers=1,
                       attention="naive", max_len=64, seed=0)
    got = memory_by_length(tiny, [16, 96], batch=5)     # 96 > max_len: the shape is rebuilt
    for n in (16, 96):
        wide = build_model(40, preset="teacher", d_model=32, n_heads=2, d_ff=64, n_layers=1,
                           attention="naive", max_len=96, seed=0)
        ids = torch.randint(2, 40, (5, n))
        assert got[n] == saved_activation_bytes(wide, ids, torch.ones_like(ids, dtype=torch.bool))
    # by hand: c = 0, a = b = 1 gives (L + 2L²) / (L + L²): 1.5 at L = 1, 5/3 at 2, 9/5 at 4
    k = fitted_exponents({1: 2, 2: 6, 4: 20})
    assert k == {1: pytest.approx(1.5), 2: pytest.approx(5 / 3), 4: pytest.approx(9 / 5)}
    assert fitted_exponents({8: 800, 16: 1600, 32: 3200}) == {
        8: pytest.approx(1.0), 16: pytest.approx(1.0), 32: pytest.approx(1.0)}
    naive = memory_by_length(tiny, [16, 32, 64, 128], batch=2)    # exact counts lie on the curve
    assert fitted_exponents(naive)[128] > fitted_exponents(naive)[16]
    with pytest.raises(ValueError, match="not c"):
        fitted_exponents({1: 1, 2: 10, 3: 11, 4: 50})
    with pytest.raises(ValueError, match="3 or more"):
        fitted_exponents({10: 100, 20: 400})
    with pytest.raises(ValueError, match="batch and lengths"):
        memory_by_length(tiny, [], batch=1)
