"""Gradient accumulation: a large batch's update from small micro-batches, and its one trap.

Summing the gradients of ``k`` micro-batches, each loss divided by ``k``, gives the gradient of
the whole batch's mean loss (``core.train.train_step`` does it when handed a list of micro-
batches), while only one micro-batch's activations are alive at a time. That holds when the
loss is a mean over *sequences* and the micro-batches hold equally many. A loss averaged over
*tokens* is different: each micro-batch's token mean weighs its tokens by 1 / (its token
count), so micro-batches of short sequences count more than they should; the fix is to sum the
token losses and divide by the whole batch's token count (what Hugging Face's trainers do
since their 2024 gradient-accumulation fix).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["NORMALISATIONS", "split", "gradients", "relative_difference"]

NORMALISATIONS = ("sequence", "token_per_micro", "token_global")


def split(batch: dict, micro: int) -> list[dict]:
    """``batch`` cut into ``micro`` micro-batches of equal size along the batch dimension."""
    n = batch["input_ids"].shape[0]
    if micro < 1 or n % micro:
        raise ValueError(f"micro must divide the batch size {n}, got {micro}")
    size = n // micro
    return [{k: v[i * size:(i + 1) * size] for k, v in batch.items()} for i in range(micro)]


def _token_losses(model: nn.Module, b: dict) -> torch.Tensor:
    """Per-token losses of a toy token task: every real token gets the sequence's label (so a
    token-level mean and a sequence-level mean differ only in how they weigh lengths)."""
    logits = model(b["input_ids"], b["attention_mask"])                       # (B, classes)
    per_seq = F.cross_entropy(logits, b["labels"], reduction="none")          # (B,)
    tokens = b["attention_mask"].sum(1).to(per_seq.dtype)
    return per_seq, tokens


def gradients(model: nn.Module, batch: dict, *, micro: int = 1,
              normalisation: str = "sequence") -> list[torch.Tensor]:
    """The gradients of ``model``'s parameters on ``batch`` from ``micro`` micro-batches,
    accumulated the way ``normalisation`` says: ``"sequence"`` (mean over sequences / micro),
    ``"token_per_micro"`` (each micro-batch's token-weighted mean / micro: the trap) or
    ``"token_global"`` (token-weighted sum / the whole batch's tokens: the fix). With
    ``micro=1`` the token normalisations agree: the reference."""
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    total_tokens = batch["attention_mask"].sum().to(torch.float32)
    out = [torch.zeros_like(p) for p in params]
    for b in split(batch, micro):
        per_seq, tokens = _token_losses(model, b)
        if normalisation == "sequence":
            loss = per_seq.mean() / micro
        elif normalisation == "token_per_micro":
            loss = (per_seq * tokens).sum() / tokens.sum() / micro
        else:
            loss = (per_seq * tokens).sum() / total_tokens
        for acc, g in zip(out, torch.autograd.grad(loss, params)):
            acc += g
    return out


def relative_difference(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """‖a − b‖ / ‖b‖ over all the tensors together."""
    num = sum(float((x - y).pow(2).sum()) for x, y in zip(a, b)) ** 0.5
    den = sum(float(y.pow(2).sum()) for y in b) ** 0.5
    return num / den if den else num
