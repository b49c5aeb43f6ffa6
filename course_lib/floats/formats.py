"""Floating-point formats bit by bit: FP64, FP32, TF32, FP16, BF16, FP8 (E4M3, E5M2).

A binary floating-point format is fixed by three widths and a bias (IEEE 754-2019, section 3):
1 sign bit, ``exp_bits`` exponent bits stored with a ``bias``, and ``man_bits`` explicit
mantissa (fraction) bits. A normal number is ``(-1)^s * 1.f * 2^(e - bias)``; exponent field 0
holds zero and the subnormals ``(-1)^s * 0.f * 2^(1 - bias)``. IEEE formats reserve the
all-ones exponent for infinity and NaN. The FP8 formats follow the OCP 8-bit floating point
specification (v1.0, 2023): E5M2 is IEEE-like; E4M3 "fn" (finite) has no infinity, only
``S.1111.111`` is NaN, which buys one more binade (largest finite 448). The OCP spec defines two
conversion modes for values beyond the range: *saturating* (to +-448) and *non-saturating* (to
NaN, E4M3 having no infinity). ``encode`` follows the saturating mode; torch versions differ
(this module's tests saw torch 2.13 saturate, and torch 2.9.1 was reported to give NaN):
``floats.in_torch.torch_e4m3_overflow`` says what the installed torch does.

TF32 (NVIDIA's TensorFloat-32, Ampere white paper 2020) is not a storage format: tensor cores
read FP32 inputs and round them to 10 mantissa bits. ``floats.in_torch.simulate_tf32`` reproduces
that rounding in FP32 storage (the low 13 mantissa bits become zero); torch has no tf32 dtype.

Every conversion here is exact (``fractions.Fraction``) and rounds to nearest, ties to even.
What torch itself does with these formats (its casts, finfo, tensors rounded to a format) is in
``course_lib.floats.in_torch``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import torch


@dataclass(frozen=True)
class FloatFormat:
    """One binary format: widths, bias and how it encodes infinity and NaN."""
    name: str
    exp_bits: int
    man_bits: int
    bias: int
    has_inf: bool = True       # False: OCP "fn" style, all-ones exponent still holds numbers
    dtype: torch.dtype | None = None   # torch's storage dtype, None for tf32
    note: str = ""

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def exp_all_ones(self) -> int:
        return (1 << self.exp_bits) - 1

    @property
    def max_exp_field(self) -> int:
        """Largest exponent field that holds finite numbers."""
        return self.exp_all_ones - 1 if self.has_inf else self.exp_all_ones

    @property
    def max_man_at_top(self) -> int:
        """Largest mantissa field allowed with ``max_exp_field`` (fn formats keep 1..1 for NaN)."""
        full = (1 << self.man_bits) - 1
        return full if self.has_inf else full - 1

    # -- the derived table -------------------------------------------------------------
    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger number."""
        return 2.0 ** -self.man_bits

    @property
    def max(self) -> float:
        frac = 1 + Fraction(self.max_man_at_top, 1 << self.man_bits)
        return float(frac * Fraction(2) ** (self.max_exp_field - self.bias))

    @property
    def smallest_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.man_bits)

    @property
    def decimal_digits(self) -> float:
        """Significant decimal digits: (mantissa bits + the implicit 1) * log10(2)."""
        return (self.man_bits + 1) * math.log10(2)

    @property
    def resolution(self) -> float:
        """torch.finfo's ``resolution``: 10 ** -floor(-log10(eps))."""
        return 10.0 ** -math.floor(-math.log10(self.eps))


FORMATS: dict[str, FloatFormat] = {f.name: f for f in (
    FloatFormat("fp64", 11, 52, 1023, dtype=torch.float64),
    FloatFormat("fp32", 8, 23, 127, dtype=torch.float32),
    FloatFormat("tf32", 8, 10, 127, note="no storage dtype: FP32 rounded to 10 mantissa bits "
                "inside NVIDIA tensor cores; simulated here"),
    FloatFormat("fp16", 5, 10, 15, dtype=torch.float16),
    FloatFormat("bf16", 8, 7, 127, dtype=torch.bfloat16),
    FloatFormat("fp8_e4m3", 4, 3, 7, has_inf=False, dtype=torch.float8_e4m3fn,
                note="OCP E4M3 'fn': no infinity; beyond 448 it saturates or gives NaN "
                     "(float_torch.torch_e4m3_overflow)"),
    FloatFormat("fp8_e5m2", 5, 2, 15, dtype=torch.float8_e5m2),
)}


def get_format(name: str | FloatFormat) -> FloatFormat:
    """The format called ``name`` (one of ``FORMATS``)."""
    if isinstance(name, FloatFormat):
        return name
    if name not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {name!r}")
    return FORMATS[name]


def exact(value: float | int | str | Fraction) -> Fraction:
    """The exact rational value of a number or of a decimal string such as ``"0.1"``."""
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except InvalidOperation:
            raise ValueError(f"value must be a finite decimal number, got {value!r}") from None
        if not value.is_finite():
            raise ValueError(f"value must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"value must be finite, got {value!r}")
    return Fraction(value)


def _floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if Fraction(2) ** e <= a else e - 1


def _round_half_even(q: Fraction) -> int:
    n, rem = divmod(q.numerator, q.denominator)
    twice = 2 * rem
    if twice > q.denominator or (twice == q.denominator and n % 2):
        n += 1
    return n


def encode(value: float | int | str, fmt: str | FloatFormat) -> int:
    """The bit pattern (an unsigned int) of ``value`` rounded to nearest-even in ``fmt``.

    Accepts +-inf and nan as floats: inf is an error for formats without infinity; NaN gives
    the format's canonical quiet NaN (torch's pattern).
    """
    f = get_format(fmt)
    if isinstance(value, float) and math.isnan(value):
        return _nan_bits(f)
    if isinstance(value, float) and math.isinf(value):
        if not f.has_inf:
            raise ValueError(f"value must be finite for {f.name}, which has no infinity")
        return _pack(f, value < 0, f.exp_all_ones, 0)
    a = exact(value)
    sign = a < 0 or (a == 0 and isinstance(value, float) and math.copysign(1, value) < 0)
    a = abs(a)
    if a == 0:
        return _pack(f, sign, 0, 0)
    e = max(_floor_log2(a), 1 - f.bias)            # subnormals share the lowest exponent
    quantum = Fraction(2) ** (e - f.man_bits)
    n = _round_half_even(a / quantum)               # value = n * quantum exactly
    if n >= 1 << (f.man_bits + 1):                  # rounded up into the next binade
        n, e = n >> 1, e + 1
    exp_field = e + f.bias if n >= 1 << f.man_bits else 0
    man = n - (1 << f.man_bits) if exp_field else n
    if exp_field > f.max_exp_field or (exp_field == f.max_exp_field and man > f.max_man_at_top):
        if f.has_inf:
            return _pack(f, sign, f.exp_all_ones, 0)
        return _pack(f, sign, f.max_exp_field, f.max_man_at_top)   # OCP's saturating mode
    return _pack(f, sign, exp_field, man)


def _pack(f: FloatFormat, sign: bool, exp_field: int, man: int) -> int:
    return (int(sign) << (f.bits - 1)) | (exp_field << f.man_bits) | man


def _nan_bits(f: FloatFormat) -> int:
    if f.has_inf:   # quiet NaN: all-ones exponent, top mantissa bit set
        return (f.exp_all_ones << f.man_bits) | (1 << (f.man_bits - 1))
    return (f.exp_all_ones << f.man_bits) | ((1 << f.man_bits) - 1)


def fields(bits: int, fmt: str | FloatFormat) -> tuple[int, int, int]:
    """(sign, exponent field, mantissa field) of a bit pattern."""
    f = get_format(fmt)
    if not 0 <= bits < 1 << f.bits:
        raise ValueError(f"bits must be in [0, 2**{f.bits}) for {f.name}, got {bits}")
    return (bits >> (f.bits - 1), (bits >> f.man_bits) & f.exp_all_ones,
            bits & ((1 << f.man_bits) - 1))


def classify(bits: int, fmt: str | FloatFormat) -> str:
    """'zero', 'subnormal', 'normal', 'inf' or 'nan'."""
    f = get_format(fmt)
    _, e, m = fields(bits, f)
    if e == f.exp_all_ones and (f.has_inf or m == (1 << f.man_bits) - 1):
        return "nan" if (m or not f.has_inf) else "inf"
    if e == 0:
        return "zero" if m == 0 else "subnormal"
    return "normal"


def decode_exact(bits: int, fmt: str | FloatFormat) -> Fraction:
    """The exact value of a finite bit pattern (ValueError for inf and NaN)."""
    f = get_format(fmt)
    s, e, m = fields(bits, f)
    kind = classify(bits, f)
    if kind in ("inf", "nan"):
        raise ValueError(f"bits must encode a finite number, got {kind} in {f.name}")
    mant = Fraction(m, 1 << f.man_bits) + (1 if e else 0)
    v = mant * Fraction(2) ** ((e if e else 1) - f.bias)
    return -v if s else v


def decode(bits: int, fmt: str | FloatFormat) -> float:
    """The value of a bit pattern as a Python float (fp64 holds every format here exactly)."""
    f = get_format(fmt)
    kind = classify(bits, f)
    if kind == "nan":
        return math.nan
    if kind == "inf":
        return -math.inf if bits >> (f.bits - 1) else math.inf
    v = float(decode_exact(bits, f))
    return -0.0 if v == 0 and bits >> (f.bits - 1) else v


def round_to(value: float | int | str, fmt: str | FloatFormat) -> float:
    """``value`` as ``fmt`` stores it."""
    f = get_format(fmt)
    return decode(encode(value, f), f)


@dataclass(frozen=True)
class Stored:
    """What a format does to one number."""
    format: str
    bits: int
    sign: str       # the bit strings, for display
    exponent: str
    mantissa: str
    kind: str
    stored: float
    abs_error: float
    rel_error: float   # abs_error / |value| (0 for value 0)


def store(value: float | int | str, fmt: str | FloatFormat) -> Stored:
    """Put a (decimal) number into ``fmt``: its bits, the value stored and the rounding error."""
    f = get_format(fmt)
    a = exact(value)
    bits = encode(value, f)
    kind = classify(bits, f)
    s = format(bits, f"0{f.bits}b")
    if kind in ("normal", "subnormal", "zero"):
        err = abs(decode_exact(bits, f) - a)
        abs_err, rel = float(err), float(err / abs(a)) if a else 0.0
    else:
        abs_err = rel = math.inf
    return Stored(f.name, bits, s[0], s[1:1 + f.exp_bits], s[1 + f.exp_bits:], kind,
                  decode(bits, f), abs_err, rel)


def table() -> list[dict]:
    """One row per format: widths, bias, eps, largest finite, smallest normal/subnormal, digits."""
    return [{"format": f.name, "bits": f.bits, "exponent bits": f.exp_bits,
             "mantissa bits": f.man_bits, "bias": f.bias, "eps": f.eps, "max": f.max,
             "smallest normal": f.smallest_normal, "smallest subnormal": f.smallest_subnormal,
             "decimal digits": round(f.decimal_digits, 2), "torch dtype": str(f.dtype or "none"),
             "note": f.note} for f in FORMATS.values()]


def short(x: float) -> str:
    """A format property in a table: 4 significant digits, or scientific notation for values
    too small or too large to read that way (``floats.table``'s eps, max, subnormals)."""
    return f"{x:.4g}" if 1e-3 <= abs(x) < 1e5 else f"{x:.3e}"
