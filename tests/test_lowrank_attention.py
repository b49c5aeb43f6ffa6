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
    """Attention written out: softmax(q kᵀ / √d) v (the reference; the library calls SDPA)."""
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v


def test_identity_projections_give_exact_attention():
    q, k, v = qkv()
    eye = torch.eye(64)
    assert torch.allclose(LR.lowrank_attention(q, k, v, eye, eye), exact(q, k, v), atol=1e-5)


def test_pooled_attention_is_the_formula_on_the_projected_keys_and_values():
    q, k, v = qkv()
    e, f = LR.pooling(64, 8), torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    want = exact(q, e @ k, f @ v)   # softmax(q (e k)ᵀ / √d) (f v), written out
    assert torch.allclose(LR.lowrank_attention(q, k, v, e, f), want, atol=1e-5)


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
    assert (LR.attention_flops(length=4096, head_dim=64)
            / LR.attention_flops(length=4096, head_dim=64, rank=256)
            == pytest.approx(4096 / (2 * 256)))
    assert math.isclose(LR.relative_error(torch.ones(3), torch.ones(3)), 0.0)


def test_sharpness_sweep_error_grows_with_sharpness():
    rows = LR.sharpness_sweep([0.05, 3.0], length=64, heads=2, head_dim=16, rank=8,
                              generator=torch.Generator().manual_seed(0))
    assert [r["scale"] for r in rows] == [0.05, 3.0]
    assert rows[0]["error"] < 0.1 < 0.5 < rows[1]["error"]
    assert rows[0]["effective_rank"] < rows[1]["effective_rank"]


def test_pooled_attention_factor_one_is_the_model_and_restores_it():
    from course_lib.core.model import build_model
    model = build_model(50, preset="teacher", seed=0).eval()
    ids = torch.randint(1, 50, (3, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        exact = model(ids)
        with LR.pooled_attention(model, factor=1):
            same = model(ids)
        with LR.pooled_attention(model, factor=4):
            pooled = model(ids)
        after = model(ids)
    assert torch.allclose(same, exact, atol=1e-5)
    assert not torch.allclose(pooled, exact, atol=1e-3)      # pooling changed the attention
    assert torch.equal(after, exact)                          # the model's own forward is back
    padded = ids.clone()
    padded[0, -5:] = 0
    with pytest.raises(ValueError, match="padding"), LR.pooled_attention(model, factor=2):
        model(padded)
    with pytest.raises(ValueError, match="factor"), LR.pooled_attention(model, factor=0):
        pass


def test_pooled_bias_is_the_segment_mean_of_the_alibi_bias():
    """Pooled attention by hand for one head: scores to segment means plus the mean bias."""
    from course_lib.core.model import build_model
    model = build_model(30, preset="teacher", seed=1).eval()
    attn = model.blocks[0].attn
    x = torch.randn(1, 12, model.cfg.d_model, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode(), LR.pooled_attention(model, factor=3):
        got = attn(x, None)
    q, k, v = (t.view(1, 12, attn.n_heads, -1).transpose(1, 2) for t in attn.qkv(x).chunk(3, -1))
    from course_lib.core.model import alibi_bias
    bias = alibi_bias(12, attn.slopes)
    seg = [range(0, 3), range(3, 6), range(6, 9), range(9, 12)]
    ks = torch.stack([k[..., list(s), :].mean(-2) for s in seg], -2)
    vs = torch.stack([v[..., list(s), :].mean(-2) for s in seg], -2)
    bs = torch.stack([bias[..., list(s)].mean(-1) for s in seg], -1)
    y = ((q @ ks.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + bs).softmax(-1) @ vs
    want = attn.proj(y.transpose(1, 2).reshape(1, 12, -1))
    assert torch.allclose(got, want.detach(), atol=1e-5)


def test_accuracy_over_pooling_batches_by_length_and_keeps_every_review():
    from course_lib.core.model import build_model

    class Items:
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.items = [{"input_ids": torch.randint(1, 30, (n,), generator=g), "label": n % 2}
                          for n in (5, 9, 9, 12, 12, 12, 3)]

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]
    model = build_model(30, preset="teacher", seed=0)
    out = LR.accuracy_over_pooling(model, Items(), [2, 4], min_length=5, batch_size=2)
    assert out["n"] == 6 and sorted(out["lengths"]) == [5, 9, 9, 12, 12, 12]
    assert set(out["correct"]) == {1, 2, 4} and all(len(c) == 6 for c in out["correct"].values())
    with pytest.raises(ValueError, match="no review"):
        LR.accuracy_over_pooling(model, Items(), [2], min_length=100)
