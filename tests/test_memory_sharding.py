"""Sharding on 2 gloo ranks (course_lib.memory.sharding): each rank's bytes against the
calculator, and the same final parameters as DDP, on the same data."""
import pytest

from course_lib.core.model import build_model
from course_lib.distributed.launch import launch
from course_lib.memory import sharding as S
from course_lib.memory.anatomy import Setup, plan, root_bytes

SHAPE = Setup(batch=4, length=32, vocab_size=500, d_model=64, n_layers=2, n_heads=2, d_ff=128)


@pytest.mark.timeout(240)
def test_zero1_and_fsdp_hold_their_share_and_train_what_ddp_trains():
    got = {st: launch(S.worker_args(S.ShardConfig(strategy=st, setup=SHAPE, steps=2)), nproc=2,
                      timeout=180, echo=False, threads=1, module=S.MODULE) for st in S.STRATEGIES}
    shape = SHAPE
    full, zero1, fsdp = plan(shape), plan(Setup(**{**shape.__dict__, "shards": 2, "zero": 1})), \
        plan(Setup(**{**shape.__dict__, "shards": 2, "zero": 3}))
    for r in got["ddp"]["ranks"]:
        assert r["held"] == {"weights": full.weights, "gradients": full.gradients,
                             "optimizer": full.optimizer}
    zero_states = [r["held"]["optimizer"] for r in got["zero1"]["ranks"]]
    assert sum(zero_states) == pytest.approx(full.optimizer, abs=64)   # every state once
    assert max(zero_states) <= 0.6 * full.optimizer               # whole tensors: near half
    assert zero1.optimizer == full.optimizer // 2
    for r in got["fsdp"]["ranks"]:                                # equal slices (+ padding)
        assert r["held"]["weights"] == pytest.approx(fsdp.weights, rel=0.01)
        assert r["held"]["optimizer"] == pytest.approx(fsdp.optimizer, rel=0.01)
        assert r["held"]["gradients"] == pytest.approx(fsdp.weights, rel=0.01)
    for st in ("zero1", "fsdp"):
        assert (got[st]["params"] - got["ddp"]["params"]).abs().max() < 1e-6
    assert not (got["ddp"]["params"] == 0).all()
    # the intercepted collectives of a step against the algorithms (traffic); DDP also
    # broadcasts the model's buffers from rank 0 before each forward (broadcast_buffers=True),
    # sometimes with a few bytes of their sizes first
    buffers = sum(b.numel() * b.element_size() for b in build_model(
        500, preset="teacher", d_model=64, n_layers=2, n_heads=2, d_ff=128, max_len=512).buffers())
    assert buffers > 0
    kw = dict(ranks=2, weight_bytes=full.weights, grad_bytes=full.gradients)
    for st in S.STRATEGIES:
        c = got[st]["ranks"][0]["collectives"]
        assert c["unknown"] == []
        extra = buffers // 2 if st != "fsdp" else 0
        assert sum(c["sent"].values()) == pytest.approx(
            S.traffic(st, root_bytes=root_bytes(shape), **kw) + extra, abs=128)
    fsdp_calls = got["fsdp"]["ranks"][0]["collectives"]["calls"]
    assert fsdp_calls == {"_allgather_base_": 2 * shape.n_layers + 1,          # forward + backward,
                          "_reduce_scatter_base_": shape.n_layers + 1}         # the root once


def test_collective_counter_sees_a_collective_and_its_bytes():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        counter = S.CollectiveCounter()
        with counter:
            dist.all_reduce(torch.ones(10))
            dist.broadcast(torch.ones(3, dtype=torch.float64), src=0)
            torch.ones(4).sum()                       # not a collective: not counted
        assert counter.calls == {"allreduce_": 1, "broadcast_": 1}
        assert counter.payload == {"allreduce_": 40, "broadcast_": 24}
        assert counter.sent(1) == {"allreduce_": 0, "broadcast_": 0}
        assert counter.sent(4) == {"allreduce_": 60, "broadcast_": 18}   # 2·3/4·40, 3/4·24
    finally:
        dist.destroy_process_group()


def test_traffic_by_hand_and_bad_input():
    assert S.traffic("ddp", ranks=2, weight_bytes=100, grad_bytes=100) == 100
    assert S.traffic("zero1", ranks=2, weight_bytes=100, grad_bytes=100) == 150
    assert S.traffic("fsdp", ranks=4, weight_bytes=100, grad_bytes=100) == 225
    assert S.traffic("fsdp", ranks=2, weight_bytes=100, grad_bytes=100, root_bytes=40) == 130
    assert S.traffic("ddp", ranks=1, weight_bytes=100, grad_bytes=100) == 0
    with pytest.raises(ValueError, match="strategy"):
        S.traffic("zero2", ranks=2, weight_bytes=1, grad_bytes=1)
    with pytest.raises(ValueError, match="steps"):
        S.ShardConfig(steps=0).validate()
    with pytest.raises(ValueError, match="strategy decides"):
        S.ShardConfig(setup=Setup(shards=2, zero=1)).validate()
    with pytest.raises(ValueError, match="d_model"):
        S.ShardConfig(setup=Setup(d_model=0)).validate()


def test_worker_command_line_round_trips_the_config():
    cfg = S.ShardConfig(strategy="zero1",
                        setup=Setup(d_model=64, n_heads=2, batch=3, optimizer="sgd"),
                        steps=5, lr=0.5, seed=2)
    assert S._parse(S.worker_args(cfg)) == (cfg, None, 1)
