"""The calculator against this machine: a real training step's memory, counted and measured.

``step_case`` is the work ``measure.bench.peak_rss`` runs in a fresh process: it builds the
course's encoder, its optimizer and a batch for a ``Setup``, runs a tiny step (one sequence of 8
tokens: threads, kernels and the optimizer's state now exist), then measures one real training
step (``core.train.train_step``). Its extra peak RSS is what a steady-state step adds to the
weights and the optimizer state: ``anatomy.plan(setup).step``. ``static_bytes`` counts the
weights, gradients and optimizer state of a live model and optimizer tensor by tensor, exactly.
"""
from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from course_lib.core.model import build_model
from course_lib.core.train import task_loss, train_step
from course_lib.memory.anatomy import Setup, plan
from course_lib.memory.checkpointing import Checkpointed

# glibc's malloc keeps freed memory for reuse, and after a large free it raises its mmap
# threshold so that later large blocks come from that kept heap: RSS then stops following the
# live tensors (a second step shows less than the first). A fixed threshold gives every block
# above 128 KiB its own mapping, returned to the system when freed. (Other C libraries ignore it.)
FIXED_MMAP = {"MALLOC_MMAP_THRESHOLD_": "131072"}

__all__ = ["make_optimizer", "build", "static_bytes", "step_case", "measured_peaks",
           "allocations_by_op"]


def make_optimizer(name: str, params, *, lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizers of ``anatomy.OPTIMIZERS``, with torch's own implementations."""
    table = {"sgd": lambda: torch.optim.SGD(params, lr=lr),
             "sgd_momentum": lambda: torch.optim.SGD(params, lr=lr, momentum=0.9),
             "adam": lambda: torch.optim.Adam(params, lr=lr),
             "adamw": lambda: torch.optim.AdamW(params, lr=lr),
             "adafactor": lambda: torch.optim.Adafactor(params, lr=lr)}
    if name not in table:
        raise ValueError(f"optimizer must be one of {tuple(table)}, got {name!r}")
    return table[name]()


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


def static_bytes(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the weights, the gradients that exist now, and the optimizer's state tensors."""
    params = list(model.parameters())
    state = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values()
                if torch.is_tensor(v) and v.dim() > 0)
    return {"weights": sum(p.numel() * p.element_size() for p in params),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in params
                             if p.grad is not None),
            "optimizer": state}


def step_case(*, prepare: bool = False, **setup):
    """One steady-state training step of ``Setup(**setup)`` (for ``bench.peak_rss``): the
    model, the optimizer and the batch are built, and a tiny step makes the optimizer's state,
    before the baseline is read (with ``prepare``); the measured step then adds activations and
    gradients. (A second full-size step in the same process would reuse pages the allocator kept
    from the first, and show less: hence the tiny one.)"""
    s = Setup(**setup)
    model, batch = build(s)
    opt = make_optimizer(s.optimizer, model.parameters())

    def step() -> None:
        train_step(model, batch, opt, device="cpu", dtype=None, loss_fn=task_loss("classification"),
                   grad_clip=None)

    tiny = {k: v[:1, :8] if v.dim() == 2 else v[:1] for k, v in batch.items()}
    train_step(model, tiny, opt, device="cpu", dtype=None, loss_fn=task_loss("classification"),
               grad_clip=None)                    # threads, kernels, the optimizer's state
    opt.zero_grad(set_to_none=True)
    if prepare:
        return step
    step()
    return None


def measured_peaks(setups: list[Setup], *, workers: int = 1) -> list[int]:
    """Extra peak RSS in bytes of one steady-state training step of each setup, a fresh process each
    (``workers`` at a time: each process has its own peak)."""
    from concurrent.futures import ThreadPoolExecutor

    from course_lib.measure import bench

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    target = f"{__name__}:step_case"
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(bench.peak_rss, target, asdict(s), prepare=True, env=FIXED_MMAP)
                   for s in setups]
        return [f.result().extra_bytes for f in futures]


def allocations_by_op(model: nn.Module, batch: dict, opt: torch.optim.Optimizer, *, top: int = 8
                      ) -> list[tuple[str, int, int]]:
    """One training step under ``torch.profiler`` with ``profile_memory=True``: the ``top``
    operators by the memory they allocated themselves, as (name, calls, bytes). The profiler's
    own start/stop lines, which its C++ side writes straight to the process's stderr, are
    silenced (file descriptor 2 points at /dev/null while it runs)."""
    import os
    import sys

    from torch.profiler import ProfilerActivity, profile

    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            train_step(model, batch, opt, device="cpu", dtype=None,
                       loss_fn=task_loss("classification"), grad_clip=None)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    events = sorted((e for e in prof.key_averages() if e.self_cpu_memory_usage > 0),
                    key=lambda e: -e.self_cpu_memory_usage)[:top]
    return [(e.key, e.count, int(e.self_cpu_memory_usage)) for e in events]
