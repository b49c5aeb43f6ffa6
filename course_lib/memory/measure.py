"""The calculator against this machine: a real training step's memory, counted and measured.

``step_case`` is the work ``measure.bench.peak_rss`` runs in a fresh process: it builds the
course's encoder, its optimizer and a batch for a ``Setup``, runs a tiny step (one sequence of 8
tokens: threads, kernels and the optimizer's state now exist), then measures one real training
step (``core.train.train_step``). Its extra peak RSS is what a steady-state step adds to the
weights and the optimizer state: ``anatomy.plan(setup).step``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace

import torch
from torch import nn

from course_lib.core.model import build_model
from course_lib.core.optimizers import make_optimizer
from course_lib.core.task import task_loss
from course_lib.core.train import train_step
from course_lib.memory.anatomy import CHECKPOINTING, Setup
from course_lib.memory.checkpointing import Checkpointed

# glibc's malloc keeps freed memory for reuse, and after a large free it raises its mmap
# threshold so that later large blocks come from that kept heap: RSS then stops following the
# live tensors (a second step shows less than the first). A fixed threshold gives every block
# above 128 KiB its own mapping, returned to the system when freed. (Other C libraries ignore it.)
FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "131072"}

__all__ = ["build", "step_case", "measured_peaks",
           "cuda_step", "checkpoint_times", "allocations_by_layer"]


def build(s: Setup, *, seed: int = 0) -> tuple[nn.Module, dict]:
    """The encoder of ``s`` (wrapped by its checkpointing policy) and a batch of random tokens."""
    s.validate()
    if s.precision != "fp32" or s.shards != 1:
        raise ValueError("build runs one FP32 process: precision='fp32', shards=1")
    model = build_model(s.vocab_size, preset="teacher", seed=seed, d_model=s.d_model,
                        n_layers=s.n_layers, n_heads=s.n_heads, d_ff=s.d_ff,
                        n_outputs=s.n_outputs, max_len=max(512, s.length))
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, s.vocab_size, (s.batch, s.length), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool),
             "labels": torch.randint(0, s.n_outputs, (s.batch,), generator=g)}
    return (model if s.checkpoint == "none" else Checkpointed(model, s.checkpoint)), batch


def step_case(*, prepare: bool = False, micro: int = 1, **setup):
    """One steady-state training step of ``Setup(**setup)`` (for ``bench.peak_rss``): the
    model, the optimizer and the batch are built, and a tiny step makes the optimizer's state,
    before the baseline is read (with ``prepare``); the measured step then adds activations and
    gradients. With ``micro`` > 1 the batch is split into that many micro-batches whose
    gradients are accumulated before the one update (``core.train.train_step`` given a list).
    (A second full-size step in the same process would reuse pages the allocator kept from the
    first, and show less: hence the tiny one.)"""
    s = Setup(**setup)
    if micro < 1 or s.batch % micro:
        raise ValueError(f"micro must be >= 1 and divide batch ({s.batch}), got {micro}")
    model, batch = build(s)
    opt = make_optimizer(s.optimizer, model.parameters(), lr=1e-3)
    parts = [{k: v[i::micro] for k, v in batch.items()} for i in range(micro)]

    def step() -> None:
        train_step(model, parts if micro > 1 else batch, opt, device="cpu", dtype=None,
                   loss_fn=task_loss("classification"), grad_clip=None)

    tiny = {k: v[:1, :8] if v.dim() == 2 else v[:1] for k, v in batch.items()}
    train_step(model, tiny, opt, device="cpu", dtype=None, loss_fn=task_loss("classification"),
               grad_clip=None)                    # threads, kernels, the optimizer's state
    opt.zero_grad(set_to_none=True)
    if prepare:
        return step
    step()
    return None


def measured_peaks(setups: list[Setup], *, workers: int = 1,
                   micro: int | Sequence[int] = 1) -> list[int]:
    """Extra peak RSS in bytes of one steady-state training step of each setup, a fresh process each
    (``workers`` at a time: each process has its own peak); ``micro``: micro-batches per step,
    one for all or one per setup."""
    from concurrent.futures import ThreadPoolExecutor

    from course_lib.measure import bench

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    micros = [micro] * len(setups) if isinstance(micro, int) else list(micro)
    if len(micros) != len(setups):
        raise ValueError(f"micro needs one value per setup ({len(setups)}), got {len(micros)}")
    target = f"{__name__}:step_case"
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(bench.peak_rss, target, {**asdict(s), "micro": m}, prepare=True,
                               env=FIXED_MMAP) for s, m in zip(setups, micros)]
        return [f.result().extra_bytes for f in futures]


def cuda_step(s: Setup, device: torch.device | str = "cuda", *, snapshot: str | None = None
              ) -> int:
    """One steady-state training step of ``s`` (its optimizer) on a CUDA device, after a first
    step that makes the optimizer's state: the bytes allocated at the step's peak, weights and
    state included (compare ``anatomy.plan(s).peak``). With ``snapshot`` (a path), the step runs
    under ``torch.cuda.memory._record_memory_history`` and its allocation timeline is written
    there: open it at https://pytorch.org/memory_viz."""
    from course_lib.measure import bench

    model, batch = build(s)
    model, batch = model.to(device), {k: v.to(device) for k, v in batch.items()}
    opt = make_optimizer(s.optimizer, model.parameters(), lr=1e-3)
    step = functools.partial(train_step, model, batch, opt, device=device, dtype=None,
                             loss_fn=task_loss("classification"), grad_clip=None)
    step()
    bench.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        extra = bench.cuda_peak_memory(step, device)
        if snapshot:
            torch.cuda.memory._dump_snapshot(snapshot)
    finally:
        if snapshot:
            torch.cuda.memory._record_memory_history(enabled=None)
    return before + extra


def checkpoint_times(base: Setup, lengths: Sequence[int], *, repeats: int, warmup: int = 1
                     ) -> dict[int, dict[str, dict]]:
    """One AdamW training step of ``base`` at each length under every checkpointing policy, timed
    interleaved within each length (``bench.compare``, no checkpointing as the baseline):
    ``{length: {policy: {"timing": Timing, "speedup": Ratio, "time_ratio": Ratio}}}``: the
    policy's step time over no checkpointing's (``verdicts.speedup`` of the paired repeats),
    what recomputation costs."""
    from course_lib.measure.verdicts import speedup
    from course_lib.measure import bench

    out = {}
    for length in lengths:
        steps = {}
        for policy in CHECKPOINTING:
            model, batch = build(replace(base, length=length, checkpoint=policy))
            opt = make_optimizer(base.optimizer, model.parameters(), lr=1e-3)
            steps[policy] = functools.partial(train_step, model, batch, opt, device="cpu",
                                              dtype=None, loss_fn=task_loss("classification"),
                                              grad_clip=None)
        res = bench.compare(steps, warmup=warmup, repeats=repeats, baseline="none")
        none = res["none"]["timing"].samples
        out[length] = {p: {**r, "time_ratio": speedup(r["timing"].samples, none)}
                       for p, r in res.items()}
    return out


def _layers(model: nn.Module) -> dict[nn.Module, str]:
    """The course encoder's layers under the names the profiler ranges get."""
    if isinstance(model, Checkpointed):     # its recomputation would re-enter the ranges
        raise ValueError("allocations_by_layer profiles a model without checkpointing")
    m = model
    names = {m.tok: "embedding"}
    for i, b in enumerate(m.blocks):
        names |= {b.ln1: f"block {i} · LayerNorm 1", b.attn: f"block {i} · attention",
                  b.ln2: f"block {i} · LayerNorm 2", b.ff: f"block {i} · feed-forward"}
    return names | {m.ln_f: "final LayerNorm", m.head: "head"}


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side writes its start/stop lines straight to the process's stderr:
    file descriptor 2 points at /dev/null while it runs."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def allocations_by_layer(model: nn.Module, batch: dict, opt: torch.optim.Optimizer
                         ) -> dict[str, dict[str, int]]:
    """A steady-state training step (after an unprofiled one) under ``torch.profiler``
    (``profile_memory=True``) with each layer's
    forward inside a ``record_function`` range (module hooks): per layer, in forward order, the
    bytes its forward left allocated (``forward``: what it saved for backward, and its output)
    and the net bytes of the backward nodes it created (``backward``: gradients written minus
    activations freed; an autograd node is tied to the forward operation that made it by its
    sequence number). ``"outside the layers"`` holds the rest (loss, optimizer step). The model
    is the course's encoder without checkpointing."""
    from torch.profiler import ProfilerActivity, profile, record_function

    layers, open_ranges, hooks = _layers(model), {}, []

    def enter(module, args):
        open_ranges[module] = record_function(f"layer: {layers[module]}")
        open_ranges[module].__enter__()

    def leave(module, args, output):
        open_ranges.pop(module).__exit__(None, None, None)

    train_step(model, batch, opt, device="cpu", dtype=None, loss_fn=task_loss("classification"),
               grad_clip=None)                 # unprofiled: the optimizer's state now exists
    for module in layers:
        hooks += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU],
                                      profile_memory=True) as prof:
            train_step(model, batch, opt, device="cpu", dtype=None,
                       loss_fn=task_loss("classification"), grad_clip=None)
    finally:
        for h in hooks:
            h.remove()
    rows: dict[str, dict[str, int]] = {name: {"forward": 0, "backward": 0}
                                       for name in layers.values()}
    rows["outside the layers"] = {"forward": 0, "backward": 0}
    origin: dict[int, str] = {}                  # autograd sequence number -> layer
    events = prof.events()
    for e in events:
        if e.name.startswith("layer: "):
            rows[e.name[7:]]["forward"] += int(e.cpu_memory_usage)
        elif e.sequence_nr >= 0 and not e.name.startswith("autograd::"):
            p = e.cpu_parent
            while p is not None and not p.name.startswith("layer: "):
                p = p.cpu_parent
            if p is not None:
                origin.setdefault(e.sequence_nr, p.name[7:])
    total = sum(int(e.self_cpu_memory_usage) for e in events)
    for e in events:
        if e.name.startswith("autograd::engine::evaluate_function"):
            name = origin.get(e.sequence_nr, "outside the layers")
            rows[name]["backward"] += int(e.cpu_memory_usage)
    inside = sum(r["forward"] + r["backward"] for r in rows.values())
    rows["outside the layers"]["forward"] += total - inside    # loss, optimizer, the rest
    return rows
