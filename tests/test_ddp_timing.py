"""Tests of course_lib.distributed.timing with fake launch/train functions: every configuration runs
once per round, the order rotates, each gets the same model and global batch, and speed-ups are the
per-round ratios by hand."""
import math
import statistics

import pytest

from course_lib.distributed.timing import predicted_speedup, speedups, step_times_over_batch
from course_lib.measure.verdicts import speedup


def test_rounds_rotate_and_configurations_share_the_global_batch():
    calls = []

    def train(cfg):
        calls.append(("train", cfg.threads, cfg.batch_size, cfg.d_model))
        return {"median_step_s": 0.10 if cfg.threads == 1 else 0.07}

    def launch(args, *, nproc, timeout, echo, threads):
        cfg_args = dict(zip(args[::2], args[1::2]))
        calls.append(("ddp", nproc, int(cfg_args["--batches"]) * nproc, int(cfg_args["--d-model"])))
        assert threads == 1, "each rank gets one thread: a core of its own"
        return {"sweep": {cfg_args["--batches"]: 0.05}}   # JSON's string keys

    times = step_times_over_batch(["--batch-size", 8, "--d-model", 32], [8], nproc=2, cores=2,
                                  rounds=3, launch=launch, train=train)[8]
    assert list(times) == ["1 process, 1 thread", "1 process, 2 threads", "DDP, 2 ranks"]
    assert all(len(v) == 3 for v in times.values())
    firsts = [calls[i][:2] for i in (0, 3, 6)]          # who ran first in each round
    assert firsts == [("train", 1), ("train", 2), ("ddp", 2)]
    # same global batch, model
    assert {c[2] for c in calls} == {16} and {c[3] for c in calls} == {32}
    with pytest.raises(ValueError, match="rounds"):
        step_times_over_batch([], [8], nproc=2, cores=2, rounds=1, launch=launch, train=train)


def test_speedup_is_the_geometric_mean_of_per_round_ratios():
    times = {"a": [0.10, 0.12, 0.08], "b": [0.05, 0.04, 0.08]}
    e = speedup(times["a"], times["b"])
    logs = [math.log(2.0), math.log(3.0), 0.0]
    assert e.value == pytest.approx(math.exp(statistics.fmean(logs)))
    assert e.se == pytest.approx(e.value * statistics.stdev(logs) / 3 ** 0.5) and e.dof == 2


def test_the_sweep_over_batch_times_each_batch_and_the_speedups_are_by_hand():
    seen = []

    def train(cfg):   # a step costs 1 ms per sequence on one thread, 0.6 ms on two
        seen.append(cfg.batch_size)
        return {"median_step_s": cfg.batch_size * (1e-3 if cfg.threads == 1 else 6e-4)}

    launches = []

    def launch(args, *, nproc, timeout, echo, threads):   # each rank half the batch, + 2 ms
        bs = args[args.index("--batches") + 1]
        launches.append(bs)
        return {"sweep": {b: int(b) * 1e-3 + 2e-3 for b in bs.split(",")}}

    sweep = step_times_over_batch(["--d-model", 32, "--batch-size", 99], [16, 4, 16], nproc=2,
                                  cores=2, rounds=2, launch=launch, train=train)
    assert list(sweep) == [4, 16]                      # sorted, each batch once, 99 overridden
    assert launches == ["4,16", "4,16"]                # one launch per round times every batch
    assert seen == [8, 32] * 4                         # one process trains nproc x b
    ups = speedups(sweep[16])
    assert ups["ddp"].value == pytest.approx(32e-3 / 18e-3)
    assert ups["threads"].value == pytest.approx(1 / 0.6)
    assert ups["ddp_vs_threads"].value == pytest.approx(32 * 6e-4 / 18e-3)
    assert speedups(sweep[4])["ddp"].value == pytest.approx(8e-3 / 6e-3)   # less work: less gain
    with pytest.raises(ValueError, match="batches"):
        step_times_over_batch([], [0], nproc=2, cores=2, rounds=2, launch=launch, train=train)


def test_predicted_speedup_by_hand():
    assert predicted_speedup(0.1, nproc=2, comm_s=0.0) == pytest.approx(2.0)
    assert predicted_speedup(0.1, nproc=2, comm_s=0.05) == pytest.approx(1.0)   # 0.05 + 0.05
    assert predicted_speedup(0.1, nproc=4, comm_s=0.025) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="one_thread_s"):
        predicted_speedup(0.0, nproc=2, comm_s=0.0)


def test_the_speed_evidence_reduces_to_speedups_and_the_model_by_hand():
    from course_lib.distributed.launch import ring_allreduce_seconds
    from course_lib.distributed.timing import from_evidence
    names = ["1 process, 1 thread", "1 process, 2 threads", "DDP, 2 ranks"]
    ev = {"recipe": {"args": ["--steps", "12"], "nproc": 2, "cores": 2, "rounds": 2},
          "bandwidth": 1e9, "n_params": 250_000,
          "times": {"4": dict(zip(names, ([0.02, 0.02], [0.015, 0.015], [0.02, 0.02]))),
                    "64": dict(zip(names, ([0.30, 0.30], [0.20, 0.20], [0.15, 0.15])))}}
    red = from_evidence(ev)
    assert sorted(red["sweep"]) == [4, 64] and red["rounds"] == 2
    assert (red["ups"][64]["ddp"].value == pytest.approx(2.0)
            and red["ups"][4]["ddp"].value == pytest.approx(1.0))
    comm = ring_allreduce_seconds(4 * 250_000, ranks=2, bandwidth=1e9)   # 1 ms
    assert red["comm_s"] == pytest.approx(comm)
    assert red["predicted"][64] == pytest.approx(0.30 / (0.15 + comm))


def test_the_allreduce_is_priced_from_the_sizes_measured_around_it():
    import math
    from course_lib.distributed.launch import allreduce_seconds_at
    from course_lib.distributed.timing import from_evidence
    t = [{"bytes": 4_000, "seconds": 1e-4}, {"bytes": 400_000, "seconds": 4e-3},
         {"bytes": 4_000_000, "seconds": 8e-3}]
    assert allreduce_seconds_at(t, 40_000) == pytest.approx(math.sqrt(1e-4 * 4e-3))   # log midpoint
    assert allreduce_seconds_at(t, 400_000) == pytest.approx(4e-3)
    assert allreduce_seconds_at(t, 100) == 1e-4                                   # latency floor
    # + bytes at 0.5 GB/s
    assert allreduce_seconds_at(t, 8_000_000) == pytest.approx(16e-3)
    with pytest.raises(ValueError, match="timings"):
        allreduce_seconds_at([], 10)
    names = ["1 process, 1 thread", "1 process, 2 threads", "DDP, 2 ranks"]
    ev = {"recipe": {"args": [], "nproc": 2, "cores": 2, "rounds": 2}, "bandwidth": 1e12,
          "n_params": 100_000, "allreduce": t,
          "times": {"8": dict(zip(names, ([0.02, 0.02], [0.015, 0.015], [0.02, 0.02])))}}
    red = from_evidence(ev)   # 400,000 bytes of gradient: 4 ms measured, not bytes / bandwidth
    assert red["comm_s"] == pytest.approx(4e-3)
    assert red["predicted"][8] == pytest.approx(0.02 / (0.01 + 4e-3))
