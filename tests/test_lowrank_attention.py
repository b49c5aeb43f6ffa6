"""Low-rank attention against exact attention: equal at full rank with identity projections,
shapes and errors, the effective rank of attention matrices we can reason about, FLOPs by hand."""
import math

import pytest
import torch

from course_lib.attention import lowrank as LR


def qkv(length=64, d=16, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(2, 2, length, d, generator=g) for _ in range(3)]


def exact(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_identity_projections_give_exact_attention():
    q, k, v = qkv()
    eye = torch.eye(64)
    assert torch.allclose(LR.lowrank_attention(q, k, v, eye, eye), exact(q, k, v), atol=1e-5)


def test_pooling_rows_average_segments_and_errors_are_clear():
    q, k, v = qkv()
    p = LR.pooling(64, 8)
    assert p.shape == (8, 64) and torch.allclose(p.sum(1), torch.ones(8))
    assert torch.equal((p > 0).sum(1), torch.full((8,), 8))       # 8 positions each
    uneven = LR.pooling(10, 3)
    assert torch.allclose(uneven.sum(1), torch.ones(3)) and int((uneven > 0).sum()) == 10
    e = f = p
    assert LR.lowrank_attention(q, k, v, e, f).shape == q.shape
    with pytest.raises(ValueError, match="rank"):
        LR.pooling(64, 65)
    with pytest.raises(ValueError, match="length"):
        LR.lowrank_attention(q, k[..., :32, :], v, e, f)


def test_diffuse_attention_is_low_rank_and_survives_sharp_attention_does_not():
    diffuse, sharp = qkv(scale=0.1), qkv(scale=3.0)
    assert LR.effective_rank(*diffuse[:2]) <= 2               # nearly uniform rows: rank about one
    assert LR.effective_rank(*sharp[:2]) > 20
    e = f = LR.pooling(64, 16)
    err_diffuse = LR.relative_error(LR.lowrank_attention(*diffuse, e, f), exact(*diffuse))
    err_sharp = LR.relative_error(LR.lowrank_attention(*sharp, e, f), exact(*sharp))
    assert err_diffuse < 0.5 < err_sharp


def test_uniform_attention_has_rank_one():
    q = torch.zeros(1, 1, 8, 4)
    assert LR.effective_rank(q, torch.randn(1, 1, 8, 4)) == 1


def test_flops_by_hand():
    assert LR.attention_flops(length=4096, head_dim=64) == 4 * 4096 ** 2 * 64
    assert LR.attention_flops(length=4096, head_dim=64, rank=256) == 8 * 4096 * 256 * 64
    assert LR.attention_flops(length=4096, head_dim=64) / LR.attention_flops(length=4096, head_dim=64, rank=256) \
        == pytest.approx(4096 / (2 * 256))
    assert math.isclose(LR.relative_error(torch.ones(3), torch.ones(3)), 0.0)


def test_sharpness_sweep_error_grows_with_sharpness():
    rows = LR.sharpness_sweep([0.05, 3.0], length=64, heads=2, head_dim=16, rank=8,
                              generator=torch.Generator().manual_seed(0))
    assert [r["scale"] for r in rows] == [0.05, 3.0]
    assert rows[0]["error"] < 0.1 < 0.5 < rows[1]["error"]
    assert rows[0]["effective_rank"] < rows[1]["effective_rank"]
