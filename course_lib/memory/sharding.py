"""Sharding across processes: what each rank holds under DDP, ZeRO-1 and FSDP (torchrun worker).

Data parallelism (lesson 08) keeps a full copy of the weights, the gradients and the optimizer
state on every rank. ZeRO (Rajbhandari et al., 2020) removes the copies: stage 1 gives each
rank the optimizer state of its own share of the parameters
(``torch.distributed.optim.ZeroRedundancyOptimizer``: whole tensors per rank, the updated
ones broadcast to the others after each step); FSDP (ZeRO stage 3, here FSDP2's
``fully_shard``) splits every parameter, its gradient and its optimizer state into equal
slices, gathers a block's full weights just before it runs and frees them after.

``main`` is the torchrun worker (``python -m torch.distributed.run --nproc-per-node 2 -m
course_lib.memory.sharding --strategy zero1``); a notebook starts it with lesson 08's
``distributed.launch.launch(worker_args(cfg), nproc=2, module=MODULE)``, which returns rank 0's
record: each rank's bytes, counted tensor by tensor (a DTensor's local shard, not its global
size), and the final parameters. Every strategy trains the same
model on the same per-rank batches, so their final parameters can be compared: sharding changes
where the numbers live, not what they are.

Communication per step and rank is counted from each algorithm as run here (``traffic``).
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from course_lib.core.model import build_model
from course_lib.core.train import task_loss, train_step
from course_lib.memory.measure import static_bytes

__all__ = ["STRATEGIES", "MODULE", "ShardConfig", "traffic", "train_rank", "worker_args", "main"]

STRATEGIES = ("ddp", "zero1", "fsdp")
MODULE = "course_lib.memory.sharding"


@dataclass(frozen=True)
class ShardConfig:
    strategy: str = "ddp"
    steps: int = 3           # enough for the optimizer state to exist and the runs to diverge
    batch: int = 8           # sequences per rank and step
    length: int = 64
    vocab_size: int = 2048
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 256
    lr: float = 1e-3
    seed: int = 0

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name in ("steps", "batch", "length", "vocab_size", "d_model", "n_layers", "n_heads",
                     "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def traffic(strategy: str, *, ranks: int, weight_bytes: int, grad_bytes: int,
            root_bytes: int = 0) -> int:
    """Bytes each rank sends (and receives) per step under ``strategy``, by its algorithm as
    run here: DDP all-reduces the gradients (2 (N-1)/N · G); ``ZeroRedundancyOptimizer`` adds
    a broadcast of each rank's updated parameters ((N-1)/N · W; the ZeRO paper's reduce-scatter
    and all-gather would move no more than DDP); FSDP2 all-gathers each block's weights before
    forward and again before backward, the root's (``root_bytes``: embedding, final norm, head,
    which FSDP2 keeps gathered from forward to backward) once, and reduce-scatters the
    gradients ((N-1)/N · (2 W - root + G))."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if not 0 <= root_bytes <= weight_bytes:
        raise ValueError(f"root_bytes must be in [0, weight_bytes], got {root_bytes}")
    share = (ranks - 1) / ranks
    if strategy == "ddp":
        return round(2 * share * grad_bytes)
    if strategy == "zero1":
        return round(2 * share * grad_bytes + share * weight_bytes)
    return round(share * (2 * weight_bytes - root_bytes + grad_bytes))


def _batch(cfg: ShardConfig, rank: int, step: int) -> dict:
    g = torch.Generator().manual_seed(1000 * cfg.seed + 100 * step + rank)
    ids = torch.randint(2, cfg.vocab_size, (cfg.batch, cfg.length), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
            "labels": torch.randint(0, 2, (cfg.batch,), generator=g)}


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def train_rank(cfg: ShardConfig, *, rank: int, world_size: int) -> dict:
    """Train ``cfg.steps`` steps on this rank (the process group is up) and return what it
    holds: weights, gradients and optimizer state in bytes, and the full final parameters."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg.validate()
    model = build_model(cfg.vocab_size, preset="teacher", seed=cfg.seed, d_model=cfg.d_model,
                        n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_ff=cfg.d_ff,
                        max_len=max(512, cfg.length))
    if cfg.strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world_size,))
        for block in model.blocks:          # each block gathered just before it runs
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)       # the rest: embedding, final norm, head
        net, opt = model, torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    else:
        net = DDP(model)
        if cfg.strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW,
                                          lr=cfg.lr)
        else:
            opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr)
    loss_fn = task_loss("classification")
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        train_step(net, _batch(cfg, rank, step), opt, device="cpu", dtype=None, loss_fn=loss_fn,
                   grad_clip=None)
    seconds = time.perf_counter() - t0
    params = list(model.parameters())
    local_opt = opt.optim if cfg.strategy == "zero1" else opt
    held = {"weights": sum(_local_bytes(p) for p in params),
            "gradients": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(_local_bytes(v) for st in local_opt.state.values() for v in st.values()
                             if torch.is_tensor(v) and v.dim() > 0)}
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in params]
    return {"held": held, "seconds": seconds,
            "params": torch.cat([t.reshape(-1) for t in full]).detach().clone(),
            "full_weights": sum(t.numel() * t.element_size() for t in full)}


def _parse(argv: Sequence[str] | None) -> tuple[ShardConfig, str | None]:
    ap = argparse.ArgumentParser(prog=MODULE)
    for name, default in asdict(ShardConfig()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = vars(ap.parse_args([str(a) for a in (argv or [])]))
    out, threads = args.pop("out"), args.pop("threads")
    torch.set_num_threads(threads)
    return ShardConfig(**args), out


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry point: rank 0 writes every rank's bytes and the final parameters."""
    import sys

    cfg, out = _parse(sys.argv[1:] if argv is None else argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        got = train_rank(cfg, rank=rank, world_size=world)
        every: list = [None] * world
        dist.all_gather_object(every, {"rank": rank, "held": got["held"],
                                       "seconds": got["seconds"]})
        if rank == 0 and out:
            torch.save(got["params"], Path(out).with_suffix(".params.pt"))
            tmp = Path(out).with_suffix(".tmp")
            tmp.write_text(json.dumps({"config": asdict(cfg), "ranks": every,
                                       "full_weights": got["full_weights"]}, indent=1))
            tmp.replace(out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def worker_args(cfg: ShardConfig) -> list[str]:
    """The command-line options of ``main`` for ``cfg``: what ``distributed.launch.launch``
    passes to the worker (``launch(worker_args(cfg), nproc=2, module=MODULE)``)."""
    cfg.validate()
    return [a for k, v in asdict(cfg).items() for a in (f"--{k.replace('_', '-')}", str(v))]


if __name__ == "__main__":
    raise SystemExit(main())
