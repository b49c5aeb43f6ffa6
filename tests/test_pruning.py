"""Tests of course_lib.pruning: sparsity reached, masks kept, exact structured pruning."""
import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import prune as tprune

from course_lib import pruning
from course_lib.models import EncoderClassifier, build_model, count_parameters

VOCAB = 40


def small_model(seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(VOCAB, preset="student", n_layers=2, **kw)


def batch(seed=0, n=6, length=12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (n, length), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[0, 8:] = False
    ids[~mask] = 0
    return ids, mask


@pytest.mark.parametrize("method", pruning.METHODS)
@pytest.mark.parametrize("amount", [0.0, 0.3, 0.8])
def test_layerwise_sparsity_reached_in_every_layer(method, amount):
    m = small_model()
    report = pruning.prune_unstructured(m, amount=amount, method=method, scope="layer")
    for row in report:
        if row["pruned"]:
            assert row["sparsity"] == pytest.approx(amount, abs=1.0 / row["numel"] + 1e-6)
        else:   # out_proj and head are excluded by default
            assert row["sparsity"] < 0.05, row


@pytest.mark.parametrize("method", pruning.METHODS)
def test_global_sparsity_reached_and_iterative_amount_is_total(method):
    m = small_model()
    pruning.prune_unstructured(m, amount=0.5, method=method, scope="global")
    rep = [r for r in pruning.sparsity_report(m) if r["pruned"]]
    assert pruning.global_sparsity(rep) == pytest.approx(0.5, abs=1e-3)
    pruning.prune_unstructured(m, amount=0.75, method=method, scope="global")
    rep = [r for r in pruning.sparsity_report(m) if r["pruned"]]
    assert pruning.global_sparsity(rep) == pytest.approx(0.75, abs=1e-3)  # not 0.875
    with pytest.raises(ValueError, match="amount"):
        pruning.prune_unstructured(m, amount=0.5, method=method, scope="global")


def test_random_pruning_is_seeded():
    a, b = small_model(), small_model()
    pruning.prune_unstructured(a, amount=0.5, method="random", seed=3)
    pruning.prune_unstructured(b, amount=0.5, method="random", seed=3)
    for (_, ma, p), (_, mb, _) in zip(pruning.prunable(a), pruning.prunable(b)):
        assert torch.equal(getattr(ma, p + "_mask"), getattr(mb, p + "_mask"))


@pytest.mark.parametrize("kwargs", [{"amount": -0.1}, {"amount": 1.5}, {"amount": "half"},
                                    {"amount": 0.5, "method": "l2"},
                                    {"amount": 0.5, "scope": "model"}])
def test_bad_arguments_raise_clear_errors(kwargs):
    name = next(k for k in ("method", "scope") if k in kwargs) if len(kwargs) > 1 else "amount"
    with pytest.raises(ValueError, match=name):
        pruning.prune_unstructured(small_model(), **kwargs)


def test_bad_structured_arguments():
    m = small_model()
    for amount in (-0.5, 1.2):
        with pytest.raises(ValueError, match=r"amount must be in \[0, 1\]"):
            pruning.prune_ffn_neurons(m, amount=amount)
    with pytest.raises(ValueError, match="at least one neuron"):
        pruning.prune_ffn_neurons(m, amount=1.0)
    with pytest.raises(ValueError, match="score"):
        pruning.prune_ffn_neurons(m, amount=0.5, score="taylor")


def test_pruned_weights_stay_zero_after_training_and_after_remove():
    m = small_model()
    pruning.prune_unstructured(m, amount=0.6, scope="global", include_out_proj=True)
    masks = {n: getattr(mod, p + "_mask").clone()
             for n, mod, p in pruning.prunable(m, include_out_proj=True)}
    ids, mask = batch()
    data = [{"input_ids": ids, "attention_mask": mask, "labels": torch.arange(6) % 2,
             "ratings": torch.ones(6), "index": torch.arange(6)}] * 3
    hist = pruning.fine_tune(m, data, steps=3, lr=1e-2)   # 3 steps: out_proj backward twice
    assert len(hist.step_loss) == 3
    for n, mod, p in pruning.prunable(m, include_out_proj=True):
        w = pruning.effective_weight(mod, p)
        assert (w[~masks[n].bool()] == 0).all(), n
    m.eval()
    with torch.no_grad():
        before = m(ids, mask)
    assert pruning.make_permanent(m) == len(masks)
    assert not any(n.endswith(("_orig", "_mask")) for n, _ in m.state_dict().items())
    for n, mod, p in pruning.prunable(m, include_out_proj=True):
        assert (getattr(mod, p)[~masks[n].bool()] == 0).all(), n
    with torch.no_grad():
        torch.testing.assert_close(m(ids, mask), before)


def test_out_proj_without_refresh_fails_on_second_backward():
    m = small_model()
    tprune.l1_unstructured(m.encoder.layers[0].self_attn.out_proj, "weight", amount=0.5)
    ids, mask = batch()
    m.train()
    m(ids, mask).sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        m(ids, mask).sum().backward()


def test_copy_model_works_with_hooks_where_deepcopy_fails():
    m = small_model()
    pruning.prune_unstructured(m, amount=0.5, include_out_proj=True)
    m.train()
    ids, mask = batch()
    m(ids, mask).sum().backward()
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(m)
    c = pruning.copy_model(m)
    m.eval(), c.eval()
    with torch.no_grad():
        torch.testing.assert_close(c(ids, mask), m(ids, mask))
    pruning.make_permanent(c)   # the copy's hooks are its own
    assert pruning.is_pruned(m.encoder.layers[0].linear1)


def test_structured_pruning_of_zero_importance_neurons_is_exact():
    m = small_model().eval()
    d_ff = m.cfg.d_ff
    dead = torch.arange(0, d_ff, 3)   # a third of the neurons, different kinds of "dead"
    with torch.no_grad():
        for i, layer in enumerate(m.encoder.layers):
            if i == 0:
                layer.linear2.weight[:, dead] = 0          # output column zero
            else:
                layer.linear1.weight[dead] = 0             # input row and bias zero
                layer.linear1.bias[dead] = 0
    scores = pruning.ffn_importance(m)
    for s in scores:
        assert (s[dead] == 0).all() and (s[dead] < s.max()).all()
    small = pruning.prune_ffn_neurons(m, amount=len(dead) / d_ff)
    assert isinstance(small, EncoderClassifier) and small.cfg.d_ff == d_ff - len(dead)
    ids, mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(small(ids, mask), m(ids, mask), rtol=1e-5, atol=1e-6)
    assert m.cfg.d_ff == d_ff   # input untouched


def test_smaller_model_has_expected_parameter_count_and_rebuilds_from_config():
    m = small_model()
    cfg = m.cfg
    small = pruning.prune_ffn_neurons(m, amount=0.25, score="random", seed=1)
    removed = round(0.25 * cfg.d_ff)
    per_neuron = 2 * cfg.d_model + 1   # a row of linear1, its bias, a column of linear2
    assert count_parameters(small) == count_parameters(m) - cfg.n_layers * removed * per_neuron
    again = EncoderClassifier(small.cfg)
    again.load_state_dict(small.state_dict())


def test_structured_refuses_masked_model():
    m = small_model()
    pruning.prune_unstructured(m, amount=0.2)
    with pytest.raises(ValueError, match="make_permanent"):
        pruning.prune_ffn_neurons(m, amount=0.5)


def test_storage_and_semi_structured_mask():
    m = small_model()
    dense = pruning.storage(m)
    assert dense["csr_bytes"] > dense["dense_bytes"]   # CSR of a dense matrix is larger
    pruning.prune_unstructured(m, amount=0.95, scope="global", include_out_proj=True,
                               include_head=True)
    sparse = pruning.storage(m)
    assert sparse["dense_bytes"] == dense["dense_bytes"]
    assert sparse["csr_bytes"] < 0.3 * sparse["dense_bytes"]
    w = torch.randn(8, 16)
    keep = pruning.semi_structured_mask(w)
    assert keep.reshape(8, 4, 4).sum(-1).eq(2).all()
    kept_min = w.abs()[keep].reshape(8, 4, 2).min(-1).values
    dropped_max = w.abs()[~keep].reshape(8, 4, 2).max(-1).values
    assert (kept_min >= dropped_max).all()
    with pytest.raises(ValueError, match="divisible"):
        pruning.semi_structured_mask(torch.randn(4, 6))


def test_prunable_lists_submodules_not_the_container():
    t = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=32)
    with pytest.raises(AttributeError):
        tprune.random_unstructured(t, name="weight", amount=0.3)
    names = [n for n, _, _ in pruning.prunable(t)]
    assert "encoder.layers.0.linear1.weight" in names
    assert "encoder.layers.0.self_attn.in_proj_weight" in names
    assert not any("out_proj" in n for n in names)
