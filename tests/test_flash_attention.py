"""The course's FlashAttention (forward with log-sum-exp, backward recomputing tiles) against
torch's SDPA: outputs and gradients to 1e-5 in FP32, and what autograd keeps."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention.flash import flash_attention, flash_backward, flash_forward, saved_bytes
from course_lib.attention.sdpa import naive_attention


def _qkv(length, *, seed=0, batch=2, heads=3, head_dim=32, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, head_dim, generator=g, dtype=dtype,
                        requires_grad=True)
            for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length,block_q,block_k", [(300, 64, 64), (257, 32, 48), (64, 128, 16),
                                                    (1, 64, 64)])
def test_outputs_and_gradients_match_sdpa(causal, length, block_q, block_k):
    q, k, v = _qkv(length)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(9))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out)
    out = flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    assert (out - ref).abs().max() <= 1e-5
    for name, a, b in zip("qkv", grads, ref_grads):
        assert (a - b).abs().max() <= 1e-5, f"d{name} differs by {(a - b).abs().max():.2e}"


def test_logsumexp_is_each_rows_and_gradcheck_in_float64():
    q, k, v = _qkv(70, head_dim=8, dtype=torch.float64, batch=1, heads=2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    _, lse = flash_forward(q.detach(), k.detach(), v.detach(), block_q=16, block_k=32)
    assert torch.allclose(lse.double(), torch.logsumexp(scores, dim=-1).detach(), atol=1e-5)
    small = [t.detach()[..., :20, :].clone().requires_grad_(True) for t in (q, k, v)]
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, is_causal=True,
                                                                    block_q=8, block_k=8),
                                    small)


def test_backward_uses_only_the_saved_logsumexp():
    """flash_backward from (q, k, v, O, L) alone gives autograd's gradients of naive attention."""
    q, k, v = _qkv(96, seed=4)
    out, lse = flash_forward(q.detach(), k.detach(), v.detach(), block_q=32, block_k=32)
    grad_out = torch.ones_like(out)
    naive = (q @ k.transpose(-2, -1) / math.sqrt(32)).softmax(-1) @ v
    want = torch.autograd.grad(naive, (q, k, v), grad_out)
    got = flash_backward(q.detach(), k.detach(), v.detach(), out, lse, grad_out, block_q=32,
                         block_k=32)
    for a, b in zip(got, want):
        assert torch.allclose(a, b, atol=1e-5)


def test_saved_for_backward_has_no_length_squared_term():
    for length in (256, 1024):
        q, k, v = (t.detach() for t in _qkv(length, batch=1, heads=4, head_dim=64))
        a = q.numel() * 4
        assert saved_bytes(flash_attention, q, k, v) == a + length * 4 * 4   # O and L (fp32)
        # naive attention keeps the L x L probabilities (and the scaled queries): O(L^2)
        assert saved_bytes(naive_attention, q, k, v) >= 4 * length * length * 4


def test_bad_input_names_the_parameter():
    q, k, v = (t.detach() for t in _qkv(16))
    with pytest.raises(ValueError, match="block_q"):
        flash_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match="4-D"):
        flash_attention(q[0], k, v)
    with pytest.raises(ValueError, match="is_causal"):
        flash_attention(q, k[..., :8, :], v[..., :8, :], is_causal=True)


def test_largest_intermediate_tells_a_tiled_kernel_from_the_naive_formula():
    from course_lib.attention.flash import largest_intermediate
    q, k, v = (t.detach() for t in _qkv(200, batch=2, heads=3, head_dim=32))
    tiled = largest_intermediate(flash_forward, q, k, v, block_q=64, block_k=64)
    assert tiled <= max(q.numel(), 2 * 3 * 64 * 64)
    assert largest_intermediate(naive_attention, q, k, v) >= 2 * 3 * 200 * 200


def test_kept_tiles_counts_the_tiles_a_skipping_kernel_computes():
    from course_lib.attention.figures import kept_tiles, masks_figure
    from course_lib.attention.sdpa import causal_mask, sliding_window_mask, window_tile_fraction
    for length, window, block in ((512, 64, 128), (300, 1, 64), (1000, 200, 128)):
        tiles = kept_tiles(sliding_window_mask(length, window=window), block)
        assert float(tiles.float().mean()) == pytest.approx(
            window_tile_fraction(length, window=window, block_size=block))
    causal = kept_tiles(causal_mask(256), 64)
    # on and below the diagonal
    assert causal.tolist() == torch.ones(4, 4, dtype=torch.bool).tril().tolist()
    fig = masks_figure({"causal": causal_mask(256)}, block=64)
    assert "62%" in fig.axes[0].get_title()   # 10 of 16 tiles
    with pytest.raises(ValueError, match="block"):
        kept_tiles(causal_mask(8), 0)
    with pytest.raises(ValueError, match="mask"):   # an additive float mask would read inverted
        kept_tiles(torch.zeros(8, 8), 4)
