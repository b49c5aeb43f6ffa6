"""int8 on a GPU (lesson 07): torchao's weight-only int8 against the same model in the GPU's
16-bit format. PyTorch's dynamic int8 (``quant.dynamic.quantize_dynamic_int8``) has CPU kernels
only; on CUDA the current route is torchao (``quantize_(model, Int8WeightOnlyConfig())``: int8
weights, 16-bit multiplies, less memory traffic, which is what limits small batches).

``plan`` decides whether the comparison can run and, if not, what it needs (a ``Recorder.skip``
entry: ``make test-gpu`` fails on a GPU that skips it); ``compare_int8_weight_only`` runs it
and raises on any failure, so a broken GPU path cannot pass as a skip.
"""
from __future__ import annotations

import copy

import torch

from course_lib.measure import bench
from course_lib.core.precision import choose_precision
from course_lib.measure.memory import state_dict_bytes
from course_lib.quant.dynamic import torchao_available
from course_lib.core.evaluate import correct


def plan(device: torch.device | str, *, has_torchao: bool | None = None) -> tuple[str, str] | None:
    """None when the comparison can run on ``device``; else ``(needs, reason)`` for
    ``Recorder.skip``. ``has_torchao`` overrides the import check (tests)."""
    device = torch.device(device)
    if device.type != "cuda":
        return "cuda", (f"no CUDA device here ({device.type}): this comparison is int8 weights "
                        "against the GPU's 16-bit format (the CPU's int8 is measured above)")
    if not (torchao_available() if has_torchao is None else has_torchao):
        return "torchao", ("torchao is not installed (pip install torchao; "
                           "make test-gpu installs it)")
    return None


def compare_int8_weight_only(model: torch.nn.Module,
                             batches: dict[str, tuple[torch.Tensor, torch.Tensor]],
                             test_loader, *, device: torch.device | str, warmup: int = 1,
                             repeats: int = 3) -> dict:
    """The model in 16 bits (BF16 where the GPU has it, else FP16) and in torchao's int8
    weight-only, on ``device``: the latency of each batch in ``batches`` (name -> ids, mask; the
    two models interleaved, the order rotated), the state_dict bytes and the test accuracy. Returns
    ``{"dtype", "rows": {model: {"bytes", "accuracy", <batch>_ms}}, "speedup": {batch: x}}``."""
    device = torch.device(device)
    if plan(device) is not None:
        raise RuntimeError(f"int8 on a GPU cannot run here: {plan(device)[1]}")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    dtype = choose_precision(device).dtype or torch.float16
    g16 = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    g8 = copy.deepcopy(g16)
    quantize_(g8, Int8WeightOnlyConfig())
    name16 = str(dtype).replace("torch.", "")
    models = {name16: g16, "torchao int8 weight-only": g8}

    rows = {k: {} for k in models}
    speedup = {}
    for b, (ids, mask) in batches.items():
        ids, mask = ids.to(device), mask.to(device)
        res = bench.compare({k: bench.forward_call(m, ids, mask) for k, m in models.items()},
                            warmup=warmup, repeats=repeats, device=device, rotate=True)
        for k in models:
            rows[k][f"{b}_ms"] = res[k]["timing"].median * 1e3
        speedup[b] = res["torchao int8 weight-only"]["speedup"].value
    for k, m in models.items():
        rows[k].update(bytes=state_dict_bytes(m),
                       accuracy=float(correct(m, test_loader, device=device).float().mean()))
    return {"dtype": name16, "rows": rows, "speedup": speedup}
