"""Tests of course_lib.quant: the quantizer (int8) and the int8 model paths (dynamic)."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from course_lib.measure.memory import state_dict_bytes
from course_lib.measure.scoring import agreement
from course_lib.quant import int8 as quant
from course_lib.quant import dynamic as quant_dynamic
from course_lib.core.batching import make_loader
from course_lib.core.data import load_corpus
from course_lib.core.model import build_model
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import predict

CASES = [(b, s, g) for b in range(2, 9) for s in quant.SCHEMES for g in quant.GRANULARITIES]


def _weights(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 32, generator=g) * torch.rand(16, 1, generator=g) * 3


@pytest.mark.parametrize("bits,scheme,granularity", CASES)
def test_round_trip_error_at_most_half_a_step_inside_range(bits, scheme, granularity):
    x = _weights(bits)
    p = quant.calibrate(x, bits=bits, scheme=scheme, granularity=granularity)
    err = (quant.dequantize(quant.quantize(x, p), p) - x).abs()
    assert quant.within_range(x, p).all()  # min/max calibration clips nothing
    bound = (p.scale / 2).expand_as(x) * (1 + 1e-5) + 1e-7
    assert (err <= bound).all()
    # with clipping, the bound still holds for every element inside the clipping range
    pc = quant.calibrate(x, bits=bits, scheme=scheme, granularity=granularity, clip=0.5)
    inside = quant.within_range(x, pc)
    assert 0 < int(inside.sum()) < x.numel()
    err = (quant.dequantize(quant.quantize(x, pc), pc) - x).abs()
    assert (err[inside] <= ((pc.scale / 2).expand_as(x) * (1 + 1e-5) + 1e-7)[inside]).all()


@pytest.mark.parametrize("bits,scheme,granularity", CASES)
@pytest.mark.parametrize("clip", [1.0, 0.5, 0.1])
def test_integers_stay_inside_the_grid(bits, scheme, granularity, clip):
    x = _weights(100 + bits) * 10
    p = quant.calibrate(x, bits=bits, scheme=scheme, granularity=granularity, clip=clip)
    q = quant.quantize(x, p)
    qmin, qmax = quant.int_range(bits, scheme)
    assert (p.qmin, p.qmax) == (qmin, qmax)
    assert int(q.min()) >= qmin and int(q.max()) <= qmax
    assert len(torch.unique(q)) <= 2 ** bits


def test_clipping_error_appears_only_when_clipping():
    x = _weights(7)
    full = quant.error_breakdown(x, quant.calibrate(x, bits=4))
    clipped = quant.error_breakdown(x, quant.calibrate(x, bits=4, clip=0.3))
    assert full["clipping_mse"] == 0.0 and full["clipped_fraction"] == 0.0
    assert clipped["clipping_mse"] > 0.0 and clipped["clipped_fraction"] > 0.0
    assert clipped["rounding_mse"] < full["rounding_mse"]   # a finer grid inside the range


@pytest.mark.parametrize("scheme", quant.SCHEMES)
def test_per_channel_beats_per_tensor_with_unequal_channel_ranges(scheme):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g) * torch.logspace(-3, 0, 8).unsqueeze(1)
    err = {gran: (quant.fake_quantize(x, bits=8, scheme=scheme, granularity=gran) - x) ** 2
           for gran in quant.GRANULARITIES}
    assert float(err["per_channel"].mean()) <= float(err["per_tensor"].mean())
    # the narrow channel gets its own fine grid instead of the wide channel's coarse one
    assert float(err["per_channel"][0].mean()) < 0.01 * float(err["per_tensor"][0].mean())


def test_sqnr_gains_about_6_db_per_bit():
    x = torch.rand(10_000, generator=torch.Generator().manual_seed(0)) * 2 - 1
    s8 = quant.sqnr_db(x, quant.fake_quantize(x, bits=8))
    s4 = quant.sqnr_db(x, quant.fake_quantize(x, bits=4))
    assert 20 < s8 - s4 < 28
    assert quant.sqnr_db(x, x) == float("inf")


@pytest.mark.parametrize("bits", [1, 9, 0, 16, 4.0, True])
def test_bits_outside_2_to_8_are_rejected(bits):
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 8\]"):
        quant.calibrate(torch.ones(3), bits=bits)
    with pytest.raises(ValueError, match="bits"):
        quant.fake_quantize_model(torch.nn.Linear(2, 2), bits=bits)


def test_unknown_options_are_rejected():
    x = torch.ones(4, 4)
    with pytest.raises(ValueError, match="scheme must be one of"):
        quant.calibrate(x, scheme="asymmetric")
    with pytest.raises(ValueError, match="granularity must be one of"):
        quant.calibrate(x, granularity="per_row")
    with pytest.raises(ValueError, match=r"clip must be in \(0, 1\]"):
        quant.calibrate(x, clip=0.0)
    with pytest.raises(ValueError, match="axis"):
        quant.calibrate(x, granularity="per_channel", axis=2)
    with pytest.raises(ValueError, match="dtype"):
        quant_dynamic.cast_model(torch.nn.Linear(2, 2), torch.int8)


def test_all_zero_tensor_is_exact():
    x = torch.zeros(3, 5)
    for scheme in quant.SCHEMES:
        assert torch.equal(quant.fake_quantize(x, scheme=scheme), x)


@pytest.fixture(scope="module")
def trained():
    """The stored baseline if there is one, else a small model trained in seconds."""
    corpus = load_corpus(scale=0.1)
    try:
        from course_lib.core.checkpoints import load_baseline
        model, _ = load_baseline(corpus, train_if_missing=False)
    except FileNotFoundError:
        torch.manual_seed(0)
        model = build_model(len(corpus.vocab), preset="student")
        loader = make_loader(corpus.train, batch_size=32, seed=0, max_length=64)
        train(model, loader, cfg=TrainConfig(epochs=8, lr=3e-3), progress=False)
    return model.eval(), make_loader(corpus.test, batch_size=64, shuffle=False)


def test_dynamic_int8_agrees_with_fp32_and_warns_nothing(trained):
    model, loader = trained
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the deprecation warnings are handled inside
        q = quant_dynamic.quantize_dynamic_int8(model)
    ref, _ = predict(model, loader)
    got, _ = predict(q, loader)
    assert 0.05 < float(ref.argmax(-1).float().mean()) < 0.95, "the model predicts one class"
    assert agreement(ref, got) >= 0.98


def test_dynamic_int8_runs_under_bf16_autocast_and_agrees(trained):
    # Mixed precision + int8 (lesson 14): without the cast back to FP32 the int8 kernel raises
    # "expected scalar type Float but found BFloat16" on a CPU with BF16 autocast.
    model, loader = trained
    q = quant_dynamic.quantize_dynamic_int8(model)
    plain, _ = predict(q, loader)
    mixed, _ = predict(q, loader, autocast_dtype=torch.bfloat16)
    assert not torch.equal(plain, mixed)          # the rest of the model did run in BF16
    assert agreement(plain, mixed) >= 0.95


def test_every_matrix_of_the_course_model_is_quantized(trained):
    model, _ = trained
    q = quant_dynamic.quantize_dynamic_int8(model)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    # every Linear, holders not counted
    assert quant_dynamic.count_quantized_linear(q) == n_linear > 0
    assert quant_dynamic.count_quantized_linear(model) == 0
    groups = {r["group"]: r for r in quant_dynamic.size_report(q)}
    assert set(groups) == {"int8", "embedding", "other"}
    assert groups["int8"]["dtype"] == "qint8"
    fp = {r["group"]: r for r in quant_dynamic.size_report(model)}
    matrices = sum(p.numel() for _, p in quant.matmul_weights(model))
    assert fp["linear_fp"]["numel"] == groups["int8"]["numel"] == matrices
    assert fp["linear_fp"]["bytes"] / groups["int8"]["bytes"] > 3.9   # 4x, plus scales
    # The checkpoint: int8 matrices plus FP32 embeddings, norms and biases, by hand.
    rest = sum(p.numel() for n, p in model.named_parameters() if not any(
        n == f"{name}" for name, _ in quant.matmul_weights(model)))
    by_hand = matrices + 4 * rest
    assert state_dict_bytes(q) == pytest.approx(by_hand, rel=0.15)


def test_torchs_attention_keeps_two_projections_fp32():
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    q = quant_dynamic.quantize_dynamic_int8(nn.Sequential(layer))
    groups = {r["group"]: r for r in quant_dynamic.size_report(q)}
    for g in ("in_proj", "out_proj"):
        assert groups[g]["dtype"] == "float32" and groups[g]["why"]
    assert groups["in_proj"]["numel"] == 3 * 16 * 16 and groups["out_proj"]["numel"] == 16 * 16


def test_fake_quantized_model_weights_lie_on_the_grid(trained):
    model, _ = trained
    f = quant.fake_quantize_model(model, bits=3, granularity="per_channel")
    names = dict(quant.matmul_weights(f))
    assert any(n.endswith("attn.qkv.weight") for n in names)
    assert any(n.endswith("in_proj_weight") for n, _ in quant.matmul_weights(
        nn.TransformerEncoderLayer(16, 2, 32)))
    for w in names.values():
        for row in w:
            assert len(torch.unique(row)) <= 2 ** 3
    emb = dict(f.named_parameters())["tok.weight"]
    assert torch.equal(emb, dict(model.named_parameters())["tok.weight"])


def test_cast_model_and_torchao_option(trained):
    model, _ = trained
    assert all(p.dtype == torch.bfloat16 for p in
               quant_dynamic.cast_model(model, torch.bfloat16).parameters())
    if not quant_dynamic.torchao_available():
        with pytest.raises(ImportError, match="torchao"):
            quant_dynamic.quantize_torchao_int8(model)


def test_per_channel_dynamic_int8_is_closer_to_fp32_on_a_layer_with_uneven_rows():
    """Rows of very different scale: one per-tensor step is coarse for the small rows, a
    per-channel step per row is not (the effect behind lesson 15's per-channel row)."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 8)
    with torch.no_grad():
        lin.weight.mul_(torch.logspace(-2, 1, 8).unsqueeze(1))   # row scales from 0.01 to 10
    net = nn.Sequential(lin)
    x = torch.randn(32, 64)
    ref = net(x)
    err = {pc: (quant_dynamic.quantize_dynamic_int8(net, per_channel=pc)(x) - ref)[:, 0].abs().max()
           for pc in (False, True)}
    assert err[True] < err[False] / 5


def test_the_gpu_int8_plan_names_what_is_missing():
    from course_lib.quant import gpu as quant_gpu
    assert quant_gpu.plan("cpu")[0] == "cuda"
    assert quant_gpu.plan("cuda", has_torchao=False)[0] == "torchao"     # a GPU without torchao
    assert quant_gpu.plan("cuda", has_torchao=True) is None
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cannot run here"):
            quant_gpu.compare_int8_weight_only(nn.Linear(2, 2), {}, [], device="cpu")


@pytest.mark.parametrize("scheme", ["symmetric", "affine"])
@pytest.mark.parametrize("bits", [8, 4])
def test_fake_quantize_matches_torchs_own(scheme, bits):
    # torch's fake_quantize_* with our scale and zero point: the same grid, the same rounding (it
    # multiplies by 1/scale where we divide, so a value exactly on a half step may round apart).
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(16, 32, generator=g) * torch.linspace(0.1, 3, 16)[:, None] + 0.3
    p = quant.calibrate(x, bits=bits, scheme=scheme)
    ref = torch.fake_quantize_per_tensor_affine(x, float(p.scale), int(p.zero_point), p.qmin,
                                                p.qmax)
    got = quant.fake_quantize(x, bits=bits, scheme=scheme)
    assert (got == ref).float().mean() >= 0.999
    assert (got - ref).abs().max() <= float(p.scale) * 1.0001
    pc = quant.calibrate(x, bits=bits, scheme=scheme, granularity="per_channel", axis=0)
    ref = torch.fake_quantize_per_channel_affine(x, pc.scale.flatten(),
                                                 pc.zero_point.flatten().to(torch.int32),
                                                 0, pc.qmin, pc.qmax)
    got = quant.fake_quantize(x, bits=bits, scheme=scheme, granularity="per_channel", axis=0)
    assert (got == ref).float().mean() >= 0.999
    assert ((got - ref).abs() <= pc.scale * 1.0001).all()


def test_a_pruned_row_stays_zero_in_the_emulated_int8_linear():
    """An all-zero weight row (a pruned neuron) has no range; per channel its scale would be 0
    and 0 / 0 NaN. The output there is the bias alone, and the other rows are unchanged."""
    from course_lib.quant.kernel import emulate_dynamic_linear

    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 8, generator=g)
    w[2] = 0.0
    x, b = torch.rand(3, 8, generator=g), torch.tensor([0.1, 0.2, 0.3, 0.4])
    y = emulate_dynamic_linear(x, w, b, per_channel=True)
    assert torch.isfinite(y).all() and torch.equal(y[:, 2], torch.full((3,), 0.3))
    keep = [0, 1, 3]
    alone = emulate_dynamic_linear(x, w[keep], b[keep], per_channel=True)
    assert torch.allclose(y[:, keep], alone)


def test_size_report_counts_each_rows_scale_and_zero_point_per_channel():
    """Per tensor: one scale and zero point (8 bytes); per channel: a float64 scale and an int64
    zero point for every output row, 16 bytes each, counted by hand."""
    lin = nn.Sequential(nn.Linear(16, 6))
    for per_channel, extra in ((False, 8), (True, 6 * (8 + 8))):
        q = quant_dynamic.quantize_dynamic_int8(lin, per_channel=per_channel)
        (row,) = [r for r in quant_dynamic.size_report(q) if r["group"] == "int8"]
        assert row["numel"] == 6 * 16 and row["bytes"] == 6 * 16 + extra
