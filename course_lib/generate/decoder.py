"""A decoder-only Transformer of the course's own, written to be read like ``core/model.py``:
the same pre-norm block and feed-forward, ALiBi for word order, and causal attention.

* ``DecoderConfig``: the shape. ``n_kv_heads`` below ``n_heads`` shares each key/value head
  among ``n_heads / n_kv_heads`` query heads: multi-query attention at 1 (Shazeer, 2019),
  grouped-query attention between (Ainslie et al., 2023). It shrinks what the cache keeps.
* ``KVCache``: every layer's keys and values of the tokens seen so far, preallocated up to
  ``max_len``: generating the next token then computes one position per layer instead of
  the whole prefix again. Its bytes per token are ``2 × layers × kv_heads × head_dim ×
  bytes per number`` (``bytes_per_token``), the figure that decides how long a context fits.
* ``CausalSelfAttention``: queries for the new positions, keys and values appended to the
  cache, ALiBi's distance penalty on the scores, and nothing after the query's own position.
* ``DecoderLM``: token embeddings, the blocks, a final LayerNorm, and a linear head giving the
  next token's logits at every position.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.core.model import FeedForward, alibi_slopes


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int
    d_model: int = 128       # the course encoder's width: the same block, read the same way
    n_heads: int = 4
    n_kv_heads: int | None = None   # None: one key/value head per query head (multi-head)
    n_layers: int = 4
    d_ff: int = 256
    max_len: int = 512       # longest context: the cache is allocated for it
    alibi_slope: float = 1.0  # the steepest head's penalty per token of distance, as the encoder

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        if not 1 <= self.kv_heads <= self.n_heads or self.n_heads % self.kv_heads:
            raise ValueError(f"n_kv_heads must divide n_heads ({self.n_heads}) and be >= 1, got "
                             f"{self.n_kv_heads!r}")
        if not self.alibi_slope > 0:
            raise ValueError(f"alibi_slope must be > 0, got {self.alibi_slope}")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_size(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Keys and values of every layer, ``(layers, batch, kv_heads, max_len, head_dim)`` each,
    filled from position 0; ``length`` tokens are in it. ``append`` writes one layer's new
    keys and values after them and returns the layer's keys and values so far; ``advance``
    moves ``length`` on once every layer has appended (``DecoderLM.forward`` does both)."""

    def __init__(self, cfg: DecoderConfig, *, batch: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", max_len: int | None = None):
        cfg.validate()
        max_len = cfg.max_len if max_len is None else max_len
        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        if not isinstance(max_len, int) or not 1 <= max_len <= cfg.max_len:
            raise ValueError(f"max_len must be in [1, {cfg.max_len}], got {max_len!r}")
        shape = (cfg.n_layers, batch, cfg.kv_heads, max_len, cfg.head_size)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    @property
    def bytes_per_token(self) -> int:
        """``2 × layers × kv_heads × head_dim × bytes per number``, for one sequence."""
        layers, _, heads, _, dim = self.k.shape
        return 2 * layers * heads * dim * self.k.element_size()

    @property
    def nbytes(self) -> int:
        """Bytes allocated (every layer, every sequence, ``max_len`` positions)."""
        return self.k.nbytes + self.v.nbytes

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        n = k.shape[2]
        if self.length + n > self.max_len:
            raise ValueError(f"the cache holds max_len={self.max_len} positions: {self.length} "
                             f"are in it and {n} more do not fit")
        self.k[layer, :, :, self.length:self.length + n] = k
        self.v[layer, :, :, self.length:self.length + n] = v
        return self.k[layer, :, :, :self.length + n], self.v[layer, :, :, :self.length + n]

    def advance(self, n: int) -> None:
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (speculative decoding drops the keys and
        values of draft tokens the target rejected); later appends overwrite them."""
        if not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length must be in [0, {self.length}], got {length!r}")
        self.length = length


def causal_alibi(queries: int, keys: int, slopes: torch.Tensor) -> torch.Tensor:
    """(1, heads, queries, keys) additive mask for the last ``queries`` of ``keys`` positions:
    ``-slope_h × (i − j)`` on key ``j <= i``, ``-inf`` after the query (it may not look ahead)."""
    i = torch.arange(keys - queries, keys, device=slopes.device)[:, None]
    j = torch.arange(keys, device=slopes.device)[None, :]
    distance = (i - j).to(slopes.dtype)
    bias = -slopes[:, None, None] * distance
    return bias.masked_fill(j > i, float("-inf"))[None]


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.n_heads, self.kv_heads, self.head_size = cfg.n_heads, cfg.kv_heads, cfg.head_size
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads, cfg.alibi_slope))
        self.q = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_size)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.kv_heads * cfg.head_size)   # fewer with GQA
        self.proj = nn.Linear(cfg.n_heads * cfg.head_size, cfg.d_model)

    def forward(self, x: torch.Tensor, *, cache: KVCache | None = None,
                layer: int = 0) -> torch.Tensor:
        B, L, _ = x.shape
        q = self.q(x).view(B, L, self.n_heads, -1).transpose(1, 2)
        k, v = (t.view(B, L, self.kv_heads, -1).transpose(1, 2)
                for t in self.kv(x).chunk(2, dim=-1))
        if cache is not None:                      # the keys and values of every earlier token
            k, v = cache.append(layer, k, v)
        # With fewer key/value heads, each serves n_heads / kv_heads query heads in turn:
        # ``enable_gqa`` lets SDPA share them, where ``k.repeat_interleave(group, dim=1)`` would
        # copy every layer's whole cache to the full head count at every step.
        bias = causal_alibi(L, k.shape[2], self.slopes).to(q.dtype)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                           enable_gqa=self.kv_heads < self.n_heads)
        return self.proj(y.transpose(1, 2).reshape(B, L, -1))


class DecoderBlock(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), CausalSelfAttention(cfg)
        self.ln2, self.ff = nn.LayerNorm(cfg.d_model), FeedForward(cfg)

    def forward(self, x, *, cache=None, layer=0):
        x = x + self.attn(self.ln1(x), cache=cache, layer=layer)
        return x + self.ff(self.ln2(x))


class DecoderLM(nn.Module):
    """Next-token logits at every position: ``forward(ids)`` reads the whole sequence;
    ``forward(ids, cache=c)`` reads only the new tokens, after the ``c.length`` in the cache."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor, *, cache: KVCache | None = None) -> torch.Tensor:
        start = 0 if cache is None else cache.length
        if start + ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"max_len is {self.cfg.max_len} tokens; got {start} in the cache and "
                             f"{ids.shape[1]} new")
        x = self.tok(ids)
        for n, block in enumerate(self.blocks):
            x = block(x, cache=cache, layer=n)
        if cache is not None:
            cache.advance(ids.shape[1])
        return self.head(self.ln_f(x))
