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

Communication per step and rank is counted twice: on paper from each algorithm (``traffic``),
and as run, by intercepting every ``c10d`` collective of the last step (``CollectiveCounter``, a
``TorchDispatchMode``: DDP's C++ reducer, ZeroRedundancyOptimizer's broadcasts and FSDP2's
all-gathers and reduce-scatters all pass through torch's dispatcher).
"""
from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.core.model import build_model
from course_lib.memory.anatomy import Setup

__all__ = ["STRATEGIES", "MODULE", "COLLECTIVES", "ShardConfig", "CollectiveCounter", "traffic",
           "train_rank", "worker_args", "main"]

STRATEGIES = ("ddp", "zero1", "fsdp")
MODULE = "course_lib.memory.sharding"


@dataclass(frozen=True)
class ShardConfig:
    """One sharding run: the strategy, the step (``anatomy.Setup``: model shape, per-rank batch,
    optimizer) and how long. The setup's ``shards`` and ``zero`` stay at 1 and 0: the strategy
    and the number of processes decide how the model is sharded."""
    strategy: str = "ddp"
    setup: Setup = Setup(batch=8, length=64)   # batch: sequences per rank and step
    steps: int = 3           # enough for the optimizer state to exist and the runs to diverge
    lr: float = 1e-3
    seed: int = 0

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        self.setup.validate()
        s = self.setup
        if (s.precision, s.checkpoint, s.shards, s.zero) != ("fp32", "none", 1, 0):
            raise ValueError("the sharding worker trains in FP32 without checkpointing, and the "
                             "strategy decides the sharding: setup needs precision='fp32', "
                             f"checkpoint='none', shards=1, zero=0, got {s.precision!r}, "
                             f"{s.checkpoint!r}, {s.shards}, {s.zero}")


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
    s, g = cfg.setup, torch.Generator().manual_seed(1000 * cfg.seed + 100 * step + rank)
    ids = torch.randint(2, s.vocab_size, (s.batch, s.length), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
            "labels": torch.randint(0, s.n_outputs, (s.batch,), generator=g)}


def _local_bytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


# The collectives a step can call, as torch's dispatcher names them (``c10d::`` ops; DDP's C++
# reducer, ZeroRedundancyOptimizer and FSDP2 all reach them): which argument holds the full,
# unsharded tensor(s), and the share of that payload one rank sends with ring algorithms on N
# ranks (Thakur et al., 2005): an all-reduce is a reduce-scatter plus an all-gather. A convention,
# not a measurement of the wire: gloo picks its own algorithms, and for a broadcast the share is
# an average over ranks (the root sends the payload, the others pass it on or only receive).
COLLECTIVES = {"allreduce_": (0, lambda n: 2 * (n - 1) / n),
               "broadcast_": (0, lambda n: (n - 1) / n),
               "allgather_": (0, lambda n: (n - 1) / n),
               "_allgather_base_": (0, lambda n: (n - 1) / n),
               "allgather_into_tensor_coalesced_": (0, lambda n: (n - 1) / n),
               "reduce_scatter_": (1, lambda n: (n - 1) / n),
               "_reduce_scatter_base_": (1, lambda n: (n - 1) / n),
               "reduce_scatter_tensor_coalesced_": (1, lambda n: (n - 1) / n)}


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(y) for y in x)
    return 0


class CollectiveCounter(TorchDispatchMode):
    """Intercepts every ``c10d`` collective dispatched while it is active (a
    ``TorchDispatchMode``): ``calls`` and ``payload`` (bytes of the full tensors) per operation.
    What it observes is which collectives run and on how many bytes; ``sent(ranks)`` turns
    the payloads into bytes per rank by the ring convention (``COLLECTIVES``). An operation
    outside that table is kept in ``calls`` and ``payload`` and named by ``unknown``."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}
        self.payload: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "c10d":
            name = func.__name__.split(".")[0]
            where = COLLECTIVES.get(name, (0, None))[0]
            self.calls[name] = self.calls.get(name, 0) + 1
            self.payload[name] = self.payload.get(name, 0) + _tensor_bytes(args[where])
        return func(*args, **(kwargs or {}))

    @property
    def unknown(self) -> list[str]:
        return sorted(set(self.calls) - set(COLLECTIVES))

    def sent(self, ranks: int) -> dict[str, int]:
        """Bytes one rank sends per operation by the ring convention, for the known operations."""
        return {k: round(COLLECTIVES[k][1](ranks) * v) for k, v in self.payload.items()
                if k in COLLECTIVES}


def train_rank(cfg: ShardConfig, *, rank: int, world_size: int) -> dict:
    """Train ``cfg.steps`` steps on this rank (the process group is up) and return what it
    holds (weights, gradients and optimizer state in bytes), the collectives of its last step
    (intercepted: calls, payload and sent bytes per operation) and the full final parameters."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from course_lib.core.optimizers import make_optimizer, optimizer_class, param_groups
    from course_lib.core.train import TrainConfig, train

    cfg.validate()
    s = cfg.setup
    model = build_model(s.vocab_size, preset="teacher", seed=cfg.seed, d_model=s.d_model,
                        n_layers=s.n_layers, n_heads=s.n_heads, d_ff=s.d_ff,
                        n_outputs=s.n_outputs, max_len=max(512, s.length))
    if cfg.strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world_size,))
        for block in model.blocks:          # each block gathered just before it runs
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)       # the rest: embedding, final norm, head
        net = model
    else:
        net = DDP(model)
    # the course's optimizer rule for every strategy: AdamW decays the weight matrices only, the
    # others nothing (torch's defaults); ZeRO-1 shards the state of the same class and groups
    groups = param_groups(net, weight_decay=0.01 if s.optimizer == "adamw" else 0.0)
    if cfg.strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        cls, options = optimizer_class(s.optimizer)
        # ZeRO places tensors greedily, largest first, one group after the other: the group
        # holding the largest tensor (the embedding) goes first, or the ranks' shares drift apart
        groups.sort(key=lambda g: -max((p.numel() for p in g["params"]), default=0))
        opt = ZeroRedundancyOptimizer(groups, optimizer_class=cls, lr=cfg.lr,
                                      **{k: v for k, v in options.items() if k != "weight_decay"})
    else:
        opt = make_optimizer(s.optimizer, groups, lr=cfg.lr)
    counter = CollectiveCounter()
    batches = [_batch(cfg, rank, step) for step in range(cfg.steps)]
    last = cfg.steps - 1                    # earlier steps include FSDP2's lazy set-up
    hist = train(net, batches, optimizer=opt, max_steps=cfg.steps, autocast_dtype=None,
                 cfg=TrainConfig(epochs=1, lr=cfg.lr, grad_clip=0.0, seed=cfg.seed,
                                 schedule="constant"),
                 step_context=lambda step: counter if step == last else contextlib.nullcontext(),
                 progress=False)
    seconds = hist.seconds
    params = list(model.parameters())
    local_opt = opt.optim if cfg.strategy == "zero1" else opt
    held = {"weights": sum(_local_bytes(p) for p in params),
            "gradients": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(_local_bytes(v) for st in local_opt.state.values() for v in st.values()
                             if torch.is_tensor(v) and v.dim() > 0)}
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in params]
    return {"held": held, "seconds": seconds,
            "collectives": {"calls": counter.calls, "payload": counter.payload,
                            "sent": counter.sent(world_size), "unknown": counter.unknown},
            "params": torch.cat([t.reshape(-1) for t in full]).detach().clone(),
            "full_weights": sum(t.numel() * t.element_size() for t in full)}


_SETUP_OPTIONS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_outputs", "batch",
                  "length", "optimizer")   # what the worker's command line sets of the Setup
_RUN_OPTIONS = ("strategy", "steps", "lr", "seed")


def _parse(argv: Sequence[str] | None) -> tuple[ShardConfig, str | None, int]:
    ap = argparse.ArgumentParser(prog=MODULE)
    defaults = ShardConfig()
    for name in _RUN_OPTIONS:
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(getattr(defaults, name)),
                        default=getattr(defaults, name))
    for name in _SETUP_OPTIONS:
        value = getattr(defaults.setup, name)
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = vars(ap.parse_args([str(a) for a in (argv or [])]))
    out, threads = args.pop("out"), args.pop("threads")
    setup = replace(defaults.setup, **{k: args.pop(k) for k in _SETUP_OPTIONS})
    return ShardConfig(setup=setup, **args), out, threads


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry point: rank 0 writes every rank's bytes, its last step's collectives and
    the final parameters."""
    import sys

    cfg, out, threads = _parse(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        got = train_rank(cfg, rank=rank, world_size=world)
        every: list = [None] * world
        dist.all_gather_object(every, {"rank": rank, "held": got["held"],
                                       "seconds": got["seconds"],
                                       "collectives": got["collectives"]})
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
    pairs = [(k, getattr(cfg, k)) for k in _RUN_OPTIONS] + \
        [(k, getattr(cfg.setup, k)) for k in _SETUP_OPTIONS]
    return [a for k, v in pairs for a in (f"--{k.replace('_', '-')}", str(v))]


if __name__ == "__main__":
    raise SystemExit(main())
