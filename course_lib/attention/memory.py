"""How much memory attention needs: a model on paper, and the measurement to check it.

The score matrix of one attention call holds ``B * H * Lq * Lk`` numbers: it grows with the
square of the sequence length, which is why long sequences run out of memory
(FlashAttention, Dao et al. 2022, section 1). ``predict_memory`` counts the tensors each
implementation in ``course_lib.attention.sdpa`` keeps alive at its peak; ``attention_case`` is the
work that ``course_lib.measure.bench.peak_rss`` runs in a fresh process to measure it on the CPU
(and that ``cuda_peak`` measures on a GPU); ``sweep`` times the implementations side by side
(``course_lib.measure.bench.compare``) on the device and dtype it is given: FP32 on a CPU, fp16/bf16
on a GPU, where SDPA can pick FlashAttention's kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.measure import bench
from course_lib.measure.verdicts import Estimate, speedup
from course_lib.attention.flash import flash_attention
from course_lib.attention.sdpa import ATTENTION_FUNCTIONS, sliding_window_mask

__all__ = ["score_matrix_bytes", "MemoryEstimate", "predict_memory", "attention_case",
           "measure_peaks", "cuda_peak", "sweep"]

TIMED = tuple(ATTENTION_FUNCTIONS)   # what ``sweep`` times by default: naive, sdpa, tiled
# ... and the course's FlashAttention (forward + log-sum-exp, backward from it), measured for memory
FUNCTIONS = {**ATTENTION_FUNCTIONS, "flash": flash_attention}
METHODS = tuple(FUNCTIONS)
DTYPES = ("float32", "float16", "bfloat16")   # by name: cases cross process boundaries as JSON


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {name!r}")
    return getattr(torch, name)


def _positive(**values: int) -> None:
    for name, v in values.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


def score_matrix_bytes(batch: int, heads: int, length: int, *, bytes_per_element: int = 4,
                       key_length: int | None = None) -> int:
    """Bytes of one score matrix: ``batch * heads * length * key_length * bytes_per_element``."""
    key_length = length if key_length is None else key_length
    _positive(batch=batch, heads=heads, length=length, key_length=key_length,
              bytes_per_element=bytes_per_element)
    return batch * heads * length * key_length * bytes_per_element


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted bytes, above the inputs q, k, v, at the peak of one call."""
    method: str
    score_matrix: int      # one full B*H*L*L score matrix (for reference)
    activations: int       # B*H*L*D: one tensor shaped like q (output, a gradient)
    peak_extra: int        # what the method keeps alive at its peak
    formula: str           # the same in words

    @property
    def peak_mib(self) -> float:
        return self.peak_extra / 2**20


def predict_memory(*, method: str, batch: int, heads: int, length: int, head_dim: int,
                   backward: bool = False, causal: bool = False, bytes_per_element: int = 4,
                   block_size: int = 128) -> MemoryEstimate:
    """The memory model of the lesson (counts of live tensors, not allocator details).

    * naive, forward: scores and probabilities, ``2 S``, plus the output ``A``;
      forward+backward: the saved probabilities, their gradient and the scores' gradient,
      ``3 S``, plus the output and the gradients of q, k, v (``4 A``).
    * sdpa (a fused flash kernel): the output and one log-sum-exp per row, ``A + B*H*L*4``;
      backward adds the output gradient, the gradients of q, k, v and the kernel's
      accumulators, ``6 A`` in all. No term in ``L^2``.
    * tiled (plain torch): two tiles of ``block x block`` per (batch, head), the list of output
      blocks and their concatenation (``2 A``; a block's scaled queries and running sums are
      freed with it).
      Under autograd each computed tile's scores and probabilities stay saved (``2 S``,
      halved when causal skips the upper tiles), and so does the running ``P V`` sum before
      every key block (``L / block`` tensors of ``A``'s size in all, counted with
      ``torch.autograd.graph.saved_tensors_hooks``), beside the output, the scaled queries and the
      gradients of q, k, v: ``2 S + (L/block + 5) A``.
    * flash (``course_lib.attention.flash``): forward like SDPA's kernel, the output, one
      log-sum-exp per row and two tiles; backward adds the gradients of q, k, v, the product
      ``dO * O`` summed into ``D`` and four tiles (scores, probabilities and their gradients):
      ``5 A + B*H*L*4 + 4 tiles``. Nothing in ``L^2``: the tiles are recomputed from the
      log-sum-exp.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    _positive(head_dim=head_dim, block_size=block_size)
    s = score_matrix_bytes(batch, heads, length, bytes_per_element=bytes_per_element)
    a = batch * heads * length * head_dim * bytes_per_element
    if method == "naive":
        peak, text = (3 * s + 4 * a, "3 S + 4 A") if backward else (2 * s + a, "2 S + A")
    elif method == "sdpa":
        lse = batch * heads * length * 4
        peak, text = (6 * a + lse, "6 A + B·H·L·4") if backward else (a + lse, "A + B·H·L·4")
    elif method == "flash":
        lse = batch * heads * length * 4
        tile = batch * heads * min(block_size, length) ** 2 * 4
        peak, text = ((5 * a + lse + 4 * tile, "5 A + B·H·L·4 + 4 tiles (recomputed)") if backward
                      else (a + lse + 2 * tile, "A + B·H·L·4 + 2 tiles"))
    else:
        tile = batch * heads * min(block_size, length) ** 2 * bytes_per_element
        if backward:
            saved = s if causal else 2 * s
            sums = -(-length // block_size) + 5
            peak, text = (saved + sums * a, ("S" if causal else "2 S")
                          + " + (L/block + 5) A (every tile and running sum saved)")
        else:
            peak, text = 2 * tile + 2 * a, "2 tiles + 2 A"
    return MemoryEstimate(method, s, a, peak, text)


def _inputs(batch: int, heads: int, length: int, head_dim: int, *, seed: int,
            requires_grad: bool, device: torch.device, dtype: torch.dtype
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)   # same numbers on every device
    return tuple(torch.randn(batch, heads, length, head_dim, generator=g)
                 .to(device=device, dtype=dtype).requires_grad_(requires_grad)
                 for _ in range(3))


def attention_case(*, method: str, batch: int, heads: int, length: int, head_dim: int,
                   causal: bool = False, backward: bool = False, window: int | None = None,
                   block_size: int = 128, threads: int | None = None,
                   seed: int = 0, device: str = "cpu", dtype: str = "float32",
                   prepare: bool = False):
    """One attention call on random inputs on ``device`` in ``dtype`` (a name from ``DTYPES``);
    the unit that ``bench.peak_rss`` (CPU) and ``cuda_peak`` (GPU) measure.

    With ``prepare=True`` builds the inputs, warms the thread pool on a tiny call and returns
    the zero-argument work; otherwise runs it once. ``threads`` sets
    ``torch.set_num_threads`` first (for the whole process).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    _positive(batch=batch, heads=heads, length=length, head_dim=head_dim)
    if threads is not None:
        _positive(threads=threads)
        torch.set_num_threads(threads)
    fn, dev, dt = FUNCTIONS[method], torch.device(device), _dtype(dtype)
    q, k, v = _inputs(batch, heads, length, head_dim, seed=seed, requires_grad=backward,
                      device=dev, dtype=dt)
    mask = None if window is None else sliding_window_mask(length, window=window, device=dev)
    if method == "flash" and mask is not None:
        raise ValueError("method='flash' takes no window mask (it skips only causal tiles)")
    kw = {"is_causal": causal} if method == "flash" else {"mask": mask, "is_causal": causal}
    if method == "tiled":
        kw.update(block_size=block_size)
    elif method == "flash":
        kw.update(block_q=block_size, block_k=block_size)

    def run() -> None:
        if backward:   # the gradients of q, k and v, as a training step would compute them
            torch.autograd.grad(fn(q, k, v, **kw).sum(), (q, k, v))
        else:
            with torch.inference_mode():
                fn(q, k, v, **kw)

    if prepare:
        tiny = torch.randn(1, 1, 8, head_dim, device=dev, dtype=dt, requires_grad=backward)
        tkw = {key: val for key, val in kw.items() if key != "mask"}
        if backward:                                          # start threads, load kernels
            torch.autograd.grad(fn(tiny, tiny, tiny, **tkw).sum(), tiny)
        else:
            with torch.inference_mode():
                fn(tiny, tiny, tiny, **tkw)
        return run
    run()
    return None


def measure_peaks(cases: list[dict], *, workers: int = 2) -> list[int]:
    """Extra peak RSS in bytes of each ``attention_case(**case)``, one fresh process per case.

    Processes run ``workers`` at a time: each has its own peak, so they do not disturb each
    other's memory numbers (only their timing, which is not measured here).
    """
    from concurrent.futures import ThreadPoolExecutor

    _positive(workers=workers)
    target = f"{__name__}:attention_case"
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(bench.peak_rss, target, case, prepare=True) for case in cases]
        return [f.result().extra_bytes for f in futures]


def cuda_peak(case: dict) -> int:
    """Extra peak bytes that torch allocates on the GPU for one ``attention_case(**case)``
    (``case["device"]`` must be a CUDA device): the inputs are built first, then only the
    call itself is measured."""
    device = torch.device(case.get("device", "cpu"))
    if device.type != "cuda":
        raise ValueError("cuda_peak measures GPU memory: case['device'] must be CUDA, "
                         f"got {device}")
    run = attention_case(**case, prepare=True)
    return bench.cuda_peak_memory(run, device)


def sweep(lengths: list[int], *, methods: tuple[str, ...] = TIMED, batch: int = 1,
          heads: int = 8, head_dim: int = 64, causal: bool = False, backward: bool = False,
          warmup: int = 1, repeats: int | dict[int, int] = 3, seed: int = 0,
          block_size: int = 128, device: str = "cpu", dtype: str = "float32",
          progress: bool = True) -> list[dict]:
    """Median time of each method at each length, methods interleaved per length, on
    ``device`` in ``dtype`` (the GPU is synchronized around every call).

    Returns rows ``{"length", "method", "causal", "backward", "ms", "samples_ms", "device",
    "dtype"}``: the median and every repeat, interleaved with the other methods at the same
    length (``speedup_at`` pairs them). ``repeats`` may map a length to its
    repeat count (fewer at long lengths).
    """
    if not lengths:
        raise ValueError("lengths must hold at least one length")
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"methods must come from {list(METHODS)}, got {m!r}")
    from course_lib.core.progress import tqdm

    rows = []
    for length in tqdm(lengths, desc=f"{'fwd+bwd' if backward else 'forward'}"
                       f"{' causal' if causal else ''}", disable=not progress):
        fns = {m: attention_case(method=m, batch=batch, heads=heads, length=length,
                                 head_dim=head_dim, causal=causal, backward=backward,
                                 block_size=block_size, seed=seed, device=device, dtype=dtype,
                                 prepare=True)
               for m in methods}
        n = repeats.get(length, 1) if isinstance(repeats, dict) else repeats
        res = bench.compare(fns, warmup=warmup, repeats=n, device=device)
        for m, r in res.items():
            rows.append({"length": length, "method": m, "causal": causal, "backward": backward,
                         "ms": r["timing"].median * 1e3,
                         "samples_ms": [s * 1e3 for s in r["timing"].samples],
                         "device": torch.device(device).type, "dtype": dtype})
    return rows


def _row(rows: list[dict], method: str, length: int) -> dict:
    for r in rows:
        if r["method"] == method and r["length"] == length:
            return r
    raise KeyError(f"no row for method={method!r}, length={length} in this sweep")


def ms_at(rows: list[dict], *, method: str, length: int) -> float:
    """The median time (ms) of ``method`` at ``length`` in ``sweep``'s rows."""
    return _row(rows, method, length)["ms"]


def speedup_at(rows: list[dict], *, slow: str, fast: str, length: int) -> Estimate:
    """How many times faster ``fast`` ran than ``slow`` at ``length`` (``verdicts.speedup`` of
    their interleaved repeats)."""
    return speedup(_row(rows, slow, length)["samples_ms"], _row(rows, fast, length)["samples_ms"])


def predict_case(case: dict) -> MemoryEstimate:
    """``predict_memory`` for one ``measure_peaks`` case (its method, shape and options)."""
    return predict_memory(method=case["method"], batch=case["batch"], heads=case["heads"],
                          length=case["length"], head_dim=case["head_dim"],
                          backward=case.get("backward", False), block_size=case["block_size"])


def peak_of(cases: list[dict], peaks: list[int], *, method: str, length: int,
            backward: bool = False, window: int | None = None) -> int:
    """The measured peak (bytes) of the case with these settings, from ``measure_peaks``'s
    cases and results."""
    for c, p in zip(cases, peaks, strict=True):
        if (c["method"], c["length"], c.get("backward", False),
                c.get("window")) == (method, length, backward, window):
            return p
    raise KeyError(f"no case measured for method={method!r}, length={length}, backward={backward}, "
                   f"window={window}")
