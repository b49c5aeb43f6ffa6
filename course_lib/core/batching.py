"""Batch samplers that group sequences of similar length, keeping training random.

Every sampler here is a DataLoader ``batch_sampler``: it yields lists of dataset indices and
every index appears exactly once per epoch (unless ``drop_last``). Randomness comes from a
``torch.Generator`` (or ``seed``); each ``__iter__`` draws a new epoch, ``set_epoch(e)``
reseeds with ``seed + e`` (as ``DistributedSampler`` does) so that every rank draws the same
plan. To shard an epoch across processes (lesson 08), wrap any of them in
``distributed.setup.ShardedBatchSampler``: one place decides which rank gets which batch, and it
gives every rank the same number of steps (DDP waits forever for a rank with fewer).

- ``UniformLengthBatchSampler``: sort by length, cut into batches ("uniform length batching",
  M. Benesty, *Divide Hugging Face Transformers training time by 2 or more*, 2020), without
  the widely copied version's flaws: it never reorders the caller's data, and it returns
  indices, so sequences and labels stay aligned.
- ``BucketBatchSampler``: the "sortish" recipe (fastai's SortishSampler, AllenNLP's
  BucketIterator): shuffle, cut into megabatches, sort each by length, cut into batches,
  shuffle the batches. Little padding, yet no long-to-short sawtooth inside an epoch.
- ``TokenBudgetBatchSampler``: batches whose cost, batch size x longest length, stays within
  ``max_tokens`` (fairseq's ``--max-tokens``).
- ``NoisySortBatchSampler``: a full sort on length with fresh noise every epoch: nearly the
  full sort's padding, yet the batches change from epoch to epoch (``kept_batch_mates``
  measures how much).
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


def _round_up(n: int, multiple: int | None) -> int:
    return n if not multiple else -(-n // multiple) * multiple


def uniform_length_batches(lengths: Sequence[int], *, batch_size: int,
                           descending: bool = False) -> list[list[int]]:
    """Indices sorted by length (stable), cut into batches. Pure: ``lengths`` is untouched."""
    lengths = _check_lengths(lengths)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=descending)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def random_batches(n: int, *, batch_size: int, seed: int) -> list[list[int]]:
    """Indices ``0..n-1`` in a random order (from ``seed``), cut into batches: what a plain
    shuffled DataLoader gives, as a list (the baseline of lessons 01 and 02)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return [perm[i:i + batch_size] for i in range(0, n, batch_size)]


class _PlannedBatchSampler(Sampler[list[int]]):
    """Shared machinery: an epoch is a *plan* (list of batches) drawn from the generator.

    ``__len__`` draws the next epoch's plan and keeps it, so the length a DataLoader reports
    is the length of the epoch it then iterates, even when the count varies (token budgets).
    """

    def __init__(self, lengths: Sequence[int], *, drop_last: bool, shuffle: bool, seed: int,
                 generator: torch.Generator | None):
        self.lengths = _check_lengths(lengths)
        self.drop_last, self.shuffle, self.seed = drop_last, shuffle, seed
        self.generator = generator or torch.Generator().manual_seed(seed)
        self._next: list[list[int]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Reseed with ``seed + epoch``: every rank then draws the same plan."""
        self.generator.manual_seed(self.seed + epoch)
        self._next = None

    def _plan(self) -> list[list[int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _full(self, batch: list[int]) -> bool:
        return True

    def _epoch(self) -> list[list[int]]:
        if self._next is not None:
            plan, self._next = self._next, None
            return plan
        batches = self._plan()
        if self.drop_last:
            batches = [b for b in batches if self._full(b)]
        if self.shuffle:
            perm = torch.randperm(len(batches), generator=self.generator).tolist()
            batches = [batches[i] for i in perm]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._epoch())

    def __len__(self) -> int:
        if self._next is None:
            self._next = self._epoch()
        return len(self._next)


class UniformLengthBatchSampler(_PlannedBatchSampler):
    """Sort by length, cut into batches; ``shuffle`` randomizes only the order of batches.

    With ``shuffle=False`` batches go from shortest to longest every epoch: the sawtooth of
    lesson 02 (each epoch sweeps short to long, then jumps back).
    """

    def __init__(self, lengths: Sequence[int], *, batch_size: int, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0, generator: torch.Generator | None = None):
        super().__init__(lengths, drop_last=drop_last, shuffle=shuffle, seed=seed,
                         generator=generator)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size

    def _full(self, batch):
        return len(batch) == self.batch_size

    def _plan(self):
        return uniform_length_batches(self.lengths, batch_size=self.batch_size)


class BucketBatchSampler(_PlannedBatchSampler):
    """Sortish batches; every index appears exactly once per epoch.

    ``megabatch_size`` is in batches: 50 means each sorted pool holds 50 * batch_size
    sequences. The last partial batch is kept unless ``drop_last``. ``generator`` (or
    ``seed``) supplies the randomness; each call to ``__iter__`` draws a new epoch.
    """

    def __init__(self, lengths: Sequence[int], *, batch_size: int, megabatch_size: int = 50,
                 drop_last: bool = False, shuffle: bool = True, seed: int = 0,
                 generator: torch.Generator | None = None):
        super().__init__(lengths, drop_last=drop_last, shuffle=shuffle, seed=seed,
                         generator=generator)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if megabatch_size < 1:
            raise ValueError(f"megabatch_size must be >= 1, got {megabatch_size}")
        self.batch_size, self.megabatch_size = batch_size, megabatch_size

    def _full(self, batch):
        return len(batch) == self.batch_size

    def _plan(self):
        n = len(self.lengths)
        order = (torch.randperm(n, generator=self.generator).tolist() if self.shuffle
                 else list(range(n)))
        pool = self.batch_size * self.megabatch_size
        batches: list[list[int]] = []
        for start in range(0, n, pool):
            mega = sorted(order[start:start + pool], key=lambda i: self.lengths[i])
            batches += [mega[i:i + self.batch_size] for i in range(0, len(mega), self.batch_size)]
        return batches


class TokenBudgetBatchSampler(_PlannedBatchSampler):
    """Batches whose padded cost, ``len(batch) * round_up(longest, multiple_of)``, is at most
    ``max_tokens``: many short sequences or a few long ones per batch.

    Like ``BucketBatchSampler``, sequences are shuffled, sorted inside megabatches of
    ``megabatch_size`` sequences, batched greedily, and batches are shuffled. A sequence whose
    own cost exceeds ``max_tokens`` raises ``ValueError`` at construction (it could only be
    truncated, and that must be the caller's visible choice). ``max_batch_size`` caps the
    count; ``drop_last`` drops each megabatch's last batch when it is under half the budget.
    """

    def __init__(self, lengths: Sequence[int], *, max_tokens: int,
                 max_batch_size: int | None = None, multiple_of: int | None = None,
                 megabatch_size: int = 1024, drop_last: bool = False, shuffle: bool = True,
                 seed: int = 0, generator: torch.Generator | None = None):
        super().__init__(lengths, drop_last=drop_last, shuffle=shuffle, seed=seed,
                         generator=generator)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if multiple_of is not None and multiple_of < 1:
            raise ValueError(f"multiple_of must be >= 1, got {multiple_of}")
        if megabatch_size < 1:
            raise ValueError(f"megabatch_size must be >= 1, got {megabatch_size}")
        longest = _round_up(max(self.lengths), multiple_of)
        if longest > max_tokens:
            raise ValueError(f"max_tokens must be >= the longest sequence's padded length "
                             f"({longest}), got {max_tokens}")
        self.max_tokens, self.max_batch_size = max_tokens, max_batch_size
        self.multiple_of, self.megabatch_size = multiple_of, megabatch_size

    def cost(self, batch: Sequence[int]) -> int:
        return len(batch) * _round_up(max(self.lengths[i] for i in batch), self.multiple_of)

    def _full(self, batch):
        return 2 * self.cost(batch) >= self.max_tokens

    def _plan(self):
        n = len(self.lengths)
        order = (torch.randperm(n, generator=self.generator).tolist() if self.shuffle
                 else list(range(n)))
        cap = self.max_batch_size or n
        batches: list[list[int]] = []
        for start in range(0, n, self.megabatch_size):
            mega = sorted(order[start:start + self.megabatch_size], key=lambda i: self.lengths[i])
            batch: list[int] = []
            for i in mega:   # ascending: the newcomer is the longest so far
                width = _round_up(self.lengths[i], self.multiple_of)
                if batch and (len(batch) >= cap or (len(batch) + 1) * width > self.max_tokens):
                    batches.append(batch)
                    batch = []
                batch.append(i)
            batches.append(batch)
        return batches


def make_loader(dataset, *, batch_size: int, bucketed: bool = True, shuffle: bool = True,
                seed: int = 0, max_length: int | None = None, pad_id: int = 0,
                pad_to_multiple_of: int | None = None, megabatch_size: int = 50,
                lengths: Sequence[int] | None = None):
    """A DataLoader over a ``ReviewDataset`` with the course's collate.

    ``bucketed`` groups similar lengths (the default: training is several times faster);
    otherwise batches are random (``shuffle``) or in dataset order. ``lengths`` is needed for
    datasets without a ``lengths`` attribute (e.g. a ``Subset``).
    """
    from torch.utils.data import DataLoader

    from course_lib.core.padding import Collate

    collate = Collate(pad_id=pad_id, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of)
    if bucketed:
        if lengths is None and not hasattr(dataset, "lengths"):
            raise ValueError(f"lengths must be given for a {type(dataset).__name__} (it has no "
                             f"'lengths' attribute), or pass bucketed=False")
        sampler = BucketBatchSampler(dataset.lengths if lengths is None else lengths,
                                     batch_size=batch_size, shuffle=shuffle, seed=seed,
                                     megabatch_size=megabatch_size)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                      generator=torch.Generator().manual_seed(seed))


class NoisySortBatchSampler(_PlannedBatchSampler):
    """Sort the whole epoch on ``log(length) + U(-noise, noise)``, ties broken at random, cut
    into batches, shuffle the batches. ``noise`` 0 is the full sort's padding with new batches
    among equal lengths each epoch; 0.01 lets sequences within about 1% of each other's length
    trade places too: more new batch-mates every epoch for a little more padding."""

    def __init__(self, lengths: Sequence[int], *, batch_size: int, noise: float = 0.01,
                 drop_last: bool = False, seed: int = 0, generator: torch.Generator | None = None):
        super().__init__(lengths, drop_last=drop_last, shuffle=True, seed=seed,
                         generator=generator)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0 (in log-length units), got {noise}")
        self.batch_size, self.noise = batch_size, noise
        self._log = torch.tensor(self.lengths, dtype=torch.float64).log()

    def _full(self, batch):
        return len(batch) == self.batch_size

    def _plan(self):
        perm = torch.randperm(len(self.lengths), generator=self.generator)   # ties: at random
        u = torch.rand(len(self.lengths), generator=self.generator, dtype=torch.float64)
        order = perm[torch.argsort(self._log[perm] + self.noise * (2 * u - 1),
                                   stable=True)].tolist()
        return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]


def kept_batch_mates(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> float:
    """How alike two epochs' batches are: for each item, the share of its batch-mates in ``a``
    that share its batch again in ``b``, averaged over items with batch-mates. 1: the same
    batches (a full sort); about ``batch_size / n``: independent random batches."""
    where = {i: k for k, batch in enumerate(b) for i in batch}
    shares = [sum(where.get(j) == where.get(i) for j in batch if j != i) / (len(batch) - 1)
              for batch in a if len(batch) > 1 for i in batch]
    if not shares:
        raise ValueError("a has no batch of two or more items")
    return sum(shares) / len(shares)
