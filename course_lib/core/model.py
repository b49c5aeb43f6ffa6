"""The course's Transformer encoder, written out: every line a technique of the course acts on.

Read it top to bottom in the manner of nanoGPT's ``model.py``:

* ``Attention``: one ``nn.Linear`` makes queries, keys and values (``qkv``),
  ``F.scaled_dot_product_attention`` mixes the values with a distance penalty on the scores
  (ALiBi, below; ``attention="naive"`` writes the same maths out and keeps the ``L x L`` score
  matrix), and ``proj`` maps the heads back to the model width.
* ``FeedForward``: ``fc1`` -> GELU -> ``fc2``; lesson 05 removes ``fc1``'s neurons.
* ``Block``: pre-norm (Xiong et al., 2020) residual blocks, ``x + attn(ln(x))`` then
  ``x + ff(ln(x))``: they train stably at a higher learning rate than post-norm.
* ``EncoderClassifier``: token embeddings, the blocks, a final LayerNorm, a mean over the real
  tokens, then a linear head (2 classes, or 1 output for regression).

Every matrix multiply is an ``nn.Linear``, so ``quantize_dynamic`` (lesson 07) quantizes all of
them and ``torch.nn.utils.prune`` (lesson 05) can reach every weight. torch's own
``nn.TransformerEncoder`` and ``nn.MultiheadAttention`` appear only where a lesson shows their
behaviour (lessons 01, 05, 07, 10), labelled as torch's modules.

Positions: ALiBi (Press et al., 2022, "Train Short, Test Long"): head ``h`` subtracts
``slope_h * |i - j|`` from the score of query ``i`` on key ``j``, so every head starts out
looking at its neighbours, the steepest at the next few words, the flattest at the whole review.
The corpus's rules are local ("not good", "i do n't think the price is good"), and ALiBi starts
where they are; nothing pulls a rotary head (RoPE, Su et al., 2021, ``positions="rope"``, also
here) towards the next word at initialisation. Measured with this model (16,000 reviews, 3
epochs, 2-core CPU, one seed): RoPE reached 83.5% test accuracy and 68.7% on negated reviews,
ALiBi 92.8%; learned absolute positions taught no usable word order (the same accuracy with
them zeroed, chance on negated reviews).

The bias is one (1, heads, L, L) tensor shared by the batch; the padding mask is folded into the
keys (``fold_key_padding``) instead of being merged into it, which would make it a (batch, heads,
L, L) float tensor that SDPA keeps for backward (128 MiB for 32 reviews of 512 tokens).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
import torch.nn.utils.prune
from torch import nn



def rotary_tables(length: int, head_dim: int, *, base: float = 10000.0,
                  device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(length, head_dim) cosines and sines: channel pair ``c`` of position ``p`` turns by
    ``p * base ** (-2c / head_dim)`` (RoFormer, eq. 15), in the rotate-half layout."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device)
                        / head_dim)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (..., L, head_dim) by the tables: channel ``c`` pairs with ``c + head_dim/2``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def alibi_bias(length: int, slopes: torch.Tensor) -> torch.Tensor:
    """ALiBi's (1, heads, length, length) score bias ``-slope_h * |i - j|`` (Press et al.,
    2022): one tensor for the whole batch, broadcast over it."""
    i = torch.arange(length, device=slopes.device, dtype=slopes.dtype)
    return (-slopes[:, None, None] * (i[None, :] - i[:, None]).abs())[None]


def alibi_slopes(n_heads: int, steepest: float) -> torch.Tensor:
    """One slope per head: ``steepest``, then 4x smaller for each next head."""
    return steepest * 0.25 ** torch.arange(n_heads, dtype=torch.float32)


ATTENTION_KINDS = ("sdpa", "naive")
POSITION_KINDS = ("alibi", "rope", "none")


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int
    d_model: int = 128      # width; must be divisible by n_heads. 128: the teacher trains in
                            # 3-10 minutes on a 2-core CPU (591 s for the shipped one); at 256
                            # int8 and bf16 pay more (lessons 04 and 07 sweep the width), but
                            # the projections do 4x the matmul work and every lesson slows
    n_heads: int = 4
    head_dim: int | None = None  # None: d_model // n_heads; set when heads are pruned (lesson
                                 # 05 keeps the width of each remaining head)
    n_layers: int = 4       # depth: the corpus needs more than one layer to resolve context
    d_ff: int = 256         # feed-forward width (pruning removes these neurons in lesson 05)
    max_len: int = 512      # longest input accepted; the corpus never exceeds 512 tokens
    dropout: float = 0.0    # on attention weights and residual branches; data is plentiful
    n_outputs: int = 2      # 2 classes, or 1 for regression
    pad_id: int = 0
    attention: str = "sdpa"  # "sdpa": F.scaled_dot_product_attention (fused kernel, no L x L
                             # tensor kept); "naive": the same maths with the scores kept
    positions: str = "alibi"  # "alibi": a distance penalty on the scores (see the module
                              # docstring for why, measured); "rope": rotary embeddings;
                              # "none": no word order at all, a bag of words with attention
    alibi_slope: float = 1.0  # the steepest head's penalty per token of distance; each next
                              # head's is 4x smaller (1, 1/4, 1/16, ...)
    rope_base: float = 10000.0  # RoPE's wavelength base (RoFormer's value)

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len",
                     "n_outputs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        if self.head_size < 2 or self.head_size % 2:
            raise ValueError(f"head_dim must be an even integer >= 2 (RoPE rotates pairs of "
                             f"channels), got {self.head_size}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.positions not in POSITION_KINDS:
            raise ValueError(f"positions must be one of {POSITION_KINDS}, got {self.positions!r}")
        if not self.alibi_slope > 0:
            raise ValueError(f"alibi_slope must be > 0, got {self.alibi_slope}")
        if self.rope_base <= 1.0:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id must be in [0, vocab_size), got {self.pad_id}")

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


# A padded key's score is lowered by this much times SDPA's scale (about 1/6 at head_dim 32):
# far below any real score, so softmax gives it exactly zero weight, and within fp16's range.
PAD_PENALTY = 1e4


def fold_key_padding(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     key_real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exclude padded keys without a (batch, heads, L, L) mask: an extra channel, 1 in every
    query and 0 (real) or ``-PAD_PENALTY`` (padded) in every key, adds ``-PAD_PENALTY * scale``
    to a padded key's score. Zero channels round the width up to a multiple of 8, and values get
    zeros too (fused kernels want equal widths); the caller slices them off the output.
    ``key_real``: (batch, L) bool, True = real token."""
    extra = 8 - q.shape[-1] % 8          # keep the width a multiple of 8 (GPU kernels)
    flag = q.new_zeros(*q.shape[:-1], extra)
    flag[..., 0] = 1.0
    pad = k.new_zeros(*k.shape[:-1], extra)
    pad[..., 0] = (~key_real).to(k.dtype)[:, None, :] * -PAD_PENALTY
    return (torch.cat([q, flag], -1), torch.cat([k, pad], -1),
            torch.cat([v, v.new_zeros(*v.shape[:-1], extra)], -1))


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None,
         bias: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with a boolean ``mask`` and an optional float score
    ``bias`` (ALiBi). SDPA takes one mask: a key-padding mask is folded into the keys so that
    the bias stays one (1, heads, L, L) tensor; any other mask (packing's blocks) is merged
    into the bias, which then is (batch, heads, L, L)."""
    if bias is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    bias = bias.to(q.dtype)
    if mask is not None and mask.shape[-2] == 1:          # (B, 1, 1, L): padding only
        d = q.shape[-1]
        q, k, v = fold_key_padding(q, k, v, mask[:, 0, 0, :])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p,
                                              scale=1.0 / math.sqrt(d))[..., :d]
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, L) True = real token -> the (batch, 1, 1, L) mask SDPA broadcasts over heads
    and queries (True = may attend: every query sees every real key and no padding)."""
    return attention_mask[:, None, None, :]


# --------------------------------------------------------------------------- the block
class Attention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.n_heads, self.kind, self.dropout = cfg.n_heads, cfg.attention, cfg.dropout
        self.alibi = cfg.positions == "alibi"
        # Each head's ALiBi slope, saved with the weights: a head keeps its slope when lesson
        # 05 prunes the heads around it.
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads, cfg.alibi_slope))
        inner = cfg.n_heads * cfg.head_size                 # d_model unless heads were pruned
        self.qkv = nn.Linear(cfg.d_model, 3 * inner)        # queries, keys, values at once
        self.proj = nn.Linear(inner, cfg.d_model)           # heads back to the model width

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, *,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        B, L, _ = x.shape
        # (B, L, 3 * heads * head_dim) -> three (B, heads, L, head_dim); chunking by the
        # output's size rather than d_model lets head pruning drop a head's rows.
        q, k, v = (t.view(B, L, self.n_heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        alibi = alibi_bias(L, self.slopes) if self.alibi else None
        p = self.dropout if self.training else 0.0
        if self.kind == "sdpa":
            y = sdpa(q, k, v, mask=mask, bias=alibi, dropout_p=p)
        else:  # the same maths, with the (B, heads, L, L) probabilities kept for backward
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if alibi is not None:
                scores = scores + alibi.to(scores.dtype)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            y = F.dropout(scores.softmax(dim=-1), p) @ v
        return self.proj(y.transpose(1, 2).reshape(B, L, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), Attention(cfg)
        self.ln2, self.ff = nn.LayerNorm(cfg.d_model), FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, mask, **positions):
        x = x + self.drop(self.attn(self.ln1(x), mask, **positions))
        return x + self.drop(self.ff(self.ln2(x)))


# --------------------------------------------------------------------------- the model
class EncoderClassifier(nn.Module):
    """``embed`` -> ``encode`` -> ``pool`` -> ``head``; the pieces are public so that packing
    (lesson 02) and distillation's hidden states (lesson 06) can call them."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_outputs)
        # BERT/GPT-2 initialise embeddings with std 0.02. torch's default N(0, 1) makes them so
        # large that Adam's ~lr-sized steps barely move them: training stalls near chance.
        nn.init.normal_(self.tok.weight, std=0.02)
        with torch.no_grad():
            self.tok.weight[cfg.pad_id].zero_()
        # Not parameters and not saved in the state dict: recomputed from the config. Only a
        # rotary model holds them: a buffer it never reads would still cost memory, and DDP
        # broadcasts every buffer before each forward pass (lesson 09 intercepts it).
        if cfg.positions == "rope":
            cos, sin = rotary_tables(cfg.max_len, cfg.head_size, base=cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, length), got {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds max_len "
                             f"{self.cfg.max_len}")
        return self.tok(input_ids)

    def encode(self, x: torch.Tensor, *, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask``: bool, True = may attend, broadcastable to (batch, heads, L, L): a
        ``padding_mask`` (batch, 1, 1, L), or packing's block mask (rows, 1, L, L)."""
        if mask is not None and mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool (True = may attend), got {mask.dtype}")
        for block in self.blocks:
            x = block(x, mask, **self.positions(x.shape[1]))
        return self.ln_f(x)

    def positions(self, length: int) -> dict:
        """What each attention needs to know about word order, for sequences of ``length``."""
        if self.cfg.positions == "rope":
            return {"rope": (self.rope_cos[:length], self.rope_sin[:length])}
        return {}   # ALiBi lives in each Attention (its slopes); "none" needs nothing

    @staticmethod
    def pool(h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Mean over real tokens only (``attention_mask`` True = real)."""
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp_min(1.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        if attention_mask is None:
            attention_mask = input_ids != self.cfg.pad_id
        h = self.encode(self.embed(input_ids), mask=padding_mask(attention_mask))
        out = self.head(self.pool(h, attention_mask))
        return out.squeeze(-1) if self.cfg.n_outputs == 1 else out


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


# The course's two standard sizes: the teacher (4 layers) and the student (1 narrow layer).
PRESETS = {"teacher": dict(d_model=128, n_heads=4, n_layers=4, d_ff=256),
           "student": dict(d_model=64, n_heads=2, n_layers=1, d_ff=128)}


def build_model(vocab_size: int, *, preset: str = "teacher", seed: int | None = None,
                **overrides) -> EncoderClassifier:
    """A fresh model of a preset size; ``seed`` makes its initial weights reproducible
    without touching the global random state."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    cfg = EncoderConfig(vocab_size=vocab_size, **{**PRESETS[preset], **overrides})
    if seed is None:
        return EncoderClassifier(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return EncoderClassifier(cfg)

def no_masks(model: nn.Module) -> None:
    """Refuse a model that still has ``torch.nn.utils.prune`` masks attached (lesson 05)."""
    if any(isinstance(h, torch.nn.utils.prune.BasePruningMethod)
           for m in model.modules() for h in m._forward_pre_hooks.values()):
        raise ValueError("model has pruning masks attached: call make_permanent(model) first")


def rebuilt(model: EncoderClassifier, state: dict, **changes) -> EncoderClassifier:
    """A new model of ``replace(model.cfg, **changes)`` holding ``state``, on ``model``'s
    device and dtype, in its train/eval mode."""
    ref = next(model.parameters())
    small = EncoderClassifier(replace(model.cfg, **changes)).to(ref.device, ref.dtype)
    small.load_state_dict(state)
    return small.train(model.training)


def keep_layers(model: EncoderClassifier, layers: list[int]) -> EncoderClassifier:
    """A new, shallower model made of the given blocks of ``model`` (in the order given), with
    its embeddings, final norm and head: layer dropping, and a student initialised from a
    teacher's layers (DistilBERT keeps every other one)."""
    no_masks(model)
    n = model.cfg.n_layers
    if not layers or any(not isinstance(i, int) or not 0 <= i < n for i in layers):
        raise ValueError(f"layers must be a non-empty list of indices in [0, {n - 1}], "
                         f"got {layers!r}")
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("blocks."):
            _, i, rest = key.split(".", 2)
            for new, old in enumerate(layers):
                if int(i) == old:
                    state[f"blocks.{new}.{rest}"] = value.detach().clone()
        else:
            state[key] = value.detach().clone()
    return rebuilt(model, state, n_layers=len(layers))
