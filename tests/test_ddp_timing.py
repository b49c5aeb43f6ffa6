"""Tests of course_lib.distributed.timing with fake launch/train functions: every configuration runs once
per round, the order rotates, each gets the same model and global batch, and speed-ups are the
per-round ratios by hand."""
import math
import statistics

import pytest

from course_lib.distributed.timing import interleaved_step_times
from course_lib.measure.verdicts import speedup


def test_rounds_rotate_and_configurations_share_the_global_batch():
    calls = []

    def train(cfg):
        calls.append(("train", cfg.threads, cfg.batch_size, cfg.d_model))
        return {"median_step_s": 0.10 if cfg.threads == 1 else 0.07}

    def launch(args, *, nproc, timeout, echo):
        cfg_args = dict(zip(args[::2], args[1::2]))
        calls.append(("ddp", nproc, int(cfg_args["--batch-size"]) * nproc, int(cfg_args["--d-model"])))
        return {"median_step_s": 0.05}

    times = interleaved_step_times(["--batch-size", 8, "--d-model", 32], nproc=2, cores=2,
                                   rounds=3, launch=launch, train=train)
    assert list(times) == ["1 process, 1 thread", "1 process, 2 threads", "DDP, 2 ranks"]
    assert all(len(v) == 3 for v in times.values())
    firsts = [calls[i][:2] for i in (0, 3, 6)]          # who ran first in each round
    assert firsts == [("train", 1), ("train", 2), ("ddp", 2)]
    assert {c[2] for c in calls} == {16} and {c[3] for c in calls} == {32}   # same global batch, model
    with pytest.raises(ValueError, match="rounds"):
        interleaved_step_times([], nproc=2, cores=2, rounds=1, launch=launch, train=train)


def test_speedup_is_the_geometric_mean_of_per_round_ratios():
    times = {"a": [0.10, 0.12, 0.08], "b": [0.05, 0.04, 0.08]}
    e = speedup(times["a"], times["b"])
    logs = [math.log(2.0), math.log(3.0), 0.0]
    assert e.value == pytest.approx(math.exp(statistics.fmean(logs)))
    assert e.se == pytest.approx(e.value * statistics.stdev(logs) / 3 ** 0.5) and e.dof == 2
