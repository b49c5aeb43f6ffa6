"""A Transformer encoder for sequence classification or regression, built from torch.nn.

Follows the encoder of Vaswani et al. (2017) as implemented by ``nn.TransformerEncoder``:
token + learned position embeddings, pre-norm layers by default (``norm_first=True``: they train
stably at a higher learning rate), mean pooling over real tokens only, then a linear head.

One addition to the 2017 encoder: a distance penalty on the attention scores, ALiBi (Press et
al., 2022, "Train Short, Test Long"). Head ``h`` subtracts ``slope_h * |i - j|`` from the score
of query ``i`` on key ``j``, so every head starts out looking at its neighbours, the steepest
head at the next few words, the flattest at the whole review. Why: the corpus's rules are local
("not good", "i do n't think the price is good"), and with learned absolute positions alone the
teacher learned no usable word order within its training budget (in the probes behind this
choice, on a 2-core CPU: the same accuracy with its position embeddings zeroed, and chance on
negated reviews; ``python -m course_lib.headroom`` shows the per-rule accuracy now). The penalty is a float attention mask,
so ``position_bias="none"`` gives back the plain encoder (lesson 01's nested-tensor path needs
it).
PyTorch's nested-tensor inference path (it skips padding) needs post-norm layers, so the course's
own models never take it; lesson 01 builds post-norm copies to show it. The pieces
(``embed``, ``encode``, ``pool``) are public so that packing (lesson 02) and attention
(lesson 09) can call them with their own positions and masks.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int
    d_model: int = 128      # width; must be divisible by n_heads
    n_heads: int = 4
    n_layers: int = 4       # depth: the corpus needs more than one layer to resolve context
    d_ff: int = 256         # feed-forward width (pruning removes these neurons in lesson 05)
    max_len: int = 512      # learned positions; the corpus never exceeds 512 tokens
    dropout: float = 0.0   # bernoulli sampling is a quarter of a CPU step; data is plentiful
    attn_dropout: float = 0.0  # dropout on attention weights forces SDPA's slow math path
    n_outputs: int = 2      # 2 classes, or 1 for regression
    pad_id: int = 0
    norm_first: bool = True    # pre-norm trains stably at a higher learning rate; post-norm
                               # (the original) keeps PyTorch's nested-tensor path (lesson 01)
    nested_tensor: bool = True  # PyTorch's inference fast path skips padding (lesson 01)
    position_bias: str = "alibi"  # "alibi": distance penalty on attention scores (see above);
                                  # "none": learned absolute positions only
    alibi_slope: float = 1.0   # the steepest head's penalty per token of distance; each next
                               # head's is 4x smaller (1, 1/4, 1/16, ...)

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len",
                     "n_outputs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.position_bias not in ("alibi", "none"):
            raise ValueError(f"position_bias must be 'alibi' or 'none', got {self.position_bias!r}")
        if self.alibi_slope <= 0:
            raise ValueError(f"alibi_slope must be > 0, got {self.alibi_slope}")

    def to_dict(self) -> dict:
        return asdict(self)


def _keep_off_fused_path(module: nn.Module, args: tuple) -> None:
    """A forward pre-hook that changes nothing. ``TransformerEncoderLayer`` skips torch's fused
    inference path when a hook is attached, and that path returned NaN with a float attention
    mask (torch 2.13, CPU) where the layer's own code is exact. A hook on the layer rather than
    the global switch (``torch.backends.mha``): nothing global changes inside ``forward``, so
    threads and ``torch.compile`` see a plain module."""
    return None


def alibi_bias(length: int, slopes: torch.Tensor) -> torch.Tensor:
    """The (heads, length, length) additive score bias ``-slope_h * |i - j|``."""
    i = torch.arange(length, device=slopes.device, dtype=slopes.dtype)
    return -slopes[:, None, None] * (i[None, :] - i[:, None]).abs()[None]


def sinusoidal_positions(n_positions: int, dim: int) -> torch.Tensor:
    """The (n_positions, dim) sine/cosine table of Vaswani et al. (2017), section 3.5."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


class EncoderClassifier(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout,
                                           batch_first=True, norm_first=cfg.norm_first)
        layer.self_attn.dropout = cfg.attn_dropout
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers,
                                             enable_nested_tensor=cfg.nested_tensor and not cfg.norm_first)
        self.head = nn.Linear(cfg.d_model, cfg.n_outputs)
        if cfg.position_bias == "alibi":
            for block in self.encoder.layers:
                block.register_forward_pre_hook(_keep_off_fused_path)
        # BERT/GPT-2 initialise embeddings with std 0.02. torch's default N(0, 1) makes them
        # so large that Adam's ~lr-sized steps barely move them: training stalls near chance.
        nn.init.normal_(self.tok.weight, std=0.02)
        with torch.no_grad():
            self.tok.weight[cfg.pad_id].zero_()
            # Learned positions, initialised from the sinusoidal table of Vaswani et al.: the
            # rules of the corpus are relative ("the word before"), and a sinusoidal start
            # makes relative offsets easy to learn; random starts leave rare long positions
            # untrained.
            self.pos.weight.copy_(0.05 * sinusoidal_positions(cfg.max_len, cfg.d_model))

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None):
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, length), got {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_len "
                             f"{self.cfg.max_len}")
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.drop(self.tok(input_ids) + self.pos(position_ids))

    def alibi_slopes(self, device=None) -> torch.Tensor:
        """One slope per head: ``alibi_slope``, then 4x smaller for each next head."""
        h = torch.arange(self.cfg.n_heads, device=device, dtype=torch.float32)
        return self.cfg.alibi_slope * 0.25 ** h

    def encode(self, x: torch.Tensor, *, key_padding_mask: torch.Tensor | None = None,
               attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``key_padding_mask``: True where a position is padding (PyTorch's convention);
        ``attn_mask``: bool, True = blocked, (L, L) or (batch * heads, L, L)."""
        if self.cfg.position_bias == "none":
            return self.encoder(x, mask=attn_mask, src_key_padding_mask=key_padding_mask)
        B, L, H = x.shape[0], x.shape[1], self.cfg.n_heads
        bias = alibi_bias(L, self.alibi_slopes(x.device)).expand(B, H, L, L)
        if key_padding_mask is not None:
            bias = bias.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype != torch.bool:
                raise ValueError(f"attn_mask must be bool (True = blocked), got {attn_mask.dtype}")
            bias = bias.masked_fill(attn_mask.view(B, H, L, L) if attn_mask.dim() == 3
                                    else attn_mask, float("-inf"))
        # The float mask goes in the input's dtype: under autocast MHA would otherwise mix
        # a float32 mask with 16-bit scores. (The layers stay off torch's fused inference path:
        # see _keep_off_fused_path.)
        return self.encoder(x, mask=bias.reshape(B * H, L, L).to(x.dtype))

    @staticmethod
    def pool(h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean over real tokens only (``attention_mask`` True = real)."""
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp_min(1.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        if attention_mask is None:
            attention_mask = input_ids != self.cfg.pad_id
        h = self.encode(self.embed(input_ids), key_padding_mask=~attention_mask)
        out = self.head(self.pool(h, attention_mask))
        return out.squeeze(-1) if self.cfg.n_outputs == 1 else out


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def build_model(vocab_size: int, *, preset: str = "teacher", **overrides) -> EncoderClassifier:
    """The course's two standard sizes: ``teacher`` (4 layers) and ``student`` (1 narrow layer)."""
    presets = {"teacher": dict(d_model=128, n_heads=4, n_layers=4, d_ff=256),
               "student": dict(d_model=64, n_heads=2, n_layers=1, d_ff=128)}
    if preset not in presets:
        raise ValueError(f"preset must be one of {sorted(presets)}, got {preset!r}")
    return EncoderClassifier(EncoderConfig(vocab_size=vocab_size,
                                           **{**presets[preset], **overrides}))


@contextlib.contextmanager
def mha_fastpath(enabled: bool) -> Iterator[None]:
    """Set ``torch.backends.mha`` fast path for a block, restoring the previous value.

    Why: ``TransformerEncoderLayer``'s inference fast path gathers ``linear1.weight`` etc. and
    reads ``.device`` on each; after ``quantize_dynamic`` those are ``weight()`` *methods*, so
    eval mode crashes with ``AttributeError: 'function' object has no attribute 'device'``
    (torch 2.13). The flag is global, hence the scoped switch.
    """
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(bool(enabled))
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)
