"""Sequence packing: several sequences share one row of ``max_len`` tokens, no padding waste.

Follows the packing of Krell et al., *Efficient Sequence Packing without Cross-contamination*
(2021): sequences are assigned to rows by a bin-packing heuristic, each sequence's position
ids restart at 0, a block-diagonal attention mask stops tokens from attending across sequence
boundaries, and pooling is done per sequence. ``cu_seqlens`` (cumulative sequence lengths over
the flattened real tokens) is the index FlashAttention's variable-length kernels take.

- ``pack_greedy``: next-fit in the given order (a new row when the next sequence does not fit).
- ``pack_best_fit``: best-fit decreasing (longest first, into the fullest row that fits).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from course_lib.core.batching import _PlannedBatchSampler


def _check(lengths: Sequence[int], max_len: int) -> list[int]:
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    lengths = [int(n) for n in lengths]
    if not lengths:
        raise ValueError("lengths must not be empty")
    if min(lengths) < 1:
        raise ValueError(f"lengths must all be >= 1, got min {min(lengths)}")
    if max(lengths) > max_len:
        raise ValueError(f"max_len must be >= the longest sequence ({max(lengths)}), "
                         f"got {max_len}")
    return lengths


def pack_greedy(lengths: Sequence[int], *, max_len: int) -> list[list[int]]:
    """Next-fit: rows of positions into ``lengths``, in order."""
    lengths = _check(lengths, max_len)
    rows: list[list[int]] = [[]]
    used = 0
    for i, n in enumerate(lengths):
        if used + n > max_len:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += n
    return rows


def pack_best_fit(lengths: Sequence[int], *, max_len: int) -> list[list[int]]:
    """Best-fit decreasing: each sequence (longest first) goes to the fullest row it fits."""
    lengths = _check(lengths, max_len)
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        best = min((r for r in range(len(rows)) if free[r] >= n), key=lambda r: free[r],
                   default=None)
        if best is None:
            rows.append([i])
            free.append(max_len - n)
        else:
            rows[best].append(i)
            free[best] -= n
    return rows


@dataclass
class PackedBatch:
    """Rows of packed sequences. Sequence k of the batch is ``seqs[k]`` of :func:`pack`."""
    input_ids: torch.Tensor       # (R, L)
    position_ids: torch.Tensor    # (R, L), restarting at 0 for every sequence
    seq_ids: torch.Tensor         # (R, L), sequence number in the batch; -1 on padding
    attention_mask: torch.Tensor  # (R, L) bool, True = real token
    cu_seqlens: torch.Tensor      # (N + 1,) int32, offsets into the flattened real tokens
    lengths: torch.Tensor         # (N,)

    def as_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.__dict__)


def pack(seqs: Sequence[torch.Tensor], *, max_len: int, strategy: str = "best_fit",
         pad_id: int = 0) -> PackedBatch:
    """Pack 1-D id tensors into rows of ``max_len`` (trimmed to the longest row)."""
    if strategy not in ("greedy", "best_fit"):
        raise ValueError(f"strategy must be 'greedy' or 'best_fit', got {strategy!r}")
    lengths = _check([len(s) for s in seqs], max_len)
    rows = (pack_greedy if strategy == "greedy" else pack_best_fit)(lengths, max_len=max_len)
    width = max(sum(lengths[i] for i in r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    sid = torch.full((len(rows), width), -1, dtype=torch.long)
    starts = [0] * len(seqs)
    for r, row in enumerate(rows):
        at = 0
        for k in row:
            n = lengths[k]
            ids[r, at:at + n] = torch.as_tensor(seqs[k], dtype=torch.long)
            pos[r, at:at + n] = torch.arange(n)
            sid[r, at:at + n] = k
            starts[k] = r * width + at
            at += n
    lens = torch.tensor(lengths)
    cu = torch.zeros(len(seqs) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lens, 0)
    return PackedBatch(ids, pos, sid, sid >= 0, cu, lens)


def block_mask(seq_ids: torch.Tensor) -> torch.Tensor:
    """(R, L, L) bool, True where query i and key j belong to the same sequence.

    Padding (-1) attends to padding in its row only, so no softmax row is empty.
    """
    return seq_ids.unsqueeze(2) == seq_ids.unsqueeze(1)


def encoder_mask(seq_ids: torch.Tensor) -> torch.Tensor:
    """The block mask in the form ``EncoderClassifier.encode`` takes: (R, 1, L, L), True = may
    attend, broadcast over the heads."""
    return block_mask(seq_ids).unsqueeze(1)


def pool_packed(h: torch.Tensor, seq_ids: torch.Tensor, n_seqs: int) -> torch.Tensor:
    """Mean of each sequence's token states: (R, L, D) -> (N, D), padding excluded."""
    flat_ids = seq_ids.reshape(-1)
    keep = flat_ids >= 0
    flat = h.reshape(-1, h.shape[-1])[keep]
    idx = flat_ids[keep]
    sums = torch.zeros(n_seqs, h.shape[-1], dtype=h.dtype, device=h.device).index_add_(0, idx, flat)
    counts = torch.bincount(idx, minlength=n_seqs).clamp_min(1).to(h.dtype)
    return sums / counts.unsqueeze(1)


def packed_forward(model, batch: dict) -> torch.Tensor:
    """Model outputs for every sequence of a packed batch dict (``PackedCollate``'s)."""
    seq_ids = batch["seq_ids"]
    n = int(batch["lengths"].numel())
    # The course model's positions are relative (ALiBi's |i - j|, or RoPE's angle between i
    # and j): a review packed at slot 100 of its row is scored as one starting at 0, and the
    # block mask alone keeps reviews apart, so position_ids are not passed.
    h = model.encode(model.embed(batch["input_ids"]), mask=encoder_mask(seq_ids))
    out = model.head(pool_packed(h, seq_ids, n))
    return out.squeeze(-1) if model.cfg.n_outputs == 1 else out


def packed_task_loss(task: str = "classification"):
    """``train(loss_fn=...)`` for packed batches: cross-entropy on labels or MSE on ratings."""
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")

    def loss_fn(model, batch):
        out = packed_forward(model, batch)
        if task == "regression":
            return torch.nn.functional.mse_loss(out.float(), batch["ratings"])
        return torch.nn.functional.cross_entropy(out.float(), batch["labels"])
    return loss_fn


class PackedCollate:
    """DataLoader ``collate_fn``: dataset dicts -> a packed batch dict (+ labels, ratings,
    index). Uses next-fit in the order given, so batches from :class:`PackingBatchSampler`
    (whose rows come consecutively) never need more rows than it planned."""

    def __init__(self, *, max_len: int = 512, pad_id: int = 0, strategy: str = "greedy"):
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len, self.pad_id, self.strategy = max_len, pad_id, strategy

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        p = pack([it["input_ids"] for it in items], max_len=self.max_len,
                 strategy=self.strategy, pad_id=self.pad_id)
        return {**p.as_dict(),
                "labels": torch.tensor([it["label"] for it in items], dtype=torch.long),
                "ratings": torch.tensor([it["rating"] for it in items], dtype=torch.float32),
                "index": torch.tensor([it.get("index", -1) for it in items], dtype=torch.long)}


class PackingBatchSampler(_PlannedBatchSampler):
    """Batches of ``rows_per_batch`` packed rows: shuffle, best-fit pack each megabatch of
    ``megabatch_size`` sequences into rows of ``max_len``, group rows, shuffle the batches.
    Every index appears exactly once per epoch (shard it with ``ShardedBatchSampler``)."""

    def __init__(self, lengths: Sequence[int], *, max_len: int = 512, rows_per_batch: int = 4,
                 megabatch_size: int = 1024, shuffle: bool = True, seed: int = 0,
                 generator: torch.Generator | None = None):
        _check(lengths, max_len)
        for name, v in (("rows_per_batch", rows_per_batch), ("megabatch_size", megabatch_size)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        super().__init__(lengths, drop_last=False, shuffle=shuffle, seed=seed,
                         generator=generator)
        self.max_len, self.rows_per_batch, self.megabatch_size = (max_len, rows_per_batch,
                                                                  megabatch_size)

    def _plan(self) -> list[list[int]]:
        n = len(self.lengths)
        order = (torch.randperm(n, generator=self.generator).tolist() if self.shuffle
                 else list(range(n)))
        batches: list[list[int]] = []
        for start in range(0, n, self.megabatch_size):
            mega = order[start:start + self.megabatch_size]
            rows = pack_best_fit([self.lengths[i] for i in mega], max_len=self.max_len)
            rows = [[mega[k] for k in r] for r in rows]
            for r in range(0, len(rows), self.rows_per_batch):
                batches.append([i for row in rows[r:r + self.rows_per_batch] for i in row])
        return batches


def packing_efficiency(lengths: Sequence[int], batches: Sequence[Sequence[int]], *,
                       max_len: int = 512) -> float:
    """Real / processed tokens of an epoch of packed batches (rows next-fit in batch order,
    each batch's rows trimmed to its longest row, as :class:`PackedCollate` does)."""
    if not batches:
        raise ValueError("batches must not be empty")
    real = processed = 0
    for b in batches:
        sub = [lengths[i] for i in b]
        rows = pack_greedy(sub, max_len=max_len)
        real += sum(sub)
        processed += len(rows) * max(sum(sub[k] for k in r) for r in rows)
    return real / processed
