"""The memory calculator (course_lib.memory) against independent counts: autograd's saved
tensors, the parameters and optimizer state of a real model, gradients with and without
checkpointing, and one measured training step."""
from dataclasses import replace

import pytest
import torch

from course_lib.core.model import count_parameters
from course_lib.core.task import task_loss
from course_lib.measure.memory import saved_activation_bytes
from course_lib.memory import anatomy as A
from course_lib.memory.checkpointing import Checkpointed
from course_lib.memory.measure import build, measured_peaks
from course_lib.core.optimizers import make_optimizer, state_bytes

SMALL = A.Setup(vocab_size=500, d_model=64, n_layers=2, n_heads=2, d_ff=128, batch=2, length=48)


@pytest.mark.parametrize("setup", [SMALL, replace(SMALL, batch=3, length=96, n_heads=4),
                                   replace(SMALL, d_model=128, d_ff=256, n_layers=1)])
def test_activation_formula_counts_what_autograd_saves(setup):
    model, batch = build(setup)
    exact = saved_activation_bytes(model, batch["input_ids"], batch["attention_mask"])
    assert A.activation_bytes(setup) == pytest.approx(exact, rel=2e-3)


def static_bytes(model, opt) -> dict[str, int]:
    """The live tensors' bytes: weights, the gradients that exist, the optimizer's state."""
    params = list(model.parameters())
    return {"weights": sum(p.numel() * p.element_size() for p in params),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params
                             if p.grad is not None),
            "optimizer": state_bytes(opt, include_scalars=False)}


@pytest.mark.parametrize("optimizer", A.OPTIMIZERS)
def test_weights_and_optimizer_state_equal_the_live_tensors(optimizer):
    s = replace(SMALL, optimizer=optimizer)
    model, batch = build(s)
    opt = make_optimizer(optimizer, model.parameters(), lr=1e-3)
    loss = task_loss("classification")(model, batch)
    loss.backward()
    opt.step()
    got, p = static_bytes(model, opt), A.plan(s)
    assert p.parameters == count_parameters(model)
    assert ((got["weights"], got["gradients"], got["optimizer"])
            == (p.weights, p.gradients, p.optimizer))


@pytest.mark.parametrize("policy", ["every", "every_other", "attention"])
def test_checkpointed_gradients_equal_plain_ones(policy):
    s = replace(SMALL, n_layers=3)
    plain, batch = build(s)
    wrapped, _ = build(replace(s, checkpoint=policy))
    assert isinstance(wrapped, Checkpointed)
    loss_fn = task_loss("classification")
    a, b = loss_fn(plain, batch), loss_fn(wrapped, batch)
    ga = torch.autograd.grad(a, list(plain.parameters()))
    gb = torch.autograd.grad(b, list(wrapped.parameters()))
    assert torch.equal(a, b)
    assert all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(ga, gb))
    with pytest.raises(ValueError, match="policy"):
        Checkpointed(plain, "sometimes")


def test_checkpointing_every_block_halves_a_512_token_step_and_selective_sits_between():
    s = A.Setup(batch=16, length=512)
    none, every = A.activation_bytes(s), A.activation_bytes(replace(s, checkpoint="every"))
    attention = A.activation_bytes(replace(s, checkpoint="attention"))
    assert every < none / 2 and every < attention < none
    # by hand: 3 block inputs kept, the 4th block recomputed in full, the layers outside
    blocks = A.block_bytes(s)
    full = blocks[0][0]
    tokens = 16 * 512
    assert every == 3 * 4 * tokens * 128 + full + tokens * (4 * 128 + A.OUTSIDE_PER_TOKEN_BYTES)


def test_sharding_divides_what_each_zero_stage_shards():
    s = A.Setup(optimizer="adamw")
    base = A.plan(s)
    z1, z2, z3 = (A.plan(replace(s, shards=2, zero=z)) for z in (1, 2, 3))
    assert z1.optimizer == base.optimizer // 2 and z1.gradients == base.gradients
    assert z2.gradients == base.gradients // 2 and z2.weights == base.weights
    assert z3.weights == base.weights // 2
    assert z3.activations == base.activations            # each rank runs its own micro-batch
    mixed = A.plan(replace(s, precision="mixed"))
    assert mixed.weights == base.weights // 2 and mixed.optimizer == base.optimizer + base.weights
    with pytest.raises(ValueError, match="shards"):
        A.plan(replace(s, zero=1))
    with pytest.raises(ValueError, match="optimizer"):
        A.plan(replace(s, optimizer="lion"))
    with pytest.raises(ValueError, match="multiple"):
        A.plan(replace(s, d_model=130))


def test_a_measured_step_is_near_the_plan_and_accumulation_shrinks_it():
    s = A.Setup(batch=8, length=256)
    measured, halves = measured_peaks([s, s], micro=(1, 2), workers=2)
    assert measured == pytest.approx(A.plan(s).step, rel=0.2)
    # two micro-batches of 4: one micro-batch's activations alive at a time, plus the gradients
    assert halves == pytest.approx(A.plan(replace(s, batch=4)).step, rel=0.2)
    assert halves < 0.7 * measured
    with pytest.raises(ValueError, match="one value per setup"):
        measured_peaks([s], micro=(1, 2))


def test_step_case_refuses_more_micro_batches_than_sequences():
    from course_lib.memory.measure import step_case
    with pytest.raises(ValueError, match="micro"):
        step_case(micro=3, **{**SMALL.__dict__, "batch": 2})


def test_allocations_by_layer_add_up_to_what_autograd_saves():
    from course_lib.memory.measure import allocations_by_layer
    s = replace(SMALL, n_layers=3, batch=3, length=64)
    model, batch = build(s)
    exact = saved_activation_bytes(model, batch["input_ids"], batch["attention_mask"])
    rows = allocations_by_layer(model, batch, make_optimizer("adamw", model.parameters(), lr=1e-3))
    assert (list(rows)[:2] == ["embedding", "block 0 · LayerNorm 1"]
            and "block 2 · attention" in rows)
    forward = sum(r["forward"] for name, r in rows.items() if name != "outside the layers")
    assert forward == pytest.approx(exact, rel=0.05)     # small tensors: allocator rounding
    # every block keeps the same, and its backward frees more than it writes
    kinds = ("LayerNorm 1", "attention", "LayerNorm 2", "feed-forward")
    for kind in kinds:
        assert len({rows[f"block {i} · {kind}"]["forward"] for i in range(3)}) == 1
    assert all(rows[f"block 0 · {k}"]["backward"] < 0 for k in kinds)
    with pytest.raises(ValueError, match="without checkpointing"):
        allocations_by_layer(build(replace(s, checkpoint="every"))[0], batch, None)


def test_checkpoint_times_time_every_policy_against_none(monkeypatch):
    from course_lib.memory import measure as M
    built = []
    real_build = M.build
    monkeypatch.setattr(M, "build", lambda s, **kw: (built.append((s.length, s.checkpoint))
                                                     or real_build(s, **kw)))
    got = M.checkpoint_times(replace(SMALL, batch=2, length=16), [16, 32], repeats=2, warmup=0)
    assert list(got) == [16, 32]
    # each policy, each length
    assert built == [(L, p) for L in (16, 32) for p in A.CHECKPOINTING]
    for row in got.values():
        assert set(row) == set(A.CHECKPOINTING)
        assert all(len(r["timing"].samples) == 2 for r in row.values())
        for r in row.values():   # the time ratio is the paired inverse of the speed-up
            assert r["time_ratio"].value == pytest.approx(1 / r["speedup"].value, rel=1e-9)


def test_attention_core_share_by_hand():
    s = A.Setup(d_model=8, length=4)
    assert A.attention_core_share(s) == pytest.approx(2 * 4 * 8 / (4 * 64 + 2 * 4 * 8))
    assert A.attention_core_share(replace(s, length=4096)) > 0.99


def test_accumulation_equals_the_big_batch_and_the_token_trap_does_not():
    from course_lib.memory import accumulation as G
    model, batch = build(replace(SMALL, batch=8))
    lengths = torch.tensor([48, 48, 48, 48, 6, 6, 6, 6])       # long sequences first, short last
    batch["attention_mask"] = torch.arange(48)[None, :] < lengths[:, None]
    ref_seq = G.gradients(model, batch, micro=1, normalisation="sequence")
    ref_tok = G.gradients(model, batch, micro=1, normalisation="token_global")
    assert G.relative_difference(G.gradients(model, batch, micro=4, normalisation="sequence"),
                                 ref_seq) < 1e-5
    assert G.relative_difference(G.gradients(model, batch, micro=4, normalisation="token_global"),
                                 ref_tok) < 1e-5
    trap = G.gradients(model, batch, micro=2, normalisation="token_per_micro")
    assert G.relative_difference(trap, ref_tok) > 0.05      # short micro-batches weigh too much
    with pytest.raises(ValueError, match="divide"):
        G.split(batch, 3)


def test_root_bytes_and_attention_work_by_hand():
    s = A.Setup(vocab_size=100, d_model=8, d_ff=16, n_heads=2, n_outputs=2, length=4)
    assert A.root_bytes(s) == 4 * (100 * 8 + 8 + 8 + 2 * 8 + 2)
    assert A.attention_work_share(s) == pytest.approx((4 * 64 + 2 * 4 * 8)
                                                      / (4 * 64 + 2 * 4 * 8 + 2 * 8 * 16))


def test_accumulated_step_by_hand():
    s = A.Setup(batch=8, length=64)
    half = replace(s, batch=4)
    assert A.accumulated_step(s, 1) == A.plan(s).step
    # from the second micro-batch on: its activations and the whole gradient at once
    assert A.accumulated_step(s, 2) == A.activation_bytes(half) + A.plan(s).gradients
    assert A.accumulated_step(s, 2) > A.plan(half).step
    with pytest.raises(ValueError, match="divide"):
        A.accumulated_step(s, 3)
