"""torch's own ``nn.TransformerEncoder`` as a classifier: where a lesson shows torch's modules.

The course model (``models.EncoderClassifier``) is written out so that every technique acts on
code the learner can read. torch's encoder is still what many tutorials and article 004 use,
and some behaviours belong to it alone, so the lessons show them on this class, labelled as
torch's:

* lesson 01: its inference fast path turns a padded batch into a nested tensor and skips the
  padding (post-norm layers, eval mode, no gradients, a key-padding mask);
* lesson 05: ``nn.MultiheadAttention`` reads ``out_proj.weight`` without calling ``out_proj``,
  so a pruning hook on it goes stale;
* lesson 07: ``quantize_dynamic`` maps ``nn.Linear`` only, so ``in_proj_weight`` (a bare
  parameter) and ``out_proj`` (``NonDynamicallyQuantizableLinear``) stay FP32.

No positions: these demos measure time, sizes and errors, never accuracy.
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.core.padding import key_padding_mask

__all__ = ["TorchEncoderClassifier"]


class TorchEncoderClassifier(nn.Module):
    """Embedding -> ``nn.TransformerEncoder`` (post-norm, ReLU) -> mean over real tokens ->
    linear head, with the course model's call signature ``(input_ids, attention_mask)``."""

    def __init__(self, vocab_size: int, *, d_model: int = 128, n_heads: int = 4,
                 n_layers: int = 4, d_ff: int = 256, nested_tensor: bool = True,
                 n_outputs: int = 2, pad_id: int = 0):
        super().__init__()
        self.pad_id = pad_id
        self.tok = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=nested_tensor)
        self.head = nn.Linear(d_model, n_outputs)

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = input_ids != self.pad_id
        # torch's convention is the opposite of SDPA's: True = padding, to be ignored.
        h = self.encoder(self.tok(input_ids),
                         src_key_padding_mask=key_padding_mask(attention_mask))
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        # On the nested-tensor path the padded positions come back as zeros: the same mean.
        return self.head((h * m).sum(1) / m.sum(1).clamp_min(1.0))
