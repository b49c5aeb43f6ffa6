"""DDP worker, samplers, torchrun launcher and scaling model (lesson 08).

The launcher tests start real 2-rank gloo jobs on the CPU (a few seconds each, dominated by
process start); each has a timeout so a stuck job fails instead of hanging.
"""
from __future__ import annotations

import tempfile

import pytest
import torch

from course_lib.core.data import load_corpus
from course_lib.distributed.launch import (DistributedRunError, launch, ring_allreduce_seconds,
                                   scaling_model, torchrun_command)
from course_lib.distributed.setup import ShardedBatchSampler, resolve_backend
from course_lib.distributed.ddp import DRY_RUN, WorkerConfig, parse_args, rank_loader, run_training


def test_backend_auto_and_bad_names():
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert resolve_backend("auto") == ("nccl" if gpus >= 1 else "gloo")
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("mpi-ish")
    with pytest.raises(ValueError, match="local_world_size must be >= 1"):
        resolve_backend("auto", local_world_size=0)
    if gpus == 0:
        with pytest.raises(ValueError, match="nccl"):
            resolve_backend("nccl")


@pytest.mark.parametrize("gpus, ranks, want", [(0, 1, "gloo"), (0, 2, "gloo"), (1, 1, "nccl"),
                                               (1, 2, "gloo"), (2, 2, "nccl"), (8, 4, "nccl")])
def test_auto_picks_nccl_only_with_a_gpu_per_rank(monkeypatch, gpus, ranks, want):
    """The one-GPU Colab case: two ranks must not both be sent to nccl (rank 1 -> cuda:1)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert resolve_backend("auto", local_world_size=ranks) == want
    assert resolve_backend("gloo", local_world_size=ranks) == "gloo"
    if gpus < ranks:
        with pytest.raises(ValueError, match=f"{ranks} rank.*{gpus} GPU"):
            resolve_backend("nccl", local_world_size=ranks)
    else:
        assert resolve_backend("nccl", local_world_size=ranks) == "nccl"


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="nproc must be >= 1"):
        torchrun_command([], nproc=0)
    with pytest.raises(ValueError, match="nproc must be >= 1"):
        launch([], nproc=0)
    with pytest.raises(ValueError, match="timeout"):
        launch([], nproc=1, timeout=0)
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        torchrun_command([], nproc=2, nnodes=2)
    with pytest.raises(ValueError, match="backend must be one of"):
        parse_args(["--backend", "foo"])
    with pytest.raises(ValueError, match="backend must be one of"):
        launch(["--backend", "foo"], nproc=2)        # rejected before any process starts
    with pytest.raises(ValueError, match="unrecognized arguments"):
        parse_args(["--no-such-option"])
    with pytest.raises(ValueError, match="steps must be >= 1"):
        parse_args(["--steps", "0"])
    with pytest.raises(ValueError, match="task must be one of"):
        parse_args(["--task", "hard"])
    with pytest.raises(ValueError, match="rank must be in"):
        ShardedBatchSampler([[0]], num_replicas=2, rank=2)


def test_torchrun_command_single_and_multi_node():
    one = torchrun_command(["--dry-run"], nproc=2)
    assert "--standalone" in one and one[-3:] == ["-m", "course_lib.distributed.ddp", "--dry-run"]
    multi = torchrun_command([], nproc=4, nnodes=2, node_rank=1, rdzv_endpoint="node0:29500")
    assert "--standalone" not in multi and "node0:29500" in multi and "4" in multi


@pytest.mark.parametrize("n_batches,ranks", [(8, 2), (9, 2), (10, 3), (1, 2)])
def test_sharded_batch_sampler_shares(n_batches, ranks):
    batches = [[2 * i, 2 * i + 1] for i in range(n_batches)]
    everything = {i for b in batches for i in b}
    for drop_last in (True, False):
        shards = [list(ShardedBatchSampler(batches, num_replicas=ranks, rank=r,
                                           drop_last=drop_last)) for r in range(ranks)]
        assert len({len(s) for s in shards}) == 1, "every rank must take the same steps"
        assert all(len(s) == len(ShardedBatchSampler(batches, num_replicas=ranks, rank=0,
                                                     drop_last=drop_last)) for s in shards)
        seen = [i for s in shards for b in s for i in b]
        if drop_last:
            assert len(seen) == len(set(seen)), "shares must be disjoint"
        else:
            assert set(seen) == everything, "shares must cover the data"
        if n_batches % ranks == 0:
            assert sorted(seen) == sorted(everything)


@pytest.mark.parametrize("sampler", ["distributed", "bucketed"])
def test_rank_loaders_are_disjoint_and_cover_an_epoch(sampler):
    data = load_corpus(scale=0.02).train          # 80 reviews
    cfg = WorkerConfig(batch_size=4, sampler=sampler)
    ranks = 2
    seen = [[int(i) for batch in rank_loader(data, cfg, rank=r, world_size=ranks)
             for i in batch["index"]] for r in range(ranks)]
    assert len(seen[0]) == len(seen[1]) > 0
    assert not set(seen[0]) & set(seen[1])
    assert set(seen[0]) | set(seen[1]) == set(range(len(data)))   # 80 = 2 ranks x 10 x 4


@pytest.mark.timeout(240)
def test_two_ranks_match_one_process_and_accumulation(tmp_path, monkeypatch):
    # SGD: its update is linear in the gradient, so rounding stays at rounding level. (Adam's
    # m / sqrt(v) turns a rounding-level difference in a near-zero gradient into ~lr.)
    sgd = {"steps": 4, "optimizer": "sgd", "lr": 0.1, "threads": 1}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))   # where torchrun would put torchelastic_* itself
    ddp = launch(["--dry-run", "--steps", "4", "--optimizer", "sgd", "--lr", "0.1"], nproc=2,
                 timeout=200, echo=False)
    assert list(tmp_path.iterdir()) == [], "the launch must leave no files behind"
    assert ddp["world_size"] == 2 and ddp["backend"] == "gloo"
    assert ddp["replica_divergence"] == 0.0
    threads = torch.get_num_threads()
    big = run_training(WorkerConfig(**{**DRY_RUN, **sgd, "batch_size": 8}))
    accum = run_training(WorkerConfig(**{**DRY_RUN, **sgd, "accum": 2}))
    assert torch.get_num_threads() == threads, "run_training must restore the thread count"
    assert big["global_batch"] == accum["global_batch"] == ddp["global_batch"] == 8
    assert (ddp["params"] - big["params"]).abs().max() <= 1e-5
    assert (accum["params"] - big["params"]).abs().max() <= 1e-5
    assert ddp["losses"] == pytest.approx(big["losses"], abs=1e-5)


@pytest.mark.parametrize("flags", [None, {"avx512_bf16", "amx_bf16"}])
def test_one_process_run_matches_a_plain_torch_loop(flags, monkeypatch):
    # The reference for the DDP check, written without the course's loop: the same batches,
    # model and seed, SGD with gradient clipping, step by step, in FP32. A CPU with bf16
    # instructions (flags faked) still trains the worker in FP32: the check compares like
    # with like.
    from course_lib.core import device as D
    from course_lib.core.model import build_model
    if flags is not None:
        monkeypatch.setattr(D, "cpu_flags", lambda: set(flags))
    cfg = WorkerConfig(**{**DRY_RUN, "steps": 4, "optimizer": "sgd", "lr": 0.1, "threads": 1,
                          "batch_size": 8})
    got = run_training(cfg)
    assert got["precision"] == "float32"
    corpus = load_corpus(scale=cfg.data_scale)
    loader = rank_loader(corpus.train, cfg, rank=0, world_size=1)
    loader.sampler.set_epoch(0)
    model = build_model(len(corpus.vocab), preset="student", seed=cfg.seed, d_model=cfg.d_model,
                        n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_ff=cfg.d_ff)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    losses = []
    for batch, _ in zip(loader, range(cfg.steps)):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]),
                                                 batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert got["losses"] == pytest.approx(losses, abs=1e-6)
    assert (got["params"] - params).abs().max() <= 1e-6


@pytest.mark.timeout(240)
def test_failing_worker_raises_naming_the_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(DistributedRunError, match="rank 1 failed.*deliberate") as info:
        launch(["--dry-run", "--fail-rank", "1"], nproc=2, timeout=200, echo=False)
    assert info.value.rank == 1
    assert list(tmp_path.iterdir()) == [], "a failed launch must leave no files behind"


@pytest.mark.timeout(120)
def test_launcher_timeout_kills_the_job():
    # (the test's own timeout fails it if the launcher does not kill the job)
    with pytest.raises(DistributedRunError, match="did not finish within"):
        launch(["--dry-run"], nproc=2, timeout=1.5, echo=False)


def test_ring_allreduce_and_scaling_model():
    assert ring_allreduce_seconds(1e9, ranks=1, bandwidth=1e9) == 0.0
    assert ring_allreduce_seconds(1e9, ranks=2, bandwidth=1e9) == pytest.approx(1.0)
    assert ring_allreduce_seconds(1e9, ranks=1000, bandwidth=1e9) < 2.0   # -> 2 x bytes/bw
    one = scaling_model(params=1e8, ranks=1, bandwidth=1e10, tokens_per_rank=1e4, flops=1e14)
    assert one["speedup"] == pytest.approx(1.0)
    slow = scaling_model(params=1e8, ranks=8, bandwidth=1e9, tokens_per_rank=1e4, flops=1e14)
    fast = scaling_model(params=1e8, ranks=8, bandwidth=1e11, tokens_per_rank=1e4, flops=1e14)
    assert slow["speedup"] < fast["speedup"] <= 8
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        ring_allreduce_seconds(1.0, ranks=0, bandwidth=1.0)
    with pytest.raises(ValueError, match="overlap"):
        scaling_model(params=1, ranks=2, bandwidth=1, tokens_per_rank=1, flops=1, overlap=2)


@pytest.mark.timeout(180)
def test_a_transient_torchrun_failure_is_launched_again(tmp_path, capsys):
    marker = tmp_path / "marker"
    res = launch([], nproc=1, timeout=90, echo=False, module="tests.ddp_flaky_worker",
                 env={"FLAKY_MARKER": str(marker)})
    assert res["ok"] and marker.exists()
    assert "launching it once more" in capsys.readouterr().out
    marker.unlink()
    with pytest.raises(DistributedRunError) as info:      # no retries left: raised, marked
        launch([], nproc=1, timeout=90, echo=False, module="tests.ddp_flaky_worker",
               env={"FLAKY_MARKER": str(marker)}, retries=0)
    assert info.value.transient and info.value.rank is None
    with pytest.raises(ValueError, match="retries"):
        launch([], nproc=1, retries=-1)


def test_torchrun_command_as_typed_elsewhere():
    import sys
    here = torchrun_command(["--steps", 5], nproc=4)
    typed = torchrun_command(["--steps", 5], nproc=4, as_torchrun=True)
    assert here[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert typed[0] == "torchrun" and typed[1:] == here[3:]      # the same arguments
    assert typed[1:5] == ["--standalone", "--nproc_per_node", "4", "-m"]


def test_easy_task_and_the_accuracy_of_returned_parameters():
    from course_lib.core.batching import make_loader as course_loader
    from course_lib.core.data import CorpusConfig
    from course_lib.distributed.setup import accuracy_of_params, worker_corpus, worker_model
    from course_lib.core.evaluate import evaluate
    cfg = WorkerConfig(**{**DRY_RUN, "steps": 3, "optimizer": "sgd", "lr": 0.1, "threads": 1,
                          "task": "easy"})
    easy = worker_corpus(cfg)
    want = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0),
                       scale=cfg.data_scale)
    assert ([r["input_ids"].tolist() for r in easy.train][:5]
            == [r["input_ids"].tolist() for r in want.train][:5])
    full = worker_corpus(WorkerConfig(**{**DRY_RUN, "task": "full"}))
    assert any(a["input_ids"].tolist() != b["input_ids"].tolist()
               for a, b in zip(easy.train, full.train))
    out = run_training(cfg)
    model = worker_model(cfg, len(easy.vocab))      # the same weights, loaded by hand
    torch.nn.utils.vector_to_parameters(out["params"], model.parameters())
    ref = evaluate(model.eval(), course_loader(easy.val, batch_size=7, shuffle=False,
                                               max_length=cfg.max_length))
    assert accuracy_of_params(cfg, out["params"]) == pytest.approx(ref["accuracy"])
    with pytest.raises(ValueError, match="params has"):
        accuracy_of_params(cfg, out["params"][:-1])


def test_items_per_rank_with_and_without_a_sampler():
    from course_lib.distributed.setup import items_per_rank
    shared = items_per_rank(100, world_size=2, distributed=True)
    # disjoint, complete
    assert not shared[0] & shared[1] and shared[0] | shared[1] == set(range(100))
    own = items_per_rank(100, world_size=2, distributed=False)
    # each rank loads all
    assert own[0] == own[1] == set(range(100))
    with pytest.raises(ValueError, match="world_size"):
        items_per_rank(10, world_size=0, distributed=True)


def test_loss_noise_is_the_step_to_step_spread_and_stability_pairs_by_seed():
    import math
    from course_lib.distributed import stability
    # a level with alternating +-1 jumps: successive differences are +-2, sd 2 (n-1), / sqrt 2
    losses = [5.0] * 10 + [1.0 + (1 if i % 2 else -1) for i in range(10)]
    d = [2.0 if i % 2 else -2.0 for i in range(9)]
    import statistics
    assert stability.loss_noise(losses) == pytest.approx(statistics.stdev(d) / math.sqrt(2))
    assert stability.loss_noise([1.0, 1.0, 1.0, 1.0]) == 0
    with pytest.raises(ValueError, match="tail"):
        stability.loss_noise(losses, tail=0)
    runs = [{"multiple": k, "seed": s, "global_batch": 16 * k, "noise": n, "val_accuracy": a}
            for k, s, n, a in ((1, 0, 0.2, 0.90), (1, 1, 0.1, 0.92), (2, 0, 0.1, 0.93),
                               (2, 1, 0.05, 0.92))]
    red = stability.from_evidence({"runs": runs})
    assert red["noise_ratio"][32].value == pytest.approx(0.5) and red["noise_ratio"][32].se == 0
    assert red["accuracy_change"][32].value == pytest.approx(1.5) and red["base_batch"] == 16
    assert red["scored_on"] == "validation" and red["scored_reviews"] == 100   # 1,000 x scale 0.1
    assert red["train_reviews"] == 400 and red["passes"][32] == 150 * 32 / 400   # the recipe's
    with pytest.raises(ValueError, match="multiple 1"):
        stability.from_evidence({"runs": runs[2:]})
    tested = [{**r, "test_accuracy": t} for r, t in zip(runs, (0.95, 0.96, 0.955, 0.97))]
    red = stability.from_evidence({"runs": tested})   # the 2,000 test reviews, where every run has
                                                      # them
    assert red["accuracy_change"][32].value == pytest.approx(0.75) and red["scored_reviews"] == 2000
    assert red["accuracy_key"] == "test_accuracy" and red["scored_on"] == "test"


def test_a_stability_point_trains_the_multiplied_batch():
    from course_lib.distributed import stability
    args = ["--task", "easy", "--batch-size", "4", "--d-model", "16", "--n-layers", "1",
            "--steps", "4", "--data-scale", "0.02"]
    r = stability.train_point(2, 0, args=args, threads=1)
    assert r["global_batch"] == 8 and len(r["losses"]) == 4 and 0 <= r["val_accuracy"] <= 1
    assert 0 <= r["test_accuracy"] <= 1
    with pytest.raises(ValueError, match="multiple must be >= 1"):
        stability.train_point(0, 0, args=args)


@pytest.mark.timeout(240)
def test_one_launch_times_a_sweep_of_batches():
    res = launch(["--dry-run", "--steps", "3", "--batches", "2,6"], nproc=2, timeout=200,
                 echo=False, threads=1)
    assert set(res["sweep"]) == {"2", "6"} and all(t > 0 for t in res["sweep"].values())
    for bad in ("4,x", "0", "4,,8", "²"):
        with pytest.raises(ValueError, match="batches must be batch sizes"):
            parse_args(["--batches", bad])
