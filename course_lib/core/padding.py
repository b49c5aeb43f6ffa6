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


def fixed_length(seqs: Sequence[torch.Tensor], *, max_length: int, pad_id: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pad or truncate every sequence to exactly ``max_length`` (the "pad to 512" recipe).

    Returns ``(ids, mask, n_truncated_tokens)`` like :func:`pad_batch`; the count of cut tokens
    is returned, never dropped silently.
    """
    return pad_batch(seqs, pad_id=pad_id, max_length=max_length)


def lengths_to_mask(lengths: Sequence[int] | torch.Tensor, *, width: int | None = None
                    ) -> torch.Tensor:
    """(B, width) bool mask, True on the first ``lengths[i]`` positions of row i (real tokens)."""
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if lengths.numel() == 0:
        raise ValueError("lengths must not be empty")
    if int(lengths.min()) < 1:
        raise ValueError(f"lengths must all be >= 1, got min {int(lengths.min())}")
    width = int(lengths.max()) if width is None else width
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    return torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)


def key_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """PyTorch's ``src_key_padding_mask`` (True = padding, ignore) from ours (True = real)."""
    if attention_mask.dtype != torch.bool:
        raise ValueError(f"attention_mask must be bool, got {attention_mask.dtype}")
    return ~attention_mask


def padded_tokens(lengths: Sequence[int], *, max_length: int | None = None,
                  pad_to_multiple_of: int | None = None) -> tuple[int, int]:
    """``(real, processed)`` token counts of one batch with these lengths, without building it.

    ``real`` counts tokens kept after truncation to ``max_length``; ``processed`` is
    batch size x padded width, the work the model does.
    """
    lengths = [int(n) for n in lengths]
    if not lengths:
        raise ValueError("lengths must not be empty")
    if min(lengths) < 1:
        raise ValueError(f"lengths must all be >= 1, got min {min(lengths)}")
    width = max_length if max_length is not None else max(lengths)
    if pad_to_multiple_of is not None:
        if pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    real = sum(min(n, width) for n in lengths)
    return real, len(lengths) * width


def batches_efficiency(lengths: Sequence[int], batches: Sequence[Sequence[int]], *,
                       max_length: int | None = None,
                       pad_to_multiple_of: int | None = None) -> float:
    """Token efficiency (real / processed tokens) of a whole epoch of index batches."""
    if not batches:
        raise ValueError("batches must not be empty")
    real = processed = 0
    for b in batches:
        r, p = padded_tokens([lengths[i] for i in b], max_length=max_length,
                             pad_to_multiple_of=pad_to_multiple_of)
        real, processed = real + r, processed + p
    return real / processed
