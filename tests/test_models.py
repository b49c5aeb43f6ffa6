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
                                        (dict(dropout=1.0), "dropout")])
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
