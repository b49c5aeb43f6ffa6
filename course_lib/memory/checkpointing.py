"""Activation checkpointing on the course's encoder: keep less, recompute during backward.

``torch.utils.checkpoint.checkpoint(fn, *inputs, use_reentrant=False)`` runs ``fn`` without
keeping what it would save for backward, keeps only its inputs, and runs ``fn`` again when
backward reaches it (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost").
``Checkpointed`` wraps an ``EncoderClassifier`` with one of four policies:

- ``"none"``: the model as it is;
- ``"every"``: each block is one checkpointed segment (keeps n block inputs, recomputes every
  block: about one extra forward pass);
- ``"every_other"``: blocks 0, 2, 4, ... checkpointed, the others kept;
- ``"attention"``: the attention half of each block (LayerNorm 1, the q/k/v and output
  projections, the attention core) is recomputed, the feed-forward half kept. Korthikanti et
  al.'s (2022) *selective* recomputation re-runs only the core, whose softmax and dropout
  tensors are L² in size; a fused SDPA never stores those (it keeps a log-sum-exp), so on this
  model there is nothing quadratic for it to drop, and recomputing the half costs most of a
  block's forward work (the projections).

The gradients are the same as without checkpointing (the same operations run again on the same
inputs; ``tests/test_memory_anatomy.py`` checks it).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from course_lib.core.model import EncoderClassifier, padding_mask
from course_lib.memory.anatomy import CHECKPOINTING

__all__ = ["Checkpointed"]


class Checkpointed(nn.Module):
    """``model``'s forward pass with activation checkpointing by ``policy`` (``CHECKPOINTING``).
    The wrapped model's parameters are this module's: an optimizer built on either trains both."""

    def __init__(self, model: EncoderClassifier, policy: str = "every"):
        super().__init__()
        if policy not in CHECKPOINTING:
            raise ValueError(f"policy must be one of {CHECKPOINTING}, got {policy!r}")
        self.model, self.policy = model, policy

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        m = self.model
        if attention_mask is None:
            attention_mask = input_ids != m.cfg.pad_id
        mask, x = padding_mask(attention_mask), m.embed(input_ids)
        pos = m.positions(x.shape[1])
        for i, block in enumerate(m.blocks):
            if self.policy == "every" or (self.policy == "every_other" and i % 2 == 0):
                x = checkpoint(block, x, mask, use_reentrant=False, **pos)
            elif self.policy == "attention":
                half = lambda y, b=block: b.drop(b.attn(b.ln1(y), mask, **pos))  # noqa: E731
                x = x + checkpoint(half, x, use_reentrant=False)
                x = x + block.drop(block.ff(block.ln2(x)))
            else:
                x = block(x, mask, **pos)
        out = m.head(m.pool(m.ln_f(x), attention_mask))
        return out.squeeze(-1) if m.cfg.n_outputs == 1 else out
