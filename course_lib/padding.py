"""Padding a batch of token sequences, and the DataLoader collate the course uses.

Dynamic padding (pad to the longest sequence in the batch) is the default; fixed-length
padding pads or truncates to ``max_length`` and reports what it cut. Lesson 01 builds on
this module.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def pad_batch(seqs: Sequence[torch.Tensor], *, pad_id: int = 0, max_length: int | None = None,
              pad_to_multiple_of: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Stack 1-D id tensors into (B, L) ids and a bool mask (True = real token).

    ``max_length`` fixes L (pad or truncate); otherwise L is the longest sequence, rounded up
    to ``pad_to_multiple_of``. Returns ``(ids, mask, n_truncated_tokens)``: nothing is cut
    silently.
    """
    if len(seqs) == 0:
        raise ValueError("seqs must hold at least one sequence")
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
        raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
    lengths = [len(s) for s in seqs]
    if min(lengths) < 1:
        raise ValueError("every sequence must hold at least one token")
    width = max_length if max_length is not None else max(lengths)
    if pad_to_multiple_of:
        width = int(math.ceil(width / pad_to_multiple_of) * pad_to_multiple_of)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    cut = 0
    for i, s in enumerate(seqs):
        n = min(len(s), width)
        cut += len(s) - n
        ids[i, :n] = torch.as_tensor(s[:n], dtype=torch.long)
        mask[i, :n] = True
    return ids, mask, cut


class Collate:
    """DataLoader ``collate_fn``: dataset dicts -> a batch dict of tensors.

    The batch holds ``input_ids`` (B, L), ``attention_mask`` (B, L, True = real token),
    ``labels``, ``ratings``, ``lengths`` (before any truncation), ``index`` (dataset indices)
    and ``n_truncated`` (tokens cut by ``max_length``).
    """

    def __init__(self, *, pad_id: int = 0, max_length: int | None = None,
                 pad_to_multiple_of: int | None = None):
        self.pad_id, self.max_length, self.multiple = pad_id, max_length, pad_to_multiple_of

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        ids, mask, cut = pad_batch([it["input_ids"] for it in items], pad_id=self.pad_id,
                                   max_length=self.max_length,
                                   pad_to_multiple_of=self.multiple)
        return {"input_ids": ids, "attention_mask": mask,
                "labels": torch.tensor([it["label"] for it in items], dtype=torch.long),
                "ratings": torch.tensor([it["rating"] for it in items], dtype=torch.float32),
                "lengths": torch.tensor([it["length"] for it in items], dtype=torch.long),
                "index": torch.tensor([it.get("index", -1) for it in items], dtype=torch.long),
                "n_truncated": torch.tensor(cut)}


def token_efficiency(mask: torch.Tensor) -> float:
    """Real tokens / processed tokens of a padded batch (1.0 = no padding)."""
    if mask.numel() == 0:
        raise ValueError("mask must not be empty")
    return float(mask.sum()) / mask.numel()
