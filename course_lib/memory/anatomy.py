"""Where a training step's memory goes, on paper: weights, gradients, optimizer state, activations.

``plan(setup)`` counts, for the course's encoder (``core.model``), the bytes a training step holds:

- **weights** and **gradients**: one value per parameter each (4 bytes in FP32; 2 in 16-bit
  mixed precision, whose FP32 master copy of the weights counts as optimizer state, as in the
  ZeRO paper's accounting);
- **optimizer state**: 0 values per parameter for SGD, 1 for SGD with momentum, 2 for Adam and
  AdamW (the two moments), and for Adafactor (Shazeer and Stern, 2018) one row and one column
  factor per matrix instead of a full second moment;
- **activations**: what the forward pass saves for backward, per block and per token, counted
  from the block's own autograd graph (``measure.memory.saved_activation_bytes`` lists the same
  tensors; a test checks the formula against it):

  ======================================  =========================================
  block input, LayerNorm 1's output       2 d   (values per token)
  attention: q, k, v and the output       4 h e'  (e' = head width + the padding flag,
                                                    rounded up to a multiple of 8)
  attention: log-sum-exp per head         h
  attention: projection's input           d
  residual after attention, LN 2 output   2 d
  feed-forward: fc1's output, GELU's      2 f
  LayerNorm statistics (mean, 1/std) × 2  4
  ALiBi's bias (shared by the batch)      h L²  per block, not per token
  ======================================  =========================================

  plus, outside the blocks, about 4 d + 28 bytes per token (the embedding's output, the last
  LayerNorm, the pooling) - small against n blocks.
- **checkpointing** (``torch.utils.checkpoint``) keeps only a checkpointed segment's input and
  recomputes the rest during backward, so the activations become what the segments keep plus
  one segment's full activations (recomputed, alive while its backward runs); ``"attention"``
  recomputes the attention half of each block (``memory.checkpointing`` says why that is not
  Korthikanti et al.'s selective recomputation here).
- **shards**: ZeRO (Rajbhandari et al., 2020) stage 1 splits the optimizer state over the
  ranks, stage 2 the gradients too, stage 3 (FSDP) the weights as well; activations are not
  sharded (each rank runs its own micro-batch).

The peak of a steady-state step (the optimizer state exists from the first step on) is
``weights + optimizer state + step``, where ``step`` follows backward block by block: it frees
each block's activations as it writes that block's gradients, and a checkpointed block first
recomputes its own. Activations + gradients would overcount wherever both are large.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from course_lib.core.optimizers import OPTIMIZERS, state_values

__all__ = ["OPTIMIZERS", "CHECKPOINTING", "PRECISIONS", "Setup", "Plan", "plan",
           "parameter_shapes", "block_activation_values", "block_bytes", "activation_bytes",
           "root_bytes", "attention_work_share", "attention_core_share", "accumulated_step"]

CHECKPOINTING = ("none", "every", "every_other", "attention")
PRECISIONS = ("fp32", "mixed")


@dataclass(frozen=True)
class Setup:
    """A training step of the course's encoder: its shape, its batch, and how it is trained."""
    vocab_size: int = 2048
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 256
    n_outputs: int = 2
    batch: int = 16
    length: int = 256
    precision: str = "fp32"        # "mixed": 16-bit weights and gradients, FP32 master copy
    optimizer: str = "adamw"
    checkpoint: str = "none"       # which activations are recomputed instead of kept
    shards: int = 1                # ranks sharing the model (ZeRO / FSDP)
    zero: int = 0                  # ZeRO stage: 1 optimizer state, 2 + gradients, 3 + weights

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_outputs",
                     "batch", "length", "shards"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_heads "
                             f"({self.n_heads})")
        for name, allowed in (("precision", PRECISIONS), ("optimizer", OPTIMIZERS),
                              ("checkpoint", CHECKPOINTING)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero must be 0, 1, 2 or 3, got {self.zero}")
        if self.zero and self.shards < 2:
            raise ValueError(f"zero={self.zero} needs shards >= 2, got {self.shards}")


@dataclass(frozen=True)
class Plan:
    """Bytes per rank of one steady-state training step (``plan``)."""
    weights: int
    gradients: int
    optimizer: int
    activations: int      # the most saved activations alive at once
    step: int             # the most activations + gradients alive at once during backward
    parameters: int

    @property
    def peak(self) -> int:
        """Weights and optimizer state live across steps; the step adds the rest."""
        return self.weights + self.optimizer + self.step

    def as_dict(self) -> dict:
        return {**asdict(self), "peak": self.peak}


def parameter_shapes(s: Setup) -> list[tuple[int, ...]]:
    """The shapes of the encoder's parameters (``core.model.EncoderClassifier``), in order."""
    d, f = s.d_model, s.d_ff
    block = [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (f, d), (f,), (d, f), (d,)]
    return [(s.vocab_size, d)] + block * s.n_layers + [(d,), (d,), (s.n_outputs, d), (s.n_outputs,)]


def root_bytes(s: Setup) -> int:
    """Bytes of the weights outside the blocks (embedding, final LayerNorm, head): what FSDP2
    keeps gathered from forward to backward when the whole model is its root unit."""
    shapes = parameter_shapes(s)
    return (2 if s.precision == "mixed" else 4) * sum(_numel(x) for x in [shapes[0], *shapes[-4:]])


def attention_work_share(s: Setup) -> float:
    """The attention half's share of a block's forward multiply-adds per token at ``s.length``:
    q/k/v and output projections (4 d²) and the core (2 L d: scores and the weighted sum) against
    those plus the feed-forward block (2 d f). What recomputing the attention half costs."""
    d, f, n = s.d_model, s.d_ff, s.length
    attention = 4 * d * d + 2 * n * d
    return attention / (attention + 2 * d * f)


def attention_core_share(s: Setup) -> float:
    """The attention core's share (2 L d: scores and the weighted sum) of the attention half's
    forward multiply-adds per token at ``s.length`` (with the projections' 4 d²)."""
    d, n = s.d_model, s.length
    return 2 * n * d / (4 * d * d + 2 * n * d)


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for x in shape:
        out *= x
    return out


def _padded_head(d_model: int, n_heads: int) -> int:
    e = d_model // n_heads
    return e + (8 - e % 8)       # core.model.fold_key_padding's extra channels


def block_activation_values(s: Setup) -> dict[str, int]:
    """Values one block saves for backward (4 bytes each in FP32): per token for the batch's
    tokens (``per_token``, of which ``attention`` belongs to the attention half) and shared by
    the batch (``shared``: ALiBi's bias)."""
    d, f, h = s.d_model, s.d_ff, s.n_heads
    attention = 4 * h * _padded_head(d, h) + h + d          # q, k, v, output, lse, proj input
    per_token = 2 * d + attention + 2 * d + 2 * f + 4
    return {"per_token": per_token, "attention": attention + d + 2,   # + LN1 output and stats
            "shared": h * s.length * s.length}


OUTSIDE_PER_TOKEN_BYTES = 28    # embedding indices, final LayerNorm statistics, pooling mask


def _checkpointed(s: Setup, i: int) -> bool:
    return s.checkpoint == "every" or (s.checkpoint == "every_other" and i % 2 == 0)


def block_bytes(s: Setup) -> list[tuple[int, int]]:
    """Per block: the bytes kept from the forward pass until its backward, and the bytes its
    backward recomputes first (0 without checkpointing)."""
    tokens = s.batch * s.length
    v = block_activation_values(s)
    item = 2 if s.precision == "mixed" else 4
    full = item * (tokens * v["per_token"] + v["shared"])
    block_input = item * tokens * s.d_model       # a segment's input: all checkpointing keeps
    out = []
    for i in range(s.n_layers):
        if _checkpointed(s, i):
            out.append((block_input, full - block_input))
        elif s.checkpoint == "attention":
            attn = item * (tokens * v["attention"] + v["shared"])
            out.append((full - attn, attn))
        else:
            out.append((full, 0))
    return out


def _outside_bytes(s: Setup) -> int:
    item = 2 if s.precision == "mixed" else 4
    return s.batch * s.length * (item * s.d_model + OUTSIDE_PER_TOKEN_BYTES)


def _backward_peak(s: Setup, grads_per_block: int = 0, grads_after: int = 0) -> int:
    """The most bytes alive while backward runs from the last block to the first: the kept
    activations of the blocks not yet reached, the block at hand's recomputed ones, the
    activations outside the blocks, and the gradients of the blocks already done (plus
    ``grads_after``, those of the layers after the blocks)."""
    blocks = block_bytes(s)
    outside = _outside_bytes(s)
    peak = 0
    for i in range(len(blocks) - 1, -1, -1):
        kept = sum(k for k, _ in blocks[:i + 1])
        done = (len(blocks) - i) * grads_per_block    # block i writes its own as it goes
        peak = max(peak, outside + kept + blocks[i][1] + done + grads_after)
    return peak


def activation_bytes(s: Setup) -> int:
    """The most bytes of saved activations alive in a training step (the start of backward,
    or a checkpointed block's recomputation): FP32 values, or with ``mixed`` 2 bytes each
    (approximate: autocast keeps LayerNorm's and the softmax's tensors in FP32)."""
    return _backward_peak(s)


def plan(s: Setup) -> Plan:
    """The bytes per rank of ``s``'s steady-state training step."""
    s.validate()
    shapes = parameter_shapes(s)
    n = sum(_numel(x) for x in shapes)
    k = s.shards
    half = s.precision == "mixed"
    weights = n * (2 if half else 4)
    gradients = n * (2 if half else 4)
    # the FP32 master copy of mixed precision counts as optimizer state, as in the ZeRO paper
    optimizer = 4 * state_values(s.optimizer, shapes) + (4 * n if half else 0)
    if s.zero >= 1:
        optimizer //= k
    if s.zero >= 2:
        gradients //= k
    if s.zero >= 3:
        weights //= k
    item = 2 if half else 4
    per_block = item * sum(_numel(x) for x in shapes[1:13]) // (k if s.zero >= 2 else 1)
    after = item * sum(_numel(x) for x in shapes[-4:]) // (k if s.zero >= 2 else 1)
    step = max(_backward_peak(s, per_block, after), gradients)   # the embedding's comes last
    return Plan(weights=weights, gradients=gradients, optimizer=optimizer,
                activations=activation_bytes(s), step=step, parameters=n)


def accumulated_step(s: Setup, micro: int) -> int:
    """The most bytes a training step of ``s`` adds when its batch runs as ``micro``
    micro-batches whose gradients are accumulated: the first micro-batch's step (``plan``), and
    from the second on, one micro-batch's activations with the whole gradient alive from the
    start of its backward (the first wrote it; the others add into it)."""
    if micro < 1 or s.batch % micro:
        raise ValueError(f"micro must be >= 1 and divide batch ({s.batch}), got {micro}")
    one = replace(s, batch=s.batch // micro)
    p = plan(one)
    return p.step if micro == 1 else max(p.step, _backward_peak(one) + p.gradients)
