"""What each DDP rank settles before it trains (lesson 08): its process-group backend, its CPU
threads, its share of the batches, its data and its model; and the accuracy of what it trained.

``course_lib.distributed.ddp`` (the worker torchrun starts) uses all three; they live apart so that
each can be read, and tested, on its own.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import torch
from torch.utils.data import Sampler

__all__ = ["BACKENDS", "resolve_backend", "auto_threads", "ShardedBatchSampler", "worker_corpus",
           "worker_model", "accuracy_of_params", "items_per_rank"]

BACKENDS = ("auto", "gloo", "nccl")


def resolve_backend(backend: str = "auto", *, local_world_size: int = 1) -> str:
    """The process-group backend for ``local_world_size`` ranks on this machine.

    nccl gives every rank a GPU of its own (rank ``LOCAL_RANK`` uses ``cuda:LOCAL_RANK``), so
    ``auto`` picks it only when there are at least as many GPUs as local ranks; otherwise gloo,
    which runs on the CPU. (Two ranks on a one-GPU Colab with nccl would call
    ``set_device("cuda:1")`` and crash.) Asking for nccl without enough GPUs is an error.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if local_world_size < 1:
        raise ValueError(f"local_world_size must be >= 1, got {local_world_size}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if gpus >= local_world_size else "gloo"
    if backend == "nccl" and gpus < local_world_size:
        raise ValueError(f"backend 'nccl' needs one CUDA GPU per rank: {local_world_size} "
                         f"rank(s) on this machine, {gpus} GPU(s); use 'gloo' (or 'auto')")
    return backend


def auto_threads(local_world_size: int) -> int:
    """CPU threads per process: the cores shared out, so N processes never oversubscribe."""
    if local_world_size < 1:
        raise ValueError(f"local_world_size must be >= 1, got {local_world_size}")
    return max(1, (os.cpu_count() or 1) // local_world_size)


class ShardedBatchSampler(Sampler[list[int]]):
    """Rank ``rank`` of ``num_replicas`` gets batches ``rank, rank + N, rank + 2N, ...``.

    Wraps any batch sampler (e.g. ``BucketBatchSampler``) that every rank builds with the same
    seed. Every rank must take the same number of steps (else DDP waits forever for the
    missing rank's gradients): ``drop_last`` drops the last ``len % N`` batches (shares are
    disjoint), otherwise the first batches are repeated to pad (shares cover everything, as in
    ``DistributedSampler``).
    """

    def __init__(self, batch_sampler, *, num_replicas: int, rank: int, drop_last: bool = False):
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas - 1}], got {rank}")
        self.batch_sampler, self.num_replicas, self.rank = batch_sampler, num_replicas, rank
        self.drop_last = drop_last

    def _per_rank(self, n: int) -> int:
        return n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)

    def __len__(self) -> int:
        return self._per_rank(len(self.batch_sampler))

    def __iter__(self) -> Iterator[list[int]]:
        # The count comes from the plan being iterated: a sampler whose epochs differ in
        # length (token budgets) would otherwise be cut by the next epoch's count.
        batches = list(self.batch_sampler)
        total = self._per_rank(len(batches)) * self.num_replicas
        if total > len(batches):
            batches += (batches * (total // max(1, len(batches)) + 1))[:total - len(batches)]
        return iter(batches[self.rank:total:self.num_replicas])

    def set_epoch(self, epoch: int) -> None:
        """Passed on to the wrapped sampler, so every rank draws the same epoch's plan."""
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)


def worker_corpus(cfg):
    """The corpus a worker trains on (``cfg`` a ``distributed.ddp.WorkerConfig``): the full task, or
    the "easy" one without the negation, opener and contrast rules (lesson 12's race uses it
    too), where a small model trained with plain SGD for a hundred steps learns something, so
    an equivalence check is not run on a model at chance."""
    from course_lib.core.data import CorpusConfig, load_corpus

    if cfg.task == "easy":
        return load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0),
                           scale=cfg.data_scale)
    return load_corpus(scale=cfg.data_scale)


def worker_model(cfg, vocab_size: int):
    """The worker's model, seeded by ``cfg.seed`` (every rank starts from the same weights)."""
    from course_lib.core.model import build_model

    return build_model(vocab_size, preset="student", seed=cfg.seed, d_model=cfg.d_model,
                       n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_ff=cfg.d_ff)


def accuracy_of_params(cfg, params: torch.Tensor, *, split: str = "val",
                       scale: float | None = None) -> float:
    """Accuracy of the model whose flattened parameters a worker returned
    (``run_training(...)["params"]``) on ``split`` ("val" or "test") of the worker's corpus,
    built at ``scale`` (default: the worker's own ``data_scale``; 1.0 gives the full split,
    e.g. 2,000 test reviews, enough to resolve a one-point change)."""
    from course_lib.core.batching import make_loader
    from course_lib.core.evaluate import evaluate

    if split not in ("val", "test"):
        raise ValueError(f"split must be 'val' or 'test', got {split!r}")
    corpus = worker_corpus(replace(cfg, data_scale=scale) if scale is not None else cfg)
    model = worker_model(cfg, len(corpus.vocab))
    n = sum(p.numel() for p in model.parameters())
    if params.numel() != n:
        raise ValueError(f"params has {params.numel()} values, the worker's model {n}")
    torch.nn.utils.vector_to_parameters(params.to(torch.float32), model.parameters())
    loader = make_loader(getattr(corpus, split), batch_size=64, shuffle=False,
                         max_length=cfg.max_length)
    return float(evaluate(model.eval(), loader)["accuracy"])


def items_per_rank(n_items: int, *, world_size: int, distributed: bool, batch_size: int = 50,
                   seed: int = 0) -> list[set[int]]:
    """The items each of ``world_size`` ranks loads in one epoch of ``range(n_items)``: with a
    ``DistributedSampler`` (one shared seed, disjoint shares), or with a plain shuffled
    DataLoader per rank, each seeded by its rank (what a script without a sampler does)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    if n_items < 1 or world_size < 1:
        raise ValueError(f"n_items and world_size must be >= 1, got {n_items}, {world_size}")
    out = []
    for rank in range(world_size):
        sampler = (DistributedSampler(range(n_items), num_replicas=world_size, rank=rank,
                                      shuffle=True, seed=seed) if distributed else None)
        loader = DataLoader(range(n_items), batch_size=batch_size, sampler=sampler,
                            shuffle=sampler is None,
                            generator=torch.Generator().manual_seed(seed + rank))
        out.append({int(i) for batch in loader for i in batch})
    return out
