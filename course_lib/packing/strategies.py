"""Lesson 02's batching strategies by name: the plan of an epoch, its token efficiency, a
DataLoader, a training pass and an inference pass, so that the lesson compares them in one
interleaved timing loop (``bench.compare``) and the tests check each piece.

=============== =========================================================================
fixed 512       random batches, every review padded to 512
dynamic         random batches, padded to the batch's longest
uniform length  sort by length, cut into batches, shuffle the batch order (the same batches
                every epoch)
bucketed        shuffle, sort inside megabatches, batch, shuffle the batches ("sortish")
noisy sort      sort on length plus fresh noise each epoch, batch, shuffle the batches
token budget    like bucketed, as many reviews per batch as fit ``batch x longest <= max_tokens``
packing         several reviews share a row of ``pack_len``; a block-diagonal mask apart
=============== =========================================================================
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from course_lib.core.train import make_step_fn
from course_lib.core.batching import (BucketBatchSampler, NoisySortBatchSampler,
                                      TokenBudgetBatchSampler, UniformLengthBatchSampler,
                                      kept_batch_mates, random_batches)
from course_lib.packing.pack import (PackedCollate, PackingBatchSampler, packed_forward,
                                     packed_task_loss, packing_efficiency)
from course_lib.core.padding import Collate, batches_efficiency
from course_lib.core.task import to_device

STRATEGIES = ("fixed 512", "dynamic", "uniform length", "bucketed", "noisy sort", "token budget",
              "packing")


@dataclass(frozen=True)
class StrategyConfig:
    batch_size: int = 32       # reviews per batch (all but token budget and packing)
    megabatch: int = 100       # bucketed: batches per sorted megabatch
    noise: float = 0.01        # noisy sort: noise on log(length); 0 = full sort, random ties
    max_tokens: int = 2560     # token budget per batch (= 5 rows of 512 for packing)
    pack_len: int = 512        # packing: row length ...
    pack_rows: int = 5         # ... and rows per batch
    fixed_length: int = 512    # fixed: the padded width


def _check(name: str) -> None:
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}")


def sampler(name: str, lengths: Sequence[int], cfg: StrategyConfig, *, seed: int = 0):
    """The strategy's batch sampler (fixed and dynamic: random batches, as a list)."""
    _check(name)
    if name in ("fixed 512", "dynamic"):
        return random_batches(len(lengths), batch_size=cfg.batch_size, seed=seed)
    if name == "uniform length":
        return UniformLengthBatchSampler(lengths, batch_size=cfg.batch_size, seed=seed)
    if name == "bucketed":
        return BucketBatchSampler(lengths, batch_size=cfg.batch_size, megabatch_size=cfg.megabatch,
                                  seed=seed)
    if name == "noisy sort":
        return NoisySortBatchSampler(lengths, batch_size=cfg.batch_size, noise=cfg.noise, seed=seed)
    if name == "token budget":
        return TokenBudgetBatchSampler(lengths, max_tokens=cfg.max_tokens, seed=seed)
    return PackingBatchSampler(lengths, max_len=cfg.pack_len, rows_per_batch=cfg.pack_rows,
                               seed=seed)


def efficiency(name: str, lengths: Sequence[int], plan: Sequence[Sequence[int]],
               cfg: StrategyConfig) -> float:
    """Real / processed tokens of ``plan`` (one epoch of batches) under the strategy."""
    _check(name)
    if name == "packing":
        return packing_efficiency(lengths, plan, max_len=cfg.pack_len)
    return batches_efficiency(lengths, plan,
                              max_length=cfg.fixed_length if name == "fixed 512" else None)


def epoch_table(lengths: Sequence[int], cfg: StrategyConfig, *, seed: int = 0) -> dict[str, dict]:
    """For every strategy, two epochs drawn in a row: the first's token efficiency and batch
    count, and how many batch-mates the second keeps (``kept_batch_mates``: 1 = the same
    batches every epoch; fixed and dynamic draw a new random epoch from ``seed + 1``)."""
    out = {}
    for name in STRATEGIES:
        s = sampler(name, lengths, cfg, seed=seed)
        first = list(s)
        second = (sampler(name, lengths, cfg, seed=seed + 1) if isinstance(s, list) else list(s))
        out[name] = {"efficiency": efficiency(name, lengths, first, cfg), "batches": len(first),
                     "kept_batch_mates": kept_batch_mates(first, second)}
    return out


def loader(name: str, data, lengths: Sequence[int], cfg: StrategyConfig, *, seed: int = 0,
           collate: Callable | None = None) -> DataLoader:
    """A DataLoader over ``data`` (``lengths`` its items' lengths) with the strategy's batches
    and collate (packing: ``PackedCollate``; fixed: padded to ``fixed_length``)."""
    s = sampler(name, lengths, cfg, seed=seed)
    if collate is None:
        collate = (PackedCollate(max_len=cfg.pack_len) if name == "packing"
                   else Collate(max_length=cfg.fixed_length if name == "fixed 512" else None))
    return DataLoader(data, batch_sampler=s, collate_fn=collate)


def collated_efficiency(batches: Sequence[dict]) -> float:
    """Real / processed tokens of collated batches, counted from the tensors themselves (what a
    timing loop actually ran): the mask's True cells (packing: slots holding a review) over
    every cell."""
    real = processed = 0
    for b in batches:
        cells = b["seq_ids"] >= 0 if "seq_ids" in b else b["attention_mask"]
        real, processed = real + int(cells.sum()), processed + cells.numel()
    if not processed:
        raise ValueError("batches must hold at least one token")
    return real / processed


def forward(model: torch.nn.Module, name: str, batch: dict) -> torch.Tensor:
    """The model's outputs for one batch of the strategy (packed: one per review)."""
    if name == "packing":
        return packed_forward(model, batch)
    return model(batch["input_ids"], batch["attention_mask"])


def training_pass(model: torch.nn.Module, name: str, batches: Sequence[dict], *,
                  precision_name: str, device: torch.device | str) -> Callable[[], None]:
    """One call: a training step on every batch, the course's step (``train.make_step_fn``)."""
    loss_fn = packed_task_loss() if name == "packing" else None
    steps = [make_step_fn(model, b, precision_name=precision_name, device=device, loss_fn=loss_fn)
             for b in batches]
    return lambda: [s() for s in steps]


def inference_pass(model: torch.nn.Module, name: str, batches: Sequence[dict], *,
                   device: torch.device | str) -> Callable[[], None]:
    """One call: the model's outputs for every batch, in inference mode."""
    on_device = [to_device(b, device) for b in batches]

    def run():
        model.eval()
        with torch.inference_mode():
            for b in on_device:
                forward(model, name, b)
    return run


class WidthLog(Collate):
    """The course collate, remembering each batch's padded width (the sawtooth plot)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.widths: list[int] = []

    def __call__(self, items):
        out = super().__call__(items)
        self.widths.append(int(out["input_ids"].shape[1]))
        return out


def grouped_vs_random(lengths: Sequence[int], *, batch_size: int, pool: int, n: int,
                      seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """``n`` pairs (a random batch, a batch of the bucketed sampler whose sorted pools hold
    ``pool`` reviews), each drawn at random from one epoch of its sampler. Both samplers cut an
    epoch into as many batches of ``batch_size``, so one training step of each stands for a step
    of its epoch: timing the pairs interleaved estimates the epoch's speed-up."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    plain, grouped = _two_epochs(lengths, batch_size=batch_size, pool=pool, seed=seed)
    g = torch.Generator().manual_seed(seed)
    a = torch.randperm(len(plain), generator=g)[:n].tolist()
    b = torch.randperm(len(grouped), generator=g)[:n].tolist()
    return [(plain[i], grouped[j]) for i, j in zip(a, b)]


def _two_epochs(lengths: Sequence[int], *, batch_size: int, pool: int, seed: int):
    """One epoch of random batches and one of the bucketed sampler with pools of ``pool``."""
    if pool < batch_size:
        raise ValueError(f"pool must be >= batch_size={batch_size}, got {pool}")
    plain = random_batches(len(lengths), batch_size=batch_size, seed=seed)
    grouped = list(BucketBatchSampler(lengths, batch_size=batch_size, seed=seed,
                                      megabatch_size=pool // batch_size))
    return plain, grouped


def epoch_widths(lengths: Sequence[int], *, batch_size: int, pool: int,
                 seed: int = 0) -> tuple[list[int], list[int]]:
    """The padded width (longest review) of every batch of the two epochs ``grouped_vs_random``
    draws from: random batches, then length-grouped ones. What an epoch's time is summed over
    (``verdicts.regression_ratio``)."""
    plain, grouped = _two_epochs(lengths, batch_size=batch_size, pool=pool, seed=seed)
    return ([max(lengths[i] for i in b) for b in plain],
            [max(lengths[i] for i in b) for b in grouped])


def pool_efficiency(lengths: Sequence[int], *, batch_size: int, pool: int, seed: int = 0) -> float:
    """Token efficiency of one epoch of the bucketed sampler with pools of ``pool`` reviews."""
    plan = list(BucketBatchSampler(lengths, batch_size=batch_size, seed=seed,
                                   megabatch_size=max(1, pool // batch_size)))
    return batches_efficiency(lengths, plan)
