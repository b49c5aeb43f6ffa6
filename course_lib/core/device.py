"""Which device to run on, and what it can do: the first call of every lesson.

Order of preference: CUDA, then Apple's MPS, then the CPU. ``capabilities`` reads what the
hardware has (bf16 and fp16 instructions, the CPU's flags, the threads); what the course does
with it, the one precision rule, is ``core.precision.choose_precision``.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass

import torch


def pick_device(prefer: str | None = None) -> torch.device:
    """``prefer`` ("cuda", "mps", "cpu") wins when available; else the best one present."""
    if prefer is not None:
        if prefer not in ("cuda", "mps", "cpu"):
            raise ValueError(f"prefer must be 'cuda', 'mps' or 'cpu', got {prefer!r}")
        if prefer == "cpu" or _available(prefer):
            return torch.device(prefer)
    for kind in ("cuda", "mps"):
        if _available(kind):
            return torch.device(kind)
    return torch.device("cpu")


def _available(kind: str) -> bool:
    if kind == "cuda":
        return torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("Intel(R) Xeon(R) Processor"), else what
    ``platform`` knows (often only the architecture, "x86_64")."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """CPU feature flags from /proc/cpuinfo (empty set where that file does not exist)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@dataclass(frozen=True)
class Capabilities:
    device: str
    device_name: str
    torch_version: str
    compute_capability: str | None
    bf16_fast: bool       # hardware with fast bf16 math
    fp16_fast: bool       # hardware with fast fp16 math (tensor cores)
    cpu_avx512_bf16: bool
    cpu_amx: bool
    threads: int
    cpu_fp16: bool = False  # avx512_fp16 or amx_fp16: FP16 arithmetic on the CPU (else converted)

    def as_dict(self) -> dict:
        return asdict(self)


def capabilities(device: torch.device | str | None = None) -> Capabilities:
    device = torch.device(device) if device is not None else pick_device()
    flags = cpu_flags()
    avx_bf16, amx = "avx512_bf16" in flags, bool({"amx_bf16", "amx_tile"} & flags)
    cc, name = None, cpu_model()
    bf16 = avx_bf16 or amx
    fp16 = False
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        cc, name = f"{major}.{minor}", torch.cuda.get_device_name(device)
        bf16, fp16 = major >= 8, major >= 7
    elif device.type == "mps":
        name, bf16, fp16 = "Apple GPU (MPS)", False, True
    return Capabilities(device.type, name, torch.__version__, cc, bf16, fp16, avx_bf16, amx,
                        torch.get_num_threads(), bool({"avx512_fp16", "amx_fp16"} & flags))


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for the device's queued work (CUDA, MPS); a no-op on a CPU. Every timer calls it
    before reading the clock (``measure.bench``, ``core.train``'s step times)."""
    kind = torch.device(device).type if device is not None else None
    if (kind in (None, "cuda")) and torch.cuda.is_available():
        torch.cuda.synchronize()
    elif kind == "mps":
        torch.mps.synchronize()


def report(device: torch.device | str | None = None) -> list[tuple[str, str]]:
    """Rows of (what, value) describing this machine, for display and for results files."""
    c = capabilities(device)
    return [("torch", c.torch_version), ("device", c.device), ("device name", c.device_name),
            ("compute capability", c.compute_capability or "n/a"),
            # From CPU flags or the compute capability: instructions exist; whether they are
            # faster here is a measurement (lesson 00 times a bf16 matmul against FP32).
            ("bf16 instructions", str(c.bf16_fast)), ("fp16 tensor cores", str(c.fp16_fast)),
            ("CPU avx512_bf16", str(c.cpu_avx512_bf16)), ("CPU AMX", str(c.cpu_amx)),
            ("CPU fp16 (avx512_fp16/amx_fp16)", str(c.cpu_fp16)),
            ("torch threads", str(c.threads)), ("CPU cores", str(os.cpu_count())),
            ("python", platform.python_version())]


def report_markdown(device: torch.device | str | None = None) -> str:
    rows = report(device)
    return "| what | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def compile_support(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """Whether ``torch.compile`` with Inductor can be expected to work here, and why not."""
    if os.environ.get("COURSE_NO_COMPILE") == "1":
        return False, "disabled by COURSE_NO_COMPILE=1"
    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile (needs torch >= 2.0)"
    if sys.platform == "win32" and torch.device(device).type == "cpu":
        return False, ("Inductor's CPU backend needs a C++ toolchain that is rarely set up on "
                       "Windows")
    if torch.device(device).type == "cpu":
        cxx = os.environ.get("CXX")
        if not any(shutil.which(c) for c in filter(None, (cxx, "g++", "c++", "clang++"))):
            return False, "no C++ compiler (g++/clang++) found: Inductor's CPU backend needs one"
    return True, "available"
