"""The optimization ladder (lesson 14): which techniques a configuration ("rung") switches on.

Each technique is its lesson's: ``bucketing`` (``batching.make_loader``, 02), ``amp`` (autocast
in ``core.precision.choose_precision``'s dtype, 04), ``distill`` (lesson 06's best student: 2 layers
from the teacher's, distilled, ``model_zoo``), ``prune`` (``structured.prune_ffn_neurons`` +
``pruning.fine_tune``, 05), ``int8`` (``quant.quantize_dynamic_int8``, CPU kernels, 07), ``sdpa``
(SDPA's fused kernel instead of its math backend, 10). The baseline: the teacher, padded to
``fixed_length``, FP32, math attention (the course model's ``F.scaled_dot_product_attention`` call
restricted to SDPA's math backend, which computes and stores the full score matrix).

The ladder in four modules, one job each: this one (rungs: ``ladder`` adds one technique per
rung in ``ORDER``, ``combinations`` gives every subset, both without the techniques that are a
no-op on the device, ``unavailable_here``; ``Settings``; ``applied``, the run-time block),
``model_zoo`` (the models the rungs serve, each built once), the meters (``ladder_inputs``,
``ladder_timing``, ``ladder_memory``: what is measured; ``ladder_meters.measure`` fills the
table) and ``ladder_analysis`` (reading the table).
"""
from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_lib.core.precision import autocast
from course_lib.measure.claims import ACCURACY_TOLERANCE_POINTS

TECHNIQUES = ("bucketing", "amp", "distill", "prune", "int8", "sdpa")
RUNG_NAMES = {"bucketing": "bucketing", "amp": "mixed_precision", "distill": "distillation",
              "prune": "pruning", "int8": "int8", "sdpa": "sdpa"}
METRICS = {"test_accuracy": "fraction", "test_set_s": "s", "latency_b1_ms": "ms",
           "latency_b32_ms": "ms", "train_epoch_s": "s", "size_bytes": "bytes", "peak_mib": "MiB"}
# The accuracy (points) each technique may cost: the table lessons 04-07 judge their claims
# with (``measure.claims.ACCURACY_TOLERANCE_POINTS``). Bucketing and SDPA have no bound here: they
# change float rounding only (lessons 01, 02 and 10 measure it), so the ladder scores each model and
# precision once, with dynamic padding and the fused kernel, and a rung that only adds them has
# the rung below's accuracy by construction: a check could not fail.
BOUNDS = dict(ACCURACY_TOLERANCE_POINTS)
ACCURACY_NEUTRAL = ("bucketing", "sdpa")
# The techniques that change how the teacher itself trains (the others change the model, or come
# after training): the training stack of the "speed-ups multiply" check, the guide's training
# column.
TRAINS_THE_TEACHER = ("bucketing", "amp", "sdpa")


@dataclass(frozen=True)
class Rung:
    """One configuration: its name and which techniques are on."""
    name: str
    bucketing: bool = False
    amp: bool = False
    distill: bool = False
    prune: bool = False
    int8: bool = False
    sdpa: bool = False

    def __post_init__(self):
        if not re.match(r"^[a-z][a-z0-9_]*$", self.name):
            raise ValueError(f"name must be snake_case ([a-z][a-z0-9_]*), got {self.name!r}")

    @property
    def key(self) -> tuple[bool, ...]:
        return tuple(getattr(self, t) for t in TECHNIQUES)

    @property
    def techniques(self) -> tuple[str, ...]:
        return tuple(t for t in TECHNIQUES if getattr(self, t))


# The ladder's order: the techniques that keep the teacher's function first (bucketing and SDPA
# change rounding only, mixed precision and int8 rounding more, pruning a little and then
# fine-tunes), the smaller student last, so that no rung's accuracy check is measured on a model
# that another rung has already changed more.
ORDER = ("bucketing", "sdpa", "amp", "int8", "prune", "distill")


def ladder(order: Sequence[str] = ORDER, *, unavailable: Sequence[str] = ()) -> list[Rung]:
    """The baseline, then one more technique per rung, in ``order`` (cumulative); the
    techniques in ``unavailable`` (a no-op on this device: ``unavailable_here``) are left out."""
    order = tuple(order)
    if any(t not in TECHNIQUES for t in order) or len(set(order)) != len(order):
        raise ValueError(f"order must list distinct techniques from {TECHNIQUES}, got {order}")
    _check_unavailable(unavailable)
    rungs = [Rung("baseline")]
    for t in order:
        if t not in unavailable:
            rungs.append(replace(rungs[-1], name=RUNG_NAMES[t], **{t: True}))
    return rungs


def combinations(*, unavailable: Sequence[str] = ()) -> list[Rung]:
    """Every subset of the available techniques (64 with all six), named by what is on
    ("baseline": none)."""
    _check_unavailable(unavailable)
    avail = [t for t in TECHNIQUES if t not in unavailable]
    return [Rung("_".join(on) or "baseline", **{t: True for t in on})
            for n in range(len(avail) + 1) for on in itertools.combinations(avail, n)]


def unavailable_here(device: torch.device | str) -> dict[str, str]:
    """Techniques that would be a no-op on ``device``, with the reason: mixed precision where
    ``core.precision.choose_precision`` keeps FP32 (a CPU without bf16 instructions). Measuring
    identical code twice would only measure noise."""
    from course_lib.core.precision import choose_precision

    prec = choose_precision(torch.device(device))
    return ({} if prec.dtype is not None
            else {"amp": f"mixed precision is FP32 here ({prec.reason})"})


def _check_unavailable(unavailable: Sequence[str]) -> None:
    if any(t not in TECHNIQUES for t in unavailable):
        raise ValueError(f"unavailable must list techniques from {TECHNIQUES}, "
                         f"got {tuple(unavailable)}")


@dataclass(frozen=True)
class Settings:
    """What is built and how it is measured (the lesson's parameters cell sets these)."""
    fixed_length: int = 512         # the baseline's padding
    train_batch: int = 32           # training batch size (the baseline's recipe)
    eval_batch: int = 64            # test-set batch size
    fixed_train_batches: int = 5    # timed steps at fixed padding (every batch costs the same)
    bucket_train_batches: int = 8   # timed bucketed steps, spread over the epoch's batch widths
    fixed_test_reviews: int = 64    # test reviews timed at fixed padding (every batch of 64 costs
                                    # the same: one batch stands for all), scaled to the test set
    bucket_sample: int = 3          # bucketed test set: the costliest batches (half the padded
                                    # tokens) timed in full, every 3rd of the rest, scaled
    dynamic_sample: int = 4         # the practitioner's test set (dynamic padding): every 4th
                                    # batch in width order, scaled by padded tokens
    warmup: int = 1
    repeats: int = 3                # latency repeats of the rungs, each technique alone and each
                                    # combination one technique short of all (others: one)
    test_repeats: int = 3           # test-set passes per rung (paired ratios need >= 2)
    distill_steps: int = 800        # lesson 06's recipe, when no stored student fits the teacher
    distill_lr: float = 5e-4        # the teacher-initialised student's rate (student_runs)
    train_student: bool = False     # True: distil here even if a stored student fits
    prune_amount: float = 0.5       # share of feed-forward neurons removed
    finetune_steps: int = 40
    finetune_lr: float = 5e-4
    measure_memory: bool = True     # False: peak memory = the weights only (a lower bound)

    def validate(self) -> None:
        for f in fields(self):
            v, low = getattr(self, f.name), 0 if f.name == "warmup" else 1
            if (f.type == "int" and v < low) or (f.type == "float" and not 0 < v < 1):
                need = f">= {low}" if f.type == "int" else "in (0, 1)"
                raise ValueError(f"{f.name} must be {need}, got {v}")


@contextlib.contextmanager
def applied(rung: Rung, *, device_type: str, dtype: torch.dtype | None) -> Iterator[None]:
    """The run-time techniques of ``rung`` in a block: autocast in ``dtype`` if ``amp``, SDPA's
    math backend unless ``sdpa``."""
    dtype = dtype if rung.amp else None
    kernels = contextlib.nullcontext() if rung.sdpa else sdpa_kernel([SDPBackend.MATH])
    with kernels, autocast(device_type, dtype):
        yield
