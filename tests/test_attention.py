"""Attention kernels agree; masks have the intended pattern; the memory model is right."""
import pytest
import torch
import torch.nn as nn

from course_lib.attention import sdpa as A
from course_lib.attention import memory as M


def _qkv(b=2, h=3, length=70, d=16, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, length, d, generator=g).requires_grad_(grad) for _ in range(3)]


MASKS = {
    "none": lambda n: None,
    "window": lambda n: A.sliding_window_mask(n, window=5),
    "window_causal": lambda n: A.sliding_window_mask(n, window=7, causal=True),
    "block_sparse": lambda n: A.block_sparse_mask(n, block_size=16, neighbors=0, global_tokens=3),
    "per_batch": lambda n: (torch.rand(2, 1, n, n,
                                       generator=torch.Generator().manual_seed(1)) < 0.5)
    | torch.eye(n, dtype=torch.bool),
}


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("causal", [False, True])
def test_three_kernels_agree_fp32(mask_name, causal):
    q, k, v = _qkv()
    mask = MASKS[mask_name](q.shape[-2])
    ref = A.naive_attention(q, k, v, mask=mask, is_causal=causal)
    assert torch.isfinite(ref).all()
    for out in (A.sdpa_attention(q, k, v, mask=mask, is_causal=causal),
                A.tiled_attention(q, k, v, mask=mask, is_causal=causal, block_size=16),
                A.tiled_attention(q, k, v, mask=mask, is_causal=causal, block_size=128)):
        assert (out - ref).abs().max().item() <= 1e-5


def test_tiled_gradients_match_naive_with_and_without_recompute():
    q, k, v = _qkv(length=40, grad=True)
    mask = A.sliding_window_mask(40, window=6)
    A.naive_attention(q, k, v, mask=mask, is_causal=True).pow(2).sum().backward()
    ref = [t.grad.clone() for t in (q, k, v)]
    for recompute in (False, True):
        for t in (q, k, v):
            t.grad = None
        A.tiled_attention(q, k, v, mask=mask, is_causal=True, block_size=16,
                          recompute=recompute).pow(2).sum().backward()
        for r, t in zip(ref, (q, k, v)):
            assert (r - t.grad).abs().max().item() <= 1e-5


def test_masks_have_intended_patterns():
    c = A.causal_mask(5)
    assert c.dtype == torch.bool and c[3, 2] and c[3, 3] and not c[2, 3]
    assert int(c.sum()) == 15
    w = A.sliding_window_mask(8, window=2)
    assert w[4].tolist() == [False, False, True, True, True, True, True, False]
    assert torch.equal(w, w.T)
    wc = A.sliding_window_mask(8, window=2, causal=True)
    assert wc[4].tolist() == [False, False, True, True, True, False, False, False]
    b = A.block_sparse_mask(8, block_size=2, neighbors=0)
    assert b[2].tolist() == [False, False, True, True, False, False, False, False]
    bg = A.block_sparse_mask(8, block_size=2, neighbors=1, global_tokens=1)
    assert bg[0].all() and bg[:, 0].all()
    assert bg[4].tolist() == [True, False, True, True, True, True, True, True]
    assert c.float().mean().item() == pytest.approx(15 / 25)   # the share computed
    assert torch.equal(A.to_mha_mask(c), ~c)


def test_masks_reach_multihead_attention_inverted():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(1, 12, 16)
    allowed = A.sliding_window_mask(12, window=2)
    out, _ = mha(x, x, x, attn_mask=A.to_mha_mask(allowed), need_weights=False)
    w_in, b_in = mha.in_proj_weight, mha.in_proj_bias
    q, k, v = (x @ w_in.T + b_in).chunk(3, dim=-1)
    split = lambda t: t.view(1, 12, 2, 8).transpose(1, 2)  # noqa: E731
    ref = A.naive_attention(split(q), split(k), split(v), mask=allowed)
    ref = mha.out_proj(ref.transpose(1, 2).reshape(1, 12, 16))
    assert (out - ref).abs().max().item() <= 1e-5


def test_article_arguments_do_not_exist():
    with pytest.raises(TypeError, match="sparse"):
        nn.MultiheadAttention(16, 2, sparse=True)
    with pytest.raises(TypeError, match="self_attn"):
        nn.TransformerEncoderLayer(16, 2, self_attn=True)


def test_sdpa_backend_is_named():
    q, k, v = _qkv(length=32)
    name = A.sdpa_backend(q, k, v)
    assert name in {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH",
                    "OVERRIDEABLE", "unknown"}
    rows = A.sdpa_backend_table("cpu", length=16, head_dim=8)
    assert {r[0] for r in rows} == {"float32", "bfloat16"} and len(rows) == 6


@pytest.mark.parametrize("bad", [
    lambda q, k, v: A.naive_attention(q[0], k, v),
    lambda q, k, v: A.sdpa_attention(q, k[..., :8], v),
    lambda q, k, v: A.tiled_attention(q, k, v[:, :, :5]),
    lambda q, k, v: A.naive_attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool)),
    lambda q, k, v: A.naive_attention(q, k, v, mask=torch.ones(70, 70)),
    lambda q, k, v: A.tiled_attention(q, k, v, block_size=0),
])
def test_bad_shapes_raise_value_error(bad):
    with pytest.raises(ValueError):
        bad(*_qkv())


@pytest.mark.parametrize("window", [0, -3, 1.5])
def test_bad_window_raises(window):
    with pytest.raises(ValueError, match="window"):
        A.sliding_window_mask(10, window=window)


def test_other_bad_mask_arguments():
    with pytest.raises(ValueError, match="length"):
        A.causal_mask(0)
    with pytest.raises(ValueError, match="block_size"):
        A.block_sparse_mask(10, block_size=0)
    with pytest.raises(ValueError, match="global_tokens"):
        A.block_sparse_mask(10, block_size=2, global_tokens=11)


def test_memory_model_matches_hand_computation():
    # 2 sequences, 8 heads, 4096 tokens, fp32: 2 * 8 * 4096 * 4096 * 4 bytes = 1 GiB
    assert M.score_matrix_bytes(2, 8, 4096) == 2 * 8 * 4096 * 4096 * 4 == 2**30
    assert M.score_matrix_bytes(1, 1, 10, bytes_per_element=2, key_length=3) == 60
    est = M.predict_memory(method="naive", batch=1, heads=8, length=4096, head_dim=64)
    assert est.score_matrix == 512 * 2**20
    assert est.activations == 8 * 4096 * 64 * 4
    assert est.peak_extra == 2 * 512 * 2**20 + 8 * 2**20
    sdpa = M.predict_memory(method="sdpa", batch=1, heads=8, length=4096, head_dim=64)
    assert sdpa.peak_extra == 8 * 2**20 + 8 * 4096 * 4
    assert sdpa.peak_extra < est.peak_extra / 100
    with pytest.raises(ValueError, match="method"):
        M.predict_memory(method="fast", batch=1, heads=1, length=4, head_dim=4)
    # FlashAttention's backward: 5 A, one log-sum-exp per row and four 128 x 128 tiles, by hand
    fl = M.predict_memory(method="flash", batch=1, heads=8, length=4096, head_dim=64, backward=True)
    assert fl.peak_extra == 5 * 8 * 4096 * 64 * 4 + 8 * 4096 * 4 + 4 * 8 * 128 * 128 * 4
    saved = M.predict_memory(method="tiled", batch=1, heads=8, length=4096, head_dim=64,
                             backward=True)
    assert saved.peak_extra == 2 * 512 * 2**20 + (4096 // 128 + 5) * 8 * 4096 * 64 * 4
    assert fl.peak_extra < saved.peak_extra / 30
    with pytest.raises(ValueError, match="length"):
        M.score_matrix_bytes(1, 1, 0)


def test_attention_case_and_sweep_run():
    run = M.attention_case(method="tiled", batch=1, heads=2, length=32, head_dim=8,
                           causal=True, backward=True, window=4, prepare=True)
    run()
    rows = M.sweep([16, 32], heads=2, head_dim=8, repeats={16: 2, 32: 1}, warmup=0,
                   progress=False)
    assert len(rows) == 6 and {r["method"] for r in rows} == {"naive", "sdpa", "tiled"}
    assert all(r["ms"] > 0 for r in rows)
    assert {(r["device"], r["dtype"]) for r in rows} == {("cpu", "float32")}


def test_sweep_in_bf16_and_clear_errors():
    rows = M.sweep([16], heads=2, head_dim=8, repeats=1, warmup=0, dtype="bfloat16",
                   methods=("naive", "sdpa"), progress=False)
    assert [r["dtype"] for r in rows] == ["bfloat16", "bfloat16"]
    with pytest.raises(ValueError, match="dtype must be one of"):
        M.attention_case(method="sdpa", batch=1, heads=1, length=8, head_dim=8, dtype="fp8")
    with pytest.raises(ValueError, match="must be CUDA"):
        M.cuda_peak(dict(method="sdpa", batch=1, heads=1, length=8, head_dim=8))


def test_measured_peak_of_naive_attention_follows_the_model():
    """One subprocess per case: the naive score matrices show up in the peak RSS."""
    case = dict(batch=1, heads=4, length=1024, head_dim=32, threads=1)
    naive, sdpa = M.measure_peaks([dict(case, method="naive"), dict(case, method="sdpa")])
    model = M.predict_memory(method="naive", batch=1, heads=4, length=1024, head_dim=32)
    assert 0.8 * model.peak_extra <= naive <= 1.5 * model.peak_extra
    assert sdpa < naive / 5


@pytest.mark.parametrize("length, window, block", [(64, 1, 8), (64, 8, 8), (64, 9, 8), (70, 20, 16),
                                                   (32, 100, 8), (17, 3, 4)])
def test_window_tile_fraction_counts_the_tiles_the_mask_touches(length, window, block):
    from course_lib.attention.sdpa import sliding_window_mask, window_tile_fraction
    m = sliding_window_mask(length, window=window)
    n = -(-length // block)
    padded = torch.zeros(n * block, n * block, dtype=torch.bool)
    padded[:length, :length] = m
    tiles = padded.view(n, block, n, block).any(3).any(1)       # a tile with any allowed pair
    assert window_tile_fraction(length, window=window, block_size=block) == pytest.approx(
        tiles.float().mean().item())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch.compile's own internals
def test_flex_window_matches_sdpa_with_the_window_mask_and_skips_the_untouched_tiles():
    from course_lib.attention.sdpa import sdpa_attention, sliding_window_mask, window_tile_fraction
    from course_lib.attention.sparse import FlexWindow
    L, W, B = 256, 20, 64
    try:
        flex = FlexWindow(window=W, block_size=B)
        fn, skipped = flex.block_masked(L)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, L, 16, generator=g) for _ in range(3))
        out, scored = fn(q, k, v), flex.score_masked(q, k, v)
    except Exception as err:   # no C++ compiler for Inductor, or no FlexAttention here
        pytest.skip(f"FlexAttention unavailable here: {err}")
    ref = sdpa_attention(q, k, v, mask=sliding_window_mask(L, window=W))
    assert torch.allclose(out, ref, atol=1e-4) and torch.allclose(scored, ref, atol=1e-4)
    assert skipped == pytest.approx(1 - window_tile_fraction(L, window=W, block_size=B))
    with pytest.raises(ValueError, match="window"):
        FlexWindow(window=0, block_size=B)


def test_the_flex_plan_skips_only_for_a_stated_reason():
    from course_lib.attention.sdpa import flex_plan
    from course_lib.measure.results import NEEDS
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:   # torch < 2.5: no FlexAttention, whatever the device
        needs, why = flex_plan("cpu", compiler=(True, "available"))
        assert "has no FlexAttention" in why and torch.__version__ in why
        return
    assert flex_plan("cpu", compiler=(True, "available")) is None
    needs, why = flex_plan("cpu", compiler=(False, "no C++ compiler"))
    assert needs == "compiler" and "no C++ compiler" in why and needs in NEEDS
    assert flex_plan("cuda", compiler=(False, "x"))[0] == "cuda"


def test_lookups_find_the_row_or_case_asked_for_and_name_what_is_missing():
    from course_lib.attention.memory import ms_at, peak_of, predict_case, predict_memory
    rows = [{"method": "naive", "length": 64, "ms": 1.5},
            {"method": "sdpa", "length": 64, "ms": 0.5}]
    assert ms_at(rows, method="sdpa", length=64) == 0.5
    with pytest.raises(KeyError, match="method='tiled', length=64"):
        ms_at(rows, method="tiled", length=64)
    base = dict(batch=2, heads=4, head_dim=16, block_size=32)
    cases = [dict(base, method="tiled", length=128),
             dict(base, method="tiled", length=128, backward=True),
             dict(base, method="flash", length=128, backward=True)]
    assert peak_of(cases, [10, 20, 30], method="tiled", length=128, backward=True) == 20
    assert peak_of(cases, [10, 20, 30], method="flash", length=128, backward=True) == 30
    with pytest.raises(KeyError, match="window=8"):
        peak_of(cases, [10, 20, 30], method="tiled", length=128, window=8)
    assert predict_case(cases[2]) == predict_memory(method="flash", batch=2, heads=4, length=128,
                                                    head_dim=16, backward=True, block_size=32)


def test_tiled_backward_model_counts_what_autograd_saves():
    """The model's saved term, 2 S + (L/block) A for the tiles and running sums, against
    saved_tensors_hooks' count (within two A for the scaled queries and running maxima)."""
    from course_lib.attention.memory import predict_memory
    for length in (512, 1024):
        q, k, v = (torch.randn(1, 4, length, 64, requires_grad=True) for _ in range(3))
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            A.tiled_attention(q, k, v, block_size=128)
        saved = sum(seen.values()) - 3 * q.numel() * 4                  # beyond the inputs
        est = predict_memory(method="tiled", batch=1, heads=4, length=length, head_dim=64,
                             backward=True)
        a = est.activations
        model_saved = 2 * est.score_matrix + (length // 128) * a
        assert model_saved <= saved <= model_saved + 2 * a, (saved, model_saved)
