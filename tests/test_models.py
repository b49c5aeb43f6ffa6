import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.core.model import (EncoderClassifier, EncoderConfig, build_model, count_parameters,
                               padding_mask)
from course_lib.core.model import apply_rotary, rotary_tables


def tiny(**kw):
    return EncoderClassifier(EncoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2,
                                           d_ff=32, max_len=64, **kw))


def test_output_shapes_classification_and_regression():
    ids = torch.randint(2, 20, (3, 10))
    assert tiny()(ids).shape == (3, 2)
    assert tiny(n_outputs=1)(ids).shape == (3,)


@pytest.mark.parametrize("positions", ["alibi", "rope"])
@pytest.mark.parametrize("attention", ["sdpa", "naive"])
def test_padding_does_not_change_the_output(attention, positions):
    torch.manual_seed(0)
    m = tiny(attention=attention, positions=positions).eval()
    ids = torch.randint(2, 20, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 9, dtype=torch.long)], 1)
    with torch.no_grad():
        a = m(ids, torch.ones_like(ids, dtype=torch.bool))
        b = m(padded, padded != 0)
        c = m(padded)                                  # the mask inferred from pad_id
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(a, c, atol=1e-5)


def test_without_the_padding_mask_padding_changes_the_output():
    torch.manual_seed(0)
    m = tiny().eval()
    ids = torch.cat([torch.randint(2, 20, (1, 7)), torch.zeros(1, 9, dtype=torch.long)], 1)
    real = ids != 0
    with torch.no_grad():
        masked = m.head(m.pool(m.encode(m.embed(ids), mask=padding_mask(real)), real))
        unmasked = m.head(m.pool(m.encode(m.embed(ids)), real))
    assert torch.allclose(masked, m(ids), atol=1e-6)
    assert not torch.allclose(masked, unmasked, atol=1e-3)


def rotate_complex(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's complex form, written independently: channel c and c + d/2 are the real and
    imaginary parts of one number, multiplied by exp(i * position * base^(-2c/d))."""
    L, d = x.shape[-2], x.shape[-1]
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double())
    theta = torch.tensor([base ** (-2 * c / d) for c in range(d // 2)], dtype=torch.float64)
    angle = torch.arange(L, dtype=torch.float64)[:, None] * theta
    z = z * torch.polar(torch.ones_like(angle), angle)
    return torch.cat([z.real, z.imag], -1).float()


def test_rotary_matches_the_complex_formulation():
    x = torch.randn(2, 3, 11, 8)
    cos, sin = rotary_tables(11, 8)
    assert torch.allclose(apply_rotary(x, cos, sin), rotate_complex(x), atol=1e-5)


def test_rotary_scores_depend_only_on_the_offset():
    q, k = torch.randn(1, 8), torch.randn(1, 8)
    cos, sin = rotary_tables(40, 8)
    def score(i, j):
        return float(apply_rotary(q, cos[i:i + 1], sin[i:i + 1])
                     @ apply_rotary(k, cos[j:j + 1], sin[j:j + 1]).T)
    assert score(3, 1) == pytest.approx(score(33, 31), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def reference_forward(m, ids):
    """The same model by hand, from its weights: pre-norm blocks, ALiBi as a hand-made bias
    (or complex-form RoPE), softmax attention with a padding mask, GELU feed-forward, final
    norm, mean over real tokens."""
    real = ids != m.cfg.pad_id
    x = m.tok.weight[ids]
    B, L, H = ids.shape[0], ids.shape[1], m.cfg.n_heads
    for blk in m.blocks:
        h = F.layer_norm(x, (x.shape[-1],), blk.ln1.weight, blk.ln1.bias)
        q, k, v = (h @ blk.attn.qkv.weight.T + blk.attn.qkv.bias).chunk(3, -1)
        q, k, v = (t.reshape(B, L, H, -1).transpose(1, 2) for t in (q, k, v))
        if m.cfg.positions == "rope":
            q, k = rotate_complex(q), rotate_complex(k)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if m.cfg.positions == "alibi":
            slopes = [m.cfg.alibi_slope / 4 ** h for h in range(H)]
            s = s - torch.tensor([[[abs(i - j) * a for j in range(L)] for i in range(L)]
                                  for a in slopes])
        s = s.masked_fill(~real[:, None, None, :], float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, -1)
        x = x + o @ blk.attn.proj.weight.T + blk.attn.proj.bias
        h = F.layer_norm(x, (x.shape[-1],), blk.ln2.weight, blk.ln2.bias)
        x = (x + F.gelu(h @ blk.ff.fc1.weight.T + blk.ff.fc1.bias) @ blk.ff.fc2.weight.T
             + blk.ff.fc2.bias)
    x = F.layer_norm(x, (x.shape[-1],), m.ln_f.weight, m.ln_f.bias)
    pooled = (x * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    return pooled @ m.head.weight.T + m.head.bias


@pytest.mark.parametrize("positions", ["alibi", "rope", "none"])
@pytest.mark.parametrize("attention", ["sdpa", "naive"])
def test_model_matches_a_hand_written_forward_in_train_and_eval_mode(attention, positions):
    torch.manual_seed(0)
    m = tiny(attention=attention, positions=positions)
    ids = torch.randint(2, 20, (2, 9))
    ids[1, 6:] = 0
    with torch.no_grad():
        ref = reference_forward(m, ids)
        assert torch.allclose(m.train()(ids), ref, atol=1e-5)
        assert torch.allclose(m.eval()(ids), ref, atol=1e-5)


@pytest.mark.parametrize("positions", ["alibi", "rope"])
def test_naive_and_sdpa_agree_in_value_and_gradient(positions):
    torch.manual_seed(0)
    a = tiny(positions=positions)
    b = tiny(attention="naive", positions=positions)
    b.load_state_dict(a.state_dict())
    ids = torch.randint(2, 20, (3, 12))
    ids[0, 8:] = 0
    a(ids).sum().backward()
    b(ids).sum().backward()
    ga, gb = a.blocks[0].attn.qkv.weight.grad, b.blocks[0].attn.qkv.weight.grad
    assert torch.allclose(ga, gb, atol=1e-5) and ga.abs().sum() > 0


def test_positions_none_makes_the_model_blind_to_word_order():
    torch.manual_seed(0)
    ids = torch.randint(2, 20, (1, 9))
    shuffled = ids[:, torch.randperm(9)]
    blind = tiny(positions="none").eval()
    with torch.no_grad():
        assert torch.allclose(blind(ids), blind(shuffled), atol=1e-5)
        for kind in ("alibi", "rope"):
            m = tiny(positions=kind).eval()
            m.load_state_dict(blind.state_dict())      # neither has parameters of its own
            assert not torch.allclose(m(ids), m(shuffled), atol=1e-4), kind


def test_alibi_bias_and_slopes_match_hand_computation():
    from course_lib.core.model import alibi_bias, alibi_slopes
    b = alibi_bias(3, torch.tensor([1.0, 0.25]))
    hand = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    assert b.shape == (1, 2, 3, 3)
    assert torch.equal(b[0, 0], -hand) and torch.equal(b[0, 1], -0.25 * hand)
    assert torch.equal(alibi_slopes(3, 2.0), torch.tensor([2.0, 0.5, 0.125]))


def test_folded_key_padding_equals_a_boolean_mask():
    from course_lib.core.model import sdpa
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 8) for _ in range(3))
    real = torch.ones(3, 7, dtype=torch.bool)
    real[0, 4:], real[2, 1:] = False, False
    bias = torch.randn(1, 2, 7, 7)
    want = F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias.masked_fill(~real[:, None, None], float("-inf")))
    got = sdpa(q, k, v, mask=real[:, None, None, :], bias=bias, dropout_p=0.0)
    assert torch.allclose(got, want, atol=1e-5)


def test_every_matrix_multiply_is_an_nn_linear():
    m = build_model(30, preset="teacher")
    linear = sum(p.numel() for mod in m.modules() if isinstance(mod, torch.nn.Linear)
                 for p in (mod.weight,))
    matrices = sum(p.numel() for n, p in m.named_parameters()
                   if p.dim() == 2 and not n.startswith("tok"))
    assert linear == matrices


def test_mean_pool_matches_hand_computation():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[True, True, False]])
    assert torch.equal(EncoderClassifier.pool(h, mask), torch.tensor([[2.0, 3.0]]))


def test_parameter_count_matches_formula():
    cfg = EncoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64)
    d, f = cfg.d_model, cfg.d_ff
    per_layer = (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    expected = 20 * d + 2 * per_layer + 2 * d + (d * 2 + 2)
    assert count_parameters(EncoderClassifier(cfg)) == expected


def test_head_dim_sets_the_attention_width():
    m = EncoderClassifier(EncoderConfig(vocab_size=20, d_model=16, n_heads=3, head_dim=4))
    assert m.blocks[0].attn.qkv.out_features == 36 and m.blocks[0].attn.proj.in_features == 12
    assert m(torch.randint(2, 20, (2, 5))).shape == (2, 2)


def test_student_preset_is_at_most_a_quarter_of_the_teacher():
    t, s = build_model(200, preset="teacher"), build_model(200, preset="student")
    assert count_parameters(s) <= 0.25 * count_parameters(t)


def test_seeded_build_is_reproducible_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = build_model(30, seed=7), build_model(30, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = build_model(30, seed=8)
    assert not torch.equal(a.blocks[0].attn.qkv.weight, c.blocks[0].attn.qkv.weight)


@pytest.mark.parametrize("kw, match", [(dict(d_model=10, n_heads=3), "divisible"),
                                        (dict(d_model=12, n_heads=4), "even integer"),
                                        (dict(n_layers=0), "n_layers"),
                                        (dict(dropout=1.0), "dropout"),
                                        (dict(attention="flash"), "attention must be one of"),
                                        (dict(positions="learned"), "positions must be one of"),
                                        (dict(alibi_slope=0.0), "alibi_slope must be > 0"),
                                        (dict(rope_base=1.0), "rope_base"),
                                        (dict(pad_id=20), "pad_id")])
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        EncoderClassifier(EncoderConfig(vocab_size=20, **kw))


def test_bad_input_shape_length_and_mask():
    m = tiny()
    with pytest.raises(ValueError, match="batch, length"):
        m(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        m(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="preset"):
        build_model(20, preset="huge")
    with pytest.raises(ValueError, match="mask must be bool"):
        m.encode(m.embed(torch.ones(1, 9, dtype=torch.long)), mask=torch.zeros(1, 1, 9, 9))
