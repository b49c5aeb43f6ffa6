"""Lesson 14's peak memory of serving a batch: the weights plus the forward pass's own peak (CUDA's
allocator, or the peak RSS of a fresh process on a CPU, ``measure.bench.peak_rss``).
"""
from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from course_lib.measure import bench
from course_lib.quant import dynamic as quant_dynamic
from course_lib.capstone.ladder import Rung
from course_lib.capstone.model_zoo import ModelZoo
from course_lib.core.model import EncoderClassifier, EncoderConfig
from course_lib.capstone.ladder_inputs import Inputs, forward_fn, typical_batch

MiB = 2**20


def peak_mib(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> float:
    """Peak memory of serving a batch of 32: the weights (``size_bytes``) plus the forward
    pass's own peak, CUDA's allocator peak or the peak RSS in a fresh process on a CPU
    (``bench.peak_rss``). With ``measure_memory=False``: the weights only."""
    weights = zoo.size_bytes(rung)
    ids, mask = typical_batch(zoo, inputs, rung, len(inputs.typical))
    if not zoo.settings.measure_memory:
        return weights / MiB
    if ids.device.type == "cuda":
        fn = forward_fn(zoo.model(rung), rung, ids, mask)
        return (weights + bench.cuda_peak_memory(fn, ids.device)) / MiB
    src = zoo.model(replace(rung, int8=False))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.pt"
        torch.save({"config": src.cfg.to_dict(), "state": src.state_dict(),
                    "ids": ids.cpu(), "mask": mask.cpu()}, path)
        extra = bench.peak_rss("course_lib.capstone.ladder_memory:serve_probe",
                               {"path": str(path), "int8": rung.int8, "amp": rung.amp,
                                "sdpa": rung.sdpa}, prepare=True).extra_bytes
    return (weights + extra) / MiB


def peaks_mib(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, workers: int = 2
              ) -> dict[tuple, float]:
    """``peak_mib`` of each rung, by ``Rung.key``. On a CPU the fresh processes run ``workers``
    at a time: each process has its own peak RSS, so they do not disturb one another."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    parallel = zoo.settings.measure_memory and zoo.device.type != "cuda"
    with ThreadPoolExecutor(workers if parallel else 1) as pool:
        values = list(pool.map(lambda r: peak_mib(zoo, inputs, r), rungs))
    return {r.key: v for r, v in zip(rungs, values)}


def serve_probe(*, path: str, int8: bool, amp: bool, sdpa: bool, prepare: bool = False):
    """A CPU forward pass of a saved model on a saved batch, for ``bench.peak_rss``
    (``prepare=True`` returns it, built before the memory baseline is read)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = EncoderClassifier(EncoderConfig(**saved["config"]))
    model.load_state_dict(saved["state"])
    model = quant_dynamic.quantize_dynamic_int8(model) if int8 else model.eval()
    run = forward_fn(model, Rung("probe", amp=amp, sdpa=sdpa), saved["ids"], saved["mask"])
    return run if prepare else run()
