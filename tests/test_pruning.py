"""Tests of course_lib.pruning.masks: sparsity reached, masks kept, exact structured pruning."""
import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import prune as tprune

from course_lib.pruning import masks as pruning
from course_lib.core.model import build_model

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
        else:   # the head is excluded by default
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


def torch_encoder():
    """torch's own encoder layer (not the course model): its attention reads out_proj.weight."""
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


def test_torch_out_proj_without_refresh_fails_on_second_backward_and_refresh_fixes_it():
    x = torch.randn(2, 5, 16)
    trap = torch_encoder()
    tprune.l1_unstructured(trap.self_attn.out_proj, "weight", amount=0.5)
    trap(x).sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        trap(x).sum().backward()
    fixed = torch_encoder()
    pruning.prune_unstructured(fixed, amount=0.5, include_out_proj=True)
    for _ in range(2):
        fixed(x).sum().backward()
    assert pruning.is_pruned(fixed.self_attn.out_proj)


def test_course_model_output_projection_is_pruned_like_any_linear():
    m = small_model().train()
    pruning.prune_unstructured(m, amount=0.5)
    assert pruning.is_pruned(m.blocks[0].attn.proj) and pruning.is_pruned(m.blocks[0].attn.qkv)
    ids, mask = batch()
    for _ in range(2):
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
    assert pruning.is_pruned(m.blocks[0].ff.fc1)


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


def test_a_sensitivity_scan_prunes_one_group_at_a_time():
    from course_lib.pruning import sensitivity
    model = build_model(50, preset="student", seed=0, d_model=16, n_layers=2, n_heads=2, d_ff=32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = sensitivity.groups(model)
    assert list(g) == ["block 0, attention", "block 0, feed-forward", "block 1, attention",
                       "block 1, feed-forward"]

    def zeros_by_group(m):   # the score: how many weights of each group are zero, by hand
        return tuple(sum(int((pruning.effective_weight(mod, p) == 0).sum())
                         for n, mod, p in pruning.prunable(m) if n.startswith(pre))
                     for (pre,) in g.values())
    got = sensitivity.scan(model, zeros_by_group, amounts=[0.5])
    sizes = [sum(mod.weight.numel() for n, mod, _ in pruning.prunable(model) if n.startswith(pre))
             for (pre,) in g.values()]
    for i, label in enumerate(g):   # only the group named was pruned, to half of each tensor
        want = tuple(sizes[j] // 2 if j == i else 0 for j in range(len(g)))
        assert got[label] == [want]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())   # left as it was
    with pytest.raises(ValueError, match="only must name prefixes"):
        pruning.prune_unstructured(model, amount=0.5, only=("no.such.",))
    one = pruning.copy_model(model)   # a plain string is one prefix, not its characters
    pruning.prune_unstructured(one, amount=0.5, only="blocks.0.ff.")
    assert [n for n, m, p in pruning.prunable(one) if pruning.is_pruned(m, p)] == [
        "blocks.0.ff.fc1.weight", "blocks.0.ff.fc2.weight"]


def test_the_csr_formula_is_torchs_bytes_and_int32_halves_the_indices():
    """4 bytes per kept value plus an index per kept value and per row pointer, by hand, and
    equal to what torch's CSR tensor holds (int64 indices)."""
    from course_lib.pruning.masks import csr_formula_bytes, csr_nbytes

    w = torch.zeros(6, 10)
    w[0, 1], w[2, 3], w[2, 9], w[5, 0] = 1.0, 2.0, 3.0, 4.0          # 4 kept values, 6 rows
    assert csr_formula_bytes(w) == 4 * 4 + 8 * (4 + 7) == csr_nbytes(w)
    assert csr_formula_bytes(w, index_bytes=4) == 4 * 4 + 4 * (4 + 7)
    with pytest.raises(ValueError, match="index_bytes"):
        csr_formula_bytes(w, index_bytes=2)
