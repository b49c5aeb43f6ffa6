"""2:4 semi-structured sparsity on a model's feed-forward layers (lessons 05 and 14).

NVIDIA's sparse tensor cores (compute capability >= 8.0: A100, L4, H100) multiply a weight that
keeps 2 of every 4 consecutive inputs at up to twice the dense rate (Mishra et al., 2021,
"Accelerating Sparse Deep Neural Networks"). ``apply_2_4`` zeroes the two smallest |w| of every
group of four in the encoder's feed-forward ``Linear`` layers; that runs anywhere. With
``convert=True`` it also stores them as ``torch.sparse`` semi-structured tensors (PyTorch's
"Accelerating BERT with semi-structured sparsity" tutorial does the same), so the sparse kernel
runs: CUDA, fp16/bf16 weights, compute capability >= 8.0 only.
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.core.model import FeedForward
from course_lib.pruning.masks import semi_structured_mask

__all__ = ["supported", "ffn_linears", "apply_2_4"]


def supported(device: torch.device | str) -> tuple[bool, str]:
    """(True, why) where the 2:4 sparse kernels exist for ``device``, else (False, why not)."""
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"2:4 sparse kernels run on CUDA GPUs only, not on {device.type}"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        return False, (f"compute capability {major}.{minor} has no sparse tensor cores "
                       f"(needs 8.0 or newer)")
    return True, f"compute capability {major}.{minor} has sparse tensor cores"


def ffn_linears(model: nn.Module) -> list[nn.Linear]:
    """The feed-forward ``fc1``/``fc2`` of every block of the course model, in order."""
    ffs = [m for m in model.modules() if isinstance(m, FeedForward)]
    if not ffs:
        raise ValueError("model has no models.FeedForward block: nothing to sparsify")
    return [lin for ff in ffs for lin in (ff.fc1, ff.fc2)]


@torch.no_grad()
def apply_2_4(model: nn.Module, *, convert: bool = False) -> int:
    """Keep the 2 largest |w| of every 4 inputs in each feed-forward layer, in place; returns
    the number of layers changed. ``convert=True`` also stores the weights as semi-structured
    sparse tensors (the model must already be on a supported GPU in fp16 or bf16)."""
    lins = ffn_linears(model)
    if convert:
        from torch.sparse import to_sparse_semi_structured

        w0 = lins[0].weight
        ok, why = supported(w0.device)
        if not ok:
            raise RuntimeError(f"convert=True: {why}")
        if w0.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"convert=True needs fp16 or bf16 weights, got {w0.dtype}")
    for lin in lins:
        w = lin.weight * semi_structured_mask(lin.weight)
        if convert:
            lin.weight = nn.Parameter(to_sparse_semi_structured(w), requires_grad=False)
        else:
            lin.weight.copy_(w)
    return len(lins)


def measure_2_4(model: nn.Module, test_loader, batch: tuple[torch.Tensor, torch.Tensor], *,
                device: torch.device | str, dtype: torch.dtype, warmup: int = 1,
                repeats: int = 3) -> dict:
    """2:4 sparse feed-forward weights against the same dense model, both in ``dtype`` on a
    GPU that has the kernels (``supported``): test accuracy of each over ``test_loader``, and
    the forward time on ``batch`` (ids, mask), the two interleaved (lesson 14's GPU-only rung).
    Raises on a device without the kernels: call ``supported`` first."""
    import copy

    from course_lib.measure import bench
    from course_lib.core.evaluate import evaluate

    ok, why = supported(device)
    if not ok:
        raise RuntimeError(f"2:4 semi-structured sparsity cannot run here: {why}")
    dense = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    sparse = copy.deepcopy(dense)
    apply_2_4(sparse, convert=True)
    acc = {name: evaluate(m, test_loader, device=device, autocast_dtype=dtype)["accuracy"]
           for name, m in (("dense", dense), ("2:4", sparse))}
    ids, mask = (t.to(device) for t in batch)
    t = bench.compare({"dense": bench.forward_call(dense, ids, mask),
                       "2:4": bench.forward_call(sparse, ids, mask)}, warmup=warmup,
                      repeats=repeats, device=device, rotate=True)
    return {"accuracy_dense": acc["dense"], "accuracy_2_4": acc["2:4"],
            "speedup": t["2:4"]["speedup"], "timings": t}
