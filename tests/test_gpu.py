"""GPU checks (`make test-gpu`): run only where CUDA is visible, skipped elsewhere.

Every lesson in smoke mode on the GPU (the CPU harness's checks, plus: no GPU section may skip),
and the GPU behaviour the lessons rely on: SDPA's kernel choice in 16-bit with and without a
mask, FlashAttention's memory against the naive formula, the precision rule, GradScaler skipping
an overflowing fp16 step, 2:4 semi-structured sparsity, and the DDP backend for the GPUs present.
"""
from __future__ import annotations

import os

import pytest
import torch

from nbutil import NOTEBOOKS, run_smoke

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
CELL_TIMEOUT = int(os.environ.get("NB_CELL_TIMEOUT", 300))


def _cc() -> tuple[int, int]:
    return torch.cuda.get_device_capability(0)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_runs_on_the_gpu(nb_path, tmp_path, monkeypatch):
    payload = run_smoke(nb_path, tmp_path, monkeypatch, cell_timeout=CELL_TIMEOUT)
    assert payload["hardware"]["device"] == "cuda", payload["hardware"]
    allowed = set() if torch.cuda.device_count() >= 2 else {"multi_gpu"}
    allowed |= set() if _cc()[0] >= 8 else {"sm80"}
    silent = [s for s in payload.get("skipped", []) if s["needs"] not in allowed]
    assert not silent, f"GPU sections skipped on a GPU: {silent}"


def test_precision_rule_follows_compute_capability():
    from course_lib.core.precision import choose_precision

    p = choose_precision("cuda")
    if _cc()[0] >= 8:
        assert (p.name, p.use_scaler) == ("bf16", False)
    else:
        assert (p.name, p.use_scaler) == ("fp16", True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_kernel_choice_with_and_without_a_mask(dtype):
    from course_lib.attention.sdpa import sdpa_backend, sliding_window_mask

    if dtype == torch.bfloat16 and _cc()[0] < 8:
        pytest.skip("bf16 needs compute capability >= 8")
    x = torch.randn(1, 4, 1024, 64, device="cuda", dtype=dtype)
    plain = sdpa_backend(x, x, x)
    masked = sdpa_backend(x, x, x, mask=sliding_window_mask(1024, window=64, device="cuda"))
    assert plain in {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"}, plain
    assert masked != "FLASH_ATTENTION", "FlashAttention takes no explicit mask"
    fp32 = sdpa_backend(*(t.float() for t in (x, x, x)))
    assert fp32 != "FLASH_ATTENTION", "FlashAttention runs in 16-bit only"


def test_flash_attention_memory_and_agreement_at_4096():
    from course_lib.core.precision import choose_precision
    from course_lib.attention.sdpa import naive_attention, sdpa_attention
    from course_lib.attention.memory import cuda_peak

    dtype = {"bf16": "bfloat16", "fp16": "float16"}[choose_precision("cuda").name]
    case = dict(batch=1, heads=4, length=4096, head_dim=64, device="cuda", dtype=dtype)
    naive, sdpa = cuda_peak(dict(case, method="naive")), cuda_peak(dict(case, method="sdpa"))
    assert sdpa <= naive / 20, (sdpa, naive)
    q, k, v = (torch.randn(1, 4, 512, 64, device="cuda", dtype=getattr(torch, dtype))
               for _ in range(3))
    ref = naive_attention(q.float(), k.float(), v.float())
    assert (sdpa_attention(q, k, v).float() - ref).abs().max() < 3e-2


def test_grad_scaler_skips_an_overflowing_fp16_step():
    from course_lib.core.precision import make_scaler
    from course_lib.core.train import train_step

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).cuda()
    batch = {"features": torch.randn(4, 8, device="cuda"),
             "labels": torch.tensor([0, 1, 0, 1], device="cuda")}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = make_scaler("cuda", init_scale=2.0**10)
    before = [p.detach().clone() for p in model.parameters()]

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(b["features"]), b["labels"])

    _, skipped = train_step(model, batch, opt, device=torch.device("cuda"), dtype=torch.float16,
                          scaler=scaler, loss_fn=loss_fn, inject_inf=True)
    assert skipped and scaler.get_scale() == 2.0**9
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    _, skipped = train_step(model, batch, opt, device=torch.device("cuda"), dtype=torch.float16,
                          scaler=scaler, loss_fn=loss_fn)
    assert not skipped and not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_two_to_four_sparse_matmul_agrees_with_the_masked_dense_one():
    from course_lib.pruning.masks import semi_structured_mask

    if _cc() < (8, 0):
        pytest.skip("semi-structured sparse kernels need compute capability >= 8.0")
    from torch.sparse import to_sparse_semi_structured

    torch.manual_seed(0)
    w = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    w = w * semi_structured_mask(w)
    x = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    sparse = to_sparse_semi_structured(w)
    assert (sparse @ x - w @ x).abs().max() < 5e-2


def test_ddp_backend_matches_the_gpus_present():
    from course_lib.distributed.launch import launch

    res = launch(["--dry-run"], nproc=2, timeout=180, echo=False)
    want = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    assert res["backend"] == want


def test_teacher_with_2_4_sparse_ffn_matches_its_masked_dense_copy():
    import copy

    from course_lib.core.model import build_model
    from course_lib.pruning.semi_structured import apply_2_4, supported

    ok, why = supported("cuda")
    if not ok:
        pytest.skip(why)
    torch.manual_seed(0)
    dense = build_model(100, preset="teacher").cuda().half().eval()
    apply_2_4(dense)                        # masked, still dense storage
    sparse = copy.deepcopy(dense)
    apply_2_4(sparse, convert=True)         # the same numbers, sparse kernels
    ids = torch.randint(1, 100, (32, 64), device="cuda")
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.inference_mode():
        assert (sparse(ids, mask).float() - dense(ids, mask).float()).abs().max() < 5e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_course_model_in_16_bit_agrees_with_fp32_and_keeps_padding_out(dtype):
    """The course model on the GPU under autocast: the folded padding channel and the ALiBi bias
    in 16 bits give FP32's predictions, padding still changes nothing, and a fused SDPA kernel
    (not the math fallback) accepts the folded inputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from course_lib.core.model import build_model, fold_key_padding

    if dtype == torch.bfloat16 and _cc()[0] < 8:
        pytest.skip("bf16 needs compute capability >= 8")
    model = build_model(100, preset="teacher", seed=0).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(1, 100, (16, 96), device="cuda", generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    for i in range(16):
        mask[i, 20 + 4 * i:] = False
    ids[~mask] = 0
    with torch.inference_mode():
        ref = model(ids, mask)
        with torch.autocast("cuda", dtype=dtype):
            low = model(ids, mask).float()
            short = model(ids[:1, :20], mask[:1, :20]).float()
    assert (low - ref).abs().max() < 5e-2
    assert (low.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9
    assert (short[0] - low[0]).abs().max() < 5e-2
    q, k, v = (torch.randn(16, 4, 96, 32, device="cuda", dtype=dtype) for _ in range(3))
    q, k, v = fold_key_padding(q, k, v, mask)
    bias = torch.randn(1, 4, 96, 96, device="cuda", dtype=dtype)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def test_course_model_trains_a_step_under_the_course_precision():
    from course_lib.core.precision import choose_precision
    from course_lib.core.model import build_model

    p = choose_precision("cuda")
    model = build_model(100, preset="teacher", seed=0).cuda().train()
    ids = torch.randint(1, 100, (8, 64), device="cuda")
    with torch.autocast("cuda", dtype=p.dtype):
        loss = torch.nn.functional.cross_entropy(model(ids),
                                                 torch.zeros(8, dtype=torch.long, device="cuda"))
    loss.backward()
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_cuda_step_peak_and_memory_snapshot(tmp_path):
    import pickle

    from course_lib.memory.anatomy import Setup, plan
    from course_lib.memory.measure import cuda_step

    s = Setup(batch=8, length=256)
    path = tmp_path / "step.pickle"
    peak = cuda_step(s, snapshot=str(path))
    p = plan(s)
    assert p.weights + p.optimizer < peak < 3 * p.peak        # the state, plus a step's worth
    snap = pickle.loads(path.read_bytes())
    assert snap["segments"] and any(t for t in snap["device_traces"])   # allocations recorded
