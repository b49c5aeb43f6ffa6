import pytest
import torch

from course_lib.models import EncoderClassifier, EncoderConfig, build_model, count_parameters


def tiny(**kw):
    return EncoderClassifier(EncoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2,
                                           d_ff=32, max_len=64, **kw))


def test_output_shapes_classification_and_regression():
    ids = torch.randint(2, 20, (3, 10))
    assert tiny()(ids).shape == (3, 2)
    assert tiny(n_outputs=1)(ids).shape == (3,)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_does_not_change_the_output(norm_first):
    torch.manual_seed(0)
    m = tiny(norm_first=norm_first).eval()
    ids = torch.randint(2, 20, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 9, dtype=torch.long)], 1)
    with torch.no_grad():
        a = m(ids, torch.ones_like(ids, dtype=torch.bool))
        b = m(padded, padded != 0)
    assert torch.allclose(a, b, atol=1e-5)


def test_mean_pool_matches_hand_computation():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[True, True, False]])
    assert torch.equal(EncoderClassifier.pool(h, mask), torch.tensor([[2.0, 3.0]]))


def test_parameter_count_matches_formula():
    cfg = EncoderConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=64)
    d, f = cfg.d_model, cfg.d_ff
    per_layer = (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d) + 4 * d
    expected = 20 * d + 64 * d + 2 * per_layer + d * 2 + 2
    assert count_parameters(EncoderClassifier(cfg)) == expected


def test_student_preset_is_at_most_a_quarter_of_the_teacher():
    t, s = build_model(200, preset="teacher"), build_model(200, preset="student")
    assert count_parameters(s) <= 0.25 * count_parameters(t)


@pytest.mark.parametrize("kw, match", [(dict(d_model=10, n_heads=3), "divisible"),
                                        (dict(n_layers=0), "n_layers"),
                                        (dict(dropout=1.0), "dropout"),
                                        (dict(position_bias="rope"), "position_bias must be"),
                                        (dict(alibi_slope=0.0), "alibi_slope must be > 0")])
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        EncoderClassifier(EncoderConfig(vocab_size=20, **kw))


def test_bad_input_shape_and_length():
    m = tiny()
    with pytest.raises(ValueError, match="batch, length"):
        m(torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        m(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="preset"):
        build_model(20, preset="huge")


def test_alibi_bias_matches_hand_computation():
    from course_lib.models import alibi_bias
    b = alibi_bias(3, torch.tensor([1.0, 0.25]))
    hand = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    assert torch.equal(b[0], -hand)
    assert torch.equal(b[1], -0.25 * hand)
    m = tiny(alibi_slope=2.0)
    assert torch.equal(m.alibi_slopes(), torch.tensor([2.0, 0.5]))


def reference_forward(m, ids):
    """The same model by hand: every layer's attention with the ALiBi bias added to the scores."""
    import torch.nn.functional as F
    x = m.embed(ids)
    L, H = ids.shape[1], m.cfg.n_heads
    bias = -m.alibi_slopes()[:, None, None] * (torch.arange(L)[None] - torch.arange(L)[:, None]).abs()
    for layer in m.encoder.layers:
        h = layer.norm1(x)
        q, k, v = F.linear(h, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias).chunk(3, -1)
        split = lambda t: t.view(t.shape[0], L, H, -1).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        att = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(x.shape)
        x = x + layer.self_attn.out_proj(o)
        x = x + layer.linear2(torch.relu(layer.linear1(layer.norm2(x))))
    return m.head(x.mean(1))


def test_alibi_encoder_matches_a_hand_written_attention_in_train_and_eval_mode():
    torch.manual_seed(0)
    m = tiny()
    ids = torch.randint(2, 20, (2, 9))
    with torch.no_grad():
        ref = reference_forward(m, ids)
        m.train()
        a = m(ids)
        m.eval()   # eval takes torch's inference path unless the model switches it off
        b = m(ids)
    assert torch.allclose(a, ref, atol=1e-5)
    assert torch.allclose(b, ref, atol=1e-5)   # torch's fused path gave NaN with a float mask


def test_position_bias_none_is_the_plain_encoder_and_alibi_changes_the_output():
    torch.manual_seed(0)
    plain = tiny(position_bias="none").eval()
    alibi = tiny()
    alibi.load_state_dict(plain.state_dict())   # ALiBi has no parameters of its own
    ids = torch.randint(2, 20, (2, 9))
    with torch.no_grad():
        direct = plain.head(plain.encoder(plain.embed(ids)).mean(1))
        assert torch.allclose(plain(ids), direct, atol=1e-6)
        assert not torch.allclose(alibi.eval()(ids), direct, atol=1e-3)
    with pytest.raises(ValueError, match="attn_mask must be bool"):
        alibi.encode(alibi.embed(ids), attn_mask=torch.zeros(9, 9))
