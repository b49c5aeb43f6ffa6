"""Tests of course_lib.pruning.structured: removing units that cannot matter changes nothing; the
smaller models rebuild from their configs; bad arguments name the parameter."""
import pytest
import torch

from course_lib.pruning import masks as pruning
from course_lib.pruning import structured
from course_lib.core.model import EncoderClassifier, keep_layers, build_model, count_parameters
from test_pruning import VOCAB, batch


def small_model(seed=0, **kw):
    return build_model(VOCAB, preset="student", n_layers=2, seed=seed, **kw).eval()


def rebuilds(model):
    again = EncoderClassifier(model.cfg)
    again.load_state_dict(model.state_dict())


def test_bad_structured_arguments():
    m = small_model()
    for amount in (-0.5, 1.2):
        with pytest.raises(ValueError, match=r"amount must be in \[0, 1\]"):
            structured.prune_ffn_neurons(m, amount=amount)
    with pytest.raises(ValueError, match="at least one neuron"):
        structured.prune_ffn_neurons(m, amount=1.0)
    with pytest.raises(ValueError, match="at least one head"):
        structured.prune_heads(m, amount=1.0)
    with pytest.raises(ValueError, match="score"):
        structured.prune_ffn_neurons(m, amount=0.5, score="taylor")
    with pytest.raises(ValueError, match=r"layers must be .* \[0, 1\]"):
        keep_layers(m, [0, 2])
    with pytest.raises(ValueError, match="layers must be"):
        keep_layers(m, [])


def test_structured_pruning_of_zero_importance_neurons_is_exact():
    m = small_model()
    d_ff = m.cfg.d_ff
    dead = torch.arange(0, d_ff, 3)   # a third of the neurons, different kinds of "dead"
    with torch.no_grad():
        for i, block in enumerate(m.blocks):
            if i == 0:
                block.ff.fc2.weight[:, dead] = 0          # output column zero
            else:
                block.ff.fc1.weight[dead] = 0             # input row and bias zero
                block.ff.fc1.bias[dead] = 0
    for s in structured.ffn_importance(m):
        assert (s[dead] == 0).all() and (s[dead] < s.max()).all()
    small = structured.prune_ffn_neurons(m, amount=len(dead) / d_ff)
    assert isinstance(small, EncoderClassifier) and small.cfg.d_ff == d_ff - len(dead)
    ids, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(small(ids, mask), m(ids, mask), rtol=1e-5, atol=1e-6)
    assert m.cfg.d_ff == d_ff   # input untouched
    rebuilds(small)


def test_removing_a_head_whose_output_columns_are_zero_is_exact():
    m = build_model(VOCAB, d_model=32, n_heads=4, n_layers=2, d_ff=32, seed=1).eval()
    d = m.cfg.head_size
    with torch.no_grad():
        m.blocks[0].attn.proj.weight[:, 2 * d:3 * d] = 0       # head 2 writes nothing
        m.blocks[1].attn.proj.weight[:, 0:d] = 0               # head 0 writes nothing
    scores = structured.head_importance(m)
    assert scores[0][2] == 0 and scores[1][0] == 0 and (scores[0][[0, 1, 3]] > 0).all()
    small = structured.prune_heads(m, amount=0.25)
    assert small.cfg.n_heads == 3 and small.cfg.head_dim == d
    assert small.blocks[0].attn.qkv.out_features == 3 * 3 * d
    ids, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(small(ids, mask), m(ids, mask), rtol=1e-5, atol=1e-6)
    rebuilds(small)


def test_keep_layers_runs_exactly_the_chosen_blocks():
    m = build_model(VOCAB, preset="teacher", d_model=32, d_ff=32, seed=2).eval()
    ids, mask = batch()
    same = keep_layers(m, [0, 1, 2, 3])
    two = keep_layers(m, [0, 2])
    with torch.no_grad():
        torch.testing.assert_close(same(ids, mask), m(ids, mask))
        from course_lib.core.model import padding_mask
        x, L = m.embed(ids), ids.shape[1]
        for i in (0, 2):   # by hand: block 0, then block 2 of the teacher
            x = m.blocks[i](x, padding_mask(mask), **m.positions(L))
        by_hand = m.head(m.pool(m.ln_f(x), mask))
        torch.testing.assert_close(two(ids, mask), by_hand)
    assert two.cfg.n_layers == 2
    rebuilds(two)


def test_smaller_model_has_expected_parameter_count():
    m = small_model()
    cfg = m.cfg
    small = structured.prune_ffn_neurons(m, amount=0.25, score="random", seed=1)
    removed = round(0.25 * cfg.d_ff)
    per_neuron = 2 * cfg.d_model + 1   # a row of fc1, its bias, a column of fc2
    assert count_parameters(small) == count_parameters(m) - cfg.n_layers * removed * per_neuron


def test_structured_refuses_masked_model():
    m = small_model()
    pruning.prune_unstructured(m, amount=0.2)
    for fn in (lambda: structured.prune_ffn_neurons(m, amount=0.5),
               lambda: structured.prune_heads(m, amount=0.5),
               lambda: keep_layers(m, [0])):
        with pytest.raises(ValueError, match="make_permanent"):
            fn()
