"""Tests of course_lib.quant.static: every Linear becomes a statically quantized one with
calibrated scales; the output stays close to FP32 on the
calibration distribution; a range fixed in advance clips inputs far outside it."""
import warnings

import pytest
import torch
from torch import nn

from course_lib.core.model import build_model
from course_lib.quant.static import StaticLinear, quantize_static_int8


def _batches(n, *, vocab=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(1, vocab, (8, 32), generator=g),
             "attention_mask": torch.ones(8, 32, dtype=torch.bool)} for _ in range(n)]


def test_every_linear_is_converted_and_the_output_stays_close():
    model = build_model(200, preset="teacher", seed=0).eval()
    n_linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    q = quantize_static_int8(model, _batches(4), max_batches=4)
    units = [m for m in q.modules() if isinstance(m, StaticLinear)]
    assert len(units) == n_linear
    assert all(type(u.linear).__module__.startswith("torch.ao.nn.quantized") for u in units)
    assert all(float(u.quant.scale) > 0 for u in units)            # calibrated, not default
    assert isinstance(model.blocks[0].ff.fc1, nn.Linear)            # the original is untouched
    b = _batches(1, seed=9)[0]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")                              # nothing leaks at run time
        out = q(b["input_ids"], b["attention_mask"])
        ref = model(b["input_ids"], b["attention_mask"])
    rel = (out - ref).norm() / ref.norm()
    assert rel < 0.1, f"relative error {rel:.3f}"


def test_a_fixed_range_clips_what_it_never_saw():
    lin = nn.Sequential(nn.Linear(4, 4))

    class Wrap(nn.Module):   # the loader's dict interface around a plain Linear
        def __init__(self):
            super().__init__()
            self.f = lin

        def forward(self, x, mask):
            return self.f(x)

    calib = [{"input_ids": torch.rand(16, 4), "attention_mask": None}]      # inputs in [0, 1)
    q = quantize_static_int8(Wrap(), calib)
    small, big = torch.rand(2, 4), torch.full((2, 4), 50.0)
    with torch.no_grad():
        assert torch.allclose(q(small, None), lin(small), atol=0.05)
        assert (q(big, None) - lin(big)).abs().max() > 1.0                  # clipped at ~1


def test_bad_arguments():
    model = build_model(200, preset="teacher", seed=0)
    with pytest.raises(ValueError, match="max_batches"):
        quantize_static_int8(model, _batches(1), max_batches=0)
    with pytest.raises(ValueError, match="no batches"):
        quantize_static_int8(model, [])
    with pytest.raises(ValueError, match="backend"):
        quantize_static_int8(model, _batches(1), backend="cuda")
