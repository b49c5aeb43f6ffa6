"""What the machine can do: peak FLOP/s, memory bandwidth, a roofline, and MFU.

The roofline model (Williams, Waterman & Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 2009): an operation doing ``F`` floating-point
operations while moving ``B`` bytes to and from memory has arithmetic intensity ``I = F / B``
and can run at most at ``min(peak_flops, I * bandwidth)``. Below the *ridge point*
``peak_flops / bandwidth`` it is memory-bound, above it compute-bound.

Both ceilings are **measured estimates**, not datasheet numbers: the peak is the best rate of a
large square matmul in the format asked for (``2 n^3`` FLOPs; FP32 by default, and a 16-bit
ceiling measured in bf16/fp16, never assumed equal to the FP32 one), the bandwidth that of a large
tensor copy (read + write, ``2 * bytes``). Vendors' peaks are higher; a real kernel rarely beats a
good matmul.

Model FLOPs follow Kaplan et al., "Scaling Laws for Neural Language Models" (2020), section
2.1: a forward pass costs 2 FLOPs per weight per token (multiply + add) plus the attention
scores and mixing, and a training step about 3x the forward pass (backward = 2x forward).
*Model FLOPs utilisation* (MFU, Chowdhery et al., "PaLM", 2022, appendix B) is the model's
FLOPs per second divided by the peak.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.measure.bench import time_fn
from course_lib.core.model import EncoderConfig


@dataclass(frozen=True)
class Machine:
    """Measured ceilings of one device (estimates)."""
    device: str
    peak_flops: float          # FLOP/s of a large matmul in ``dtype``
    bandwidth: float           # bytes/s of a large copy (read + write)
    dtype: str = "float32"     # the matmul's format: a 16-bit peak is often far above FP32's

    @property
    def ridge_point(self) -> float:
        """Arithmetic intensity (FLOP/byte) where memory-bound turns into compute-bound."""
        return self.peak_flops / self.bandwidth


def measure_matmul_flops(*, device: torch.device | str = "cpu", size: int = 1024,
                         dtype: torch.dtype = torch.float32, repeats: int = 5,
                         seed: int = 0) -> float:
    """FLOP/s of ``size x size`` @ ``size x size`` (``2 * size**3`` FLOPs), median of repeats."""
    if size < 16:
        raise ValueError(f"size must be >= 16, got {size}")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    t = time_fn(lambda: a @ b, warmup=1, repeats=repeats, device=device)
    return 2 * size ** 3 / t.median


def measure_bandwidth(*, device: torch.device | str = "cpu", mib: int = 128,
                      repeats: int = 5) -> float:
    """Bytes/s of copying a ``mib``-MiB fp32 tensor into another one (counts read + write)."""
    if mib < 1:
        raise ValueError(f"mib must be >= 1, got {mib}")
    n = mib * 2 ** 20 // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), warmup=1, repeats=repeats, device=device)
    return 2 * n * 4 / t.median


def measure_machine(*, device: torch.device | str = "cpu", matmul_size: int = 1024,
                    copy_mib: int = 128, repeats: int = 5,
                    dtype: torch.dtype = torch.float32) -> Machine:
    """Both ceilings for ``device``, the compute one for matmuls in ``dtype``."""
    device = torch.device(device)
    return Machine(device.type,
                   measure_matmul_flops(device=device, size=matmul_size, dtype=dtype,
                                        repeats=repeats),
                   measure_bandwidth(device=device, mib=copy_mib, repeats=repeats),
                   str(dtype).replace("torch.", ""))


@dataclass(frozen=True)
class Op:
    name: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def attainable(self, machine: Machine) -> float:
        """The roofline: min(peak, intensity * bandwidth) in FLOP/s."""
        return min(machine.peak_flops, self.intensity * machine.bandwidth)

    def bound(self, machine: Machine) -> str:
        return "compute" if self.intensity >= machine.ridge_point else "memory"


def _linear(name: str, tokens: int, d_in: int, d_out: int, e: int) -> Op:
    # read the input and the weight, write the output
    return Op(name, 2.0 * tokens * d_in * d_out,
              e * (tokens * d_in + d_in * d_out + tokens * d_out))


def encoder_layer_ops(cfg: EncoderConfig, *, batch: int, length: int,
                      bytes_per_element: int = 4) -> list[Op]:
    """FLOPs and minimum memory traffic of one encoder layer's forward pass, per operation.

    Each operation reads its inputs from memory and writes its output once (no fusion), which
    is how eager PyTorch runs them; a compiler that fuses operations removes some traffic.
    """
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be >= 1, got {batch}, {length}")
    if bytes_per_element not in (1, 2, 4, 8):
        raise ValueError(f"bytes_per_element must be 1, 2, 4 or 8, got {bytes_per_element}")
    e, n, d, h, f = bytes_per_element, batch * length, cfg.d_model, cfg.n_heads, cfg.d_ff
    scores = batch * h * length * length
    return [
        _linear("QKV projection", n, d, 3 * d, e),
        Op("scores Q·Kᵀ", 2.0 * scores * (d // h), e * (2 * n * d + scores)),
        Op("softmax", 5.0 * scores, e * 2 * scores),
        Op("weights·V", 2.0 * scores * (d // h), e * (scores + 2 * n * d)),
        _linear("output projection", n, d, d, e),
        Op("residual + LayerNorm", 10.0 * n * d, e * 3 * n * d),
        _linear("FFN up", n, d, f, e),
        Op("GELU", 8.0 * n * f, e * 2 * n * f),   # erf GELU: about 8 operations per element
                                                  # (an estimate)
        _linear("FFN down", n, f, d, e),
        Op("residual + LayerNorm 2", 10.0 * n * d, e * 3 * n * d),
    ]


ATTENTION_MATMULS = ("scores Q·Kᵀ", "weights·V")
LINEAR_MATMULS = ("QKV projection", "output projection", "FFN up", "FFN down")


def attention_flop_share(cfg: EncoderConfig, *, length: int) -> float:
    """Share of one layer's matmul FLOPs spent on Q·Kᵀ and weights·V at ``length`` tokens:
    ``L / (L + 2d + d_ff)`` per token (4·L·d against 2·(4d² + 2·d·d_ff)), whatever the kernel,
    since a fused attention kernel still multiplies every query with every key."""
    ops = {op.name: op.flops for op in encoder_layer_ops(cfg, batch=1, length=length)}
    attention = sum(ops[m] for m in ATTENTION_MATMULS)
    return attention / (attention + sum(ops[m] for m in LINEAR_MATMULS))


def attention_half_length(cfg: EncoderConfig) -> int:
    """The length at which attention's matmuls are half of a layer's: ``2·d_model + d_ff``."""
    return 2 * cfg.d_model + cfg.d_ff


def forward_flops(cfg: EncoderConfig, *, batch: int, length: int) -> float:
    """Matmul FLOPs of one forward pass over ``batch`` sequences of ``length`` tokens (every
    layer's projections, Q·Kᵀ and weights·V, and the head): the convention MFU is quoted in
    (PaLM, Chowdhery et al. 2022, appendix B), which leaves out softmax, norms and activations,
    the work a matmul peak does not measure."""
    ops = encoder_layer_ops(cfg, batch=batch, length=length)
    layer = sum(op.flops for op in ops if op.name in LINEAR_MATMULS + ATTENTION_MATMULS)
    return cfg.n_layers * layer + 2.0 * batch * cfg.d_model * cfg.n_outputs


def training_step_flops(cfg: EncoderConfig, *, batch: int, length: int) -> float:
    """About 3x the forward pass (Kaplan et al., 2020): backward costs two forwards."""
    return 3.0 * forward_flops(cfg, batch=batch, length=length)


def mfu(flops: float, seconds: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak."""
    if seconds <= 0 or peak_flops <= 0:
        raise ValueError(f"seconds and peak_flops must be > 0, got {seconds}, {peak_flops}")
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops}")
    return flops / seconds / peak_flops


def draw_roofline(ax, machine: Machine, ops: list[Op], *, title: str = "") -> None:
    """Log-log roofline with one point per operation (at its attainable rate), told apart by its
    marker in the legend (names written beside the points run into each other on the roof)."""
    import numpy as np

    lo = min(min(op.intensity for op in ops), machine.ridge_point) / 4
    hi = max(max(op.intensity for op in ops), machine.ridge_point) * 4
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(x, np.minimum(machine.peak_flops, x * machine.bandwidth) / 1e9, color="k", lw=2,
            label="roofline (measured ceilings)")
    ax.axvline(machine.ridge_point, color="grey", ls=":", lw=1,
               label=f"ridge point {machine.ridge_point:.1f} FLOP/byte")
    for op, marker in zip(ops, "osD^vP*Xh<>p8d"):
        bound = op.bound(machine)
        ax.scatter([op.intensity], [op.attainable(machine) / 1e9], marker=marker, s=45, zorder=3,
                   color="#C44E52" if bound == "memory" else "#4C72B0",
                   label=f"{op.name} ({bound}-bound)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title(title or f"Roofline of this {machine.device} (estimates)")
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
