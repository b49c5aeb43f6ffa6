"""Data-parallel training with DistributedDataParallel, launched by torchrun (lesson 08).

Follows PyTorch's "Getting started with DDP" tutorial and the torchrun (elastic) docs: one
process per device, the model replicated in each, every rank reads a disjoint share of the
data, and DDP all-reduces (averages) the gradients during ``backward``, so every replica takes
the same optimizer step. Run it with::

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m course_lib.distributed.ddp \
        --steps 20 --batch-size 16 --out /tmp/ddp.json          # 2 CPU processes (gloo)
    python -m torch.distributed.run --standalone --nproc_per_node 2 -m course_lib.distributed.ddp \
        --dry-run

The same command runs unchanged on a multi-GPU machine (``--nproc_per_node`` = number of GPUs;
with a GPU per rank the backend becomes nccl and rank ``LOCAL_RANK`` uses ``cuda:LOCAL_RANK``) and
on several nodes (replace ``--standalone`` by ``--nnodes 2 --node_rank K --rdzv_backend c10d
--rdzv_endpoint HOST:29500 --rdzv_id job1`` on every node). ``course_lib.distributed.launch`` starts
it from a notebook. With ``world_size == 1`` and no process group, ``run_training`` runs the
identical loop in-process: the single-process reference of the equivalence check.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from course_lib.measure import bench
from course_lib.distributed.setup import (BACKENDS, ShardedBatchSampler, auto_threads,
                                          resolve_backend)

@dataclass(frozen=True)
class WorkerConfig:
    """Everything one run needs; ``batch_size`` is per rank and per micro-batch."""

    mode: str = "train"           # "allreduce": all-reduce demo; "both": demo, then train
    steps: int = 20               # optimizer steps
    batch_size: int = 16
    batches: str = ""             # "4,16,64": one timed run at each batch per rank instead of one
                                  # run (mode "train"; one launch for a whole sweep, lesson 08)
    accum: int = 1                # micro-batches per optimizer step (gradient accumulation)
    lr: float = 1e-3
    optimizer: str = "adamw"      # or "sgd"
    grad_clip: float = 1.0
    sampler: str = "distributed"  # DistributedSampler, or "bucketed" (sharded buckets)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    d_ff: int = 128
    max_length: int = 128         # truncation keeps CPU steps short
    data_scale: float = 0.1       # corpus scale (0.1: 400 training reviews)
    task: str = "full"            # "easy": no negation/opener/contrast rules
                                  # (ddp_setup.worker_corpus)
    backend: str = "auto"
    threads: int = 0              # 0: auto_threads
    seed: int = 0
    timeout_s: float = 60.0       # collectives fail instead of hanging when a peer dies
    fail_rank: int = -1           # >= 0: that rank raises at start (tests the launcher)

    def validate(self) -> None:
        for name in ("steps", "batch_size", "accum", "d_model", "n_layers", "n_heads", "d_ff",
                     "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        choices = {"mode": ("train", "allreduce", "both"), "optimizer": ("adamw", "sgd"),
                   "sampler": ("distributed", "bucketed"), "backend": BACKENDS,
                   "task": ("full", "easy")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name, lo, hi in (("data_scale", 0.0, 1.0), ("lr", 0.0, 1.0)):
            if not lo < getattr(self, name) <= hi:
                raise ValueError(f"{name} must be in ({lo}, {hi}], got {getattr(self, name)}")
        if self.batches and not all(b.strip().isdecimal() and int(b) >= 1
                                    for b in self.batches.split(",")):
            raise ValueError(f"batches must be batch sizes >= 1 separated by commas, such as "
                             f"'4,16,64', got {self.batches!r}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: automatic), got {self.threads}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


DRY_RUN = dict(steps=3, batch_size=4, d_model=32, n_layers=1, n_heads=2, d_ff=64,
               max_length=64, data_scale=0.02)


def rank_loader(dataset, cfg: WorkerConfig, *, rank: int, world_size: int) -> DataLoader:
    """Each rank's DataLoader: a disjoint share of every epoch, the same seed on every rank."""
    from course_lib.core.batching import BucketBatchSampler
    from course_lib.core.padding import Collate

    collate = Collate(max_length=cfg.max_length)
    if cfg.sampler == "bucketed":
        buckets = BucketBatchSampler(dataset.lengths, batch_size=cfg.batch_size, seed=cfg.seed)
        shard = ShardedBatchSampler(buckets, num_replicas=world_size, rank=rank, drop_last=True)
        return DataLoader(dataset, batch_sampler=shard, collate_fn=collate)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=cfg.seed, drop_last=True)
    return DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True,
                      collate_fn=collate)


def _log(msg: str, *, rank: int, world_size: int, all_ranks: bool = False) -> None:
    if rank == 0 or all_ranks:   # one write per line: two ranks' lines never run together
        sys.stdout.write(f"[rank {rank}/{world_size}] {msg}\n")
        sys.stdout.flush()


def run_training(cfg: WorkerConfig, *, rank: int = 0, world_size: int = 1,
                 device: torch.device | str = "cpu") -> dict:
    """Train for ``cfg.steps`` optimizer steps; returns losses, step times and parameters.

    ``cfg.threads`` > 0 sets torch's CPU threads for the run (restored afterwards).
    Uses DDP when a process group is initialised, otherwise plain single-process training
    with the same data order: what N ranks x batch b see at a step is what one process sees
    with batch N*b, or with batch b and ``accum=N``. Accumulation micro-steps run under
    ``no_sync`` (gradients are all-reduced once per optimizer step, not per micro-batch).
    """
    cfg.validate()
    device, threads_before = torch.device(device), torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train(cfg, rank, world_size, device)
    finally:
        torch.set_num_threads(threads_before)


def _train(cfg: WorkerConfig, rank: int, world_size: int, device: torch.device) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from course_lib.core.optimizers import make_optimizer, param_groups
    from course_lib.core.precision import training_autocast
    from course_lib.core.train import TrainConfig, train
    from course_lib.distributed.setup import worker_corpus, worker_model

    corpus = worker_corpus(cfg)
    loader = rank_loader(corpus.train, cfg, rank=rank, world_size=world_size)
    per_epoch = len(loader) // cfg.accum
    if per_epoch < 1:
        raise ValueError(f"data_scale={cfg.data_scale} leaves no full step for batch_size="
                         f"{cfg.batch_size} x accum={cfg.accum} x {world_size} ranks")
    model = worker_model(cfg, len(corpus.vocab)).to(device)   # the same initial weights everywhere
    ddp = dist.is_available() and dist.is_initialized()
    net = DDP(model, device_ids=[device] if device.type == "cuda" else None) if ddp else model
    # AdamW decays the weight matrices (the course's rule), SGD nothing; a constant rate, so
    # that N ranks and one process take the same steps whatever the run's length
    decay = 0.01 if cfg.optimizer == "adamw" else 0.0
    opt = make_optimizer(cfg.optimizer, param_groups(net, weight_decay=decay), lr=cfg.lr)
    train_cfg = TrainConfig(epochs=-(-cfg.steps // per_epoch), lr=cfg.lr, weight_decay=decay,
                            grad_clip=cfg.grad_clip, seed=cfg.seed, accum=cfg.accum,
                            schedule="constant")

    def log(step: int, loss: float, _model) -> None:
        done = step + 1
        if ddp and (done % max(1, cfg.steps // 4) == 0 or done == cfg.steps):
            _log(f"step {done}/{cfg.steps} local loss {loss:.4f}", rank=rank,
                 world_size=world_size)

    # the course's one loop; on GPUs the ranks train in the course's 16-bit format (bf16, or
    # fp16 with a scaler on a T4), on a CPU in FP32 whatever its instructions, so that the
    # equivalence check compares like with like; DDP all-reduces once per step, in the last
    # micro-batch's backward (the others run under no_sync)
    mixed = training_autocast(device) if device.type == "cuda" else None
    hist = train(net, loader, cfg=train_cfg, device=device, optimizer=opt, max_steps=cfg.steps,
                 autocast_dtype=mixed, no_sync=net.no_sync if ddp else None, callback=log,
                 set_epoch=True, progress=False)
    losses, times = hist.step_loss, hist.step_seconds
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    loss_t = torch.tensor(losses, device=device)
    divergence = 0.0
    if ddp:   # the global loss (mean over ranks), and a check that replicas stayed equal
        dist.all_reduce(loss_t)
        loss_t /= world_size
        ref = params.clone().to(device)
        dist.broadcast(ref, src=0)
        div = (params.to(device) - ref).abs().max().reshape(1)
        dist.all_reduce(div, op=dist.ReduceOp.MAX)
        divergence = float(div)
    return {"world_size": world_size, "device": str(device), "threads": torch.get_num_threads(),
            "precision": str(mixed or torch.float32).replace("torch.", ""),
            "global_batch": cfg.batch_size * cfg.accum * world_size, "losses": loss_t.tolist(),
            "step_times": times, "median_step_s": statistics.median(times[1:] or times),
            "replica_divergence": divergence, "n_params": int(params.numel()),
            "params": params}


def allreduce_demo(*, rank: int, world_size: int, device: torch.device,
                   sizes: Sequence[int] = (1_000, 100_000, 1_000_000), repeats: int = 5) -> dict:
    """Each rank contributes ``[rank + 1] * 4``; after ``all_reduce`` all hold the sum. Then
    times ``all_reduce`` of float32 tensors of ``sizes`` elements (median of ``repeats``)."""
    x = torch.full((4,), float(rank + 1), device=device)
    _log(f"before all_reduce: {x.tolist()}", rank=rank, world_size=world_size, all_ranks=True)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    _log(f"after  all_reduce: {x.tolist()}", rank=rank, world_size=world_size, all_ranks=True)
    timings = []
    for n in sizes:
        buf = torch.ones(int(n), device=device)
        dist.all_reduce(buf)   # warm-up
        samples = []
        for _ in range(repeats):
            dist.barrier()
            bench.synchronize(device)
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            bench.synchronize(device)
            samples.append(time.perf_counter() - t0)
        timings.append({"elements": int(n), "bytes": 4 * int(n),
                        "seconds": statistics.median(samples)})
    return {"world_size": world_size, "reduced": x.tolist(), "timings": timings}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):   # a ValueError, not sys.exit, when called from a notebook
        raise ValueError(f"course_lib.distributed.ddp: {message}")


def parse_args(argv: Sequence[str] | None = None) -> tuple[WorkerConfig, str | None]:
    """Worker options -> (config, results path); bad options raise ValueError."""
    p = _Parser(prog="python -m course_lib.distributed.ddp", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = WorkerConfig()
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        p.add_argument(flag, type=type(value), default=None, help=f"default {value!r}")
    p.add_argument("--dry-run", action="store_true", help="a tiny model, 3 steps (seconds)")
    p.add_argument("--out", default=None, help="JSON results file written by rank 0")
    args = vars(p.parse_args(argv))
    out, dry = args.pop("out"), args.pop("dry_run")
    base = replace(defaults, **DRY_RUN) if dry else defaults
    cfg = replace(base, **{k: v for k, v in args.items() if v is not None})
    cfg.validate()
    return cfg, out


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)   # atomic: a reader never sees half a file


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry point: reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_* from the env."""
    cfg, out = parse_args(argv)
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    try:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        backend = resolve_backend(cfg.backend, local_world_size=local_world_size)
        device = torch.device(f"cuda:{local_rank}" if backend == "nccl" else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        threads = cfg.threads or auto_threads(local_world_size)
        torch.set_num_threads(threads)
        if "RANK" in os.environ:   # under torchrun; a plain `python -m` runs one process
            dist.init_process_group(backend, timeout=timedelta(seconds=cfg.timeout_s),
                                    **({"device_id": device} if device.type == "cuda" else {}))
        _log(f"backend {backend}, device {device}, {threads} thread(s) per process",
             rank=rank, world_size=world_size)
        if cfg.fail_rank == rank:   # its peers are left waiting in their first collective
            raise RuntimeError(f"deliberate failure on rank {rank} (--fail-rank)")
        result = {}
        if cfg.mode in ("allreduce", "both"):
            result["allreduce"] = allreduce_demo(rank=rank, world_size=world_size, device=device)
        if cfg.mode in ("train", "both") and cfg.batches:   # a sweep: step times only
            result["sweep"] = {int(b): run_training(replace(cfg, batch_size=int(b)), rank=rank,
                                                    world_size=world_size,
                                                    device=device)["median_step_s"]
                               for b in cfg.batches.split(",")}
        elif cfg.mode in ("train", "both"):
            result.update(run_training(cfg, rank=rank, world_size=world_size, device=device))
        if rank == 0 and out:
            params = result.pop("params", None)
            if params is not None:
                torch.save(params, Path(out).with_suffix(".params.pt"))
            _write_json(Path(out), {**result, "backend": backend, "config": asdict(cfg)})
        if dist.is_initialized():
            dist.barrier()
        _log("done", rank=rank, world_size=world_size)
    except BaseException as err:   # tell the launcher which rank failed and why
        if out:
            _write_json(Path(out).with_suffix(f".rank{rank}.error.json"),
                        {"rank": rank, "type": type(err).__name__, "message": str(err),
                         "traceback": traceback.format_exc(), "time": time.time()})
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
