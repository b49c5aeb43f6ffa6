"""Sharding on 2 gloo ranks (course_lib.memory.sharding): each rank's bytes against the
calculator, and the same final parameters as DDP, on the same data."""
import pytest

from course_lib.distributed.launch import launch
from course_lib.memory import sharding as S
from course_lib.memory.anatomy import Setup, plan

SMALL = dict(steps=2, batch=4, length=32, vocab_size=500, d_model=64, n_layers=2, n_heads=2, d_ff=128)


@pytest.mark.timeout(240)
def test_zero1_and_fsdp_hold_their_share_and_train_what_ddp_trains():
    got = {st: launch(S.worker_args(S.ShardConfig(strategy=st, **SMALL)), nproc=2, timeout=180,
                      echo=False, threads=1, module=S.MODULE) for st in S.STRATEGIES}
    shape = Setup(vocab_size=500, d_model=64, n_layers=2, n_heads=2, d_ff=128)
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
