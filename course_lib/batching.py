"""Batch samplers that group sequences of similar length, keeping training random.

``BucketBatchSampler`` follows the "sortish" recipe (fastai's SortishSampler, AllenNLP's
BucketIterator): shuffle, cut into megabatches, sort each megabatch by length, cut into
batches, shuffle the batches. Neighbouring sequences have similar lengths (little padding),
yet batch order is random every epoch (no long-to-short sawtooth). Lesson 02 builds on this.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


def _check_lengths(lengths: Sequence[int]) -> list[int]:
    lengths = [int(n) for n in lengths]
    if not lengths:
        raise ValueError("lengths must not be empty")
    if min(lengths) < 1:
        raise ValueError(f"lengths must all be >= 1, got min {min(lengths)}")
    return lengths


class BucketBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices; every index appears exactly once per epoch.

    ``megabatch_size`` is in batches: 50 means each sorted pool holds 50 * batch_size
    sequences. The last partial batch is kept unless ``drop_last``. ``generator`` (or
    ``seed``) supplies the randomness; each call to ``__iter__`` draws a new epoch.
    """

    def __init__(self, lengths: Sequence[int], *, batch_size: int, megabatch_size: int = 50,
                 drop_last: bool = False, shuffle: bool = True, seed: int = 0,
                 generator: torch.Generator | None = None):
        self.lengths = _check_lengths(lengths)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if megabatch_size < 1:
            raise ValueError(f"megabatch_size must be >= 1, got {megabatch_size}")
        self.batch_size, self.megabatch_size = batch_size, megabatch_size
        self.drop_last, self.shuffle = drop_last, shuffle
        self.generator = generator or torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[list[int]]:
        n = len(self.lengths)
        order = (torch.randperm(n, generator=self.generator).tolist() if self.shuffle
                 else list(range(n)))
        pool = self.batch_size * self.megabatch_size
        batches: list[list[int]] = []
        for start in range(0, n, pool):
            mega = sorted(order[start:start + pool], key=lambda i: self.lengths[i])
            batches += [mega[i:i + self.batch_size] for i in range(0, len(mega), self.batch_size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches),
                                                          generator=self.generator).tolist()]
        return iter(batches)

    def __len__(self) -> int:
        n, pool = len(self.lengths), self.batch_size * self.megabatch_size
        if not self.drop_last:
            full, rest = divmod(n, pool)
            return full * self.megabatch_size + -(-rest // self.batch_size)
        full, rest = divmod(n, pool)
        return full * self.megabatch_size + rest // self.batch_size


def make_loader(dataset, *, batch_size: int, bucketed: bool = True, shuffle: bool = True,
                seed: int = 0, max_length: int | None = None, pad_id: int = 0):
    """A DataLoader over a ``ReviewDataset`` with the course's collate.

    ``bucketed`` groups similar lengths (the default: training is several times faster);
    otherwise batches are random (``shuffle``) or in dataset order.
    """
    from torch.utils.data import DataLoader

    from .padding import Collate

    collate = Collate(pad_id=pad_id, max_length=max_length)
    if bucketed:
        sampler = BucketBatchSampler(dataset.lengths, batch_size=batch_size, shuffle=shuffle,
                                     seed=seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                      generator=torch.Generator().manual_seed(seed))
