"""2:4 semi-structured sparsity: the pattern (anywhere), and clear errors where the kernel is
missing. The sparse kernel itself is checked on a GPU in tests/test_gpu.py."""
import pytest
import torch
from torch import nn

from course_lib.core.model import build_model
from course_lib.pruning.semi_structured import apply_2_4, ffn_linears, supported


def fraction_2_4(weight: torch.Tensor) -> float:
    """Share of the groups of 4 consecutive inputs holding at most 2 non-zeros (1.0 = 2:4)."""
    nonzero = (weight.detach() != 0).reshape(weight.shape[0], -1, 4).sum(-1)
    return float((nonzero <= 2).float().mean())


def test_apply_2_4_keeps_the_two_largest_of_every_four():
    torch.manual_seed(0)
    model = build_model(50, preset="student").eval()
    before = [lin.weight.detach().clone() for lin in ffn_linears(model)]
    assert all(fraction_2_4(w) < 0.5 for w in before)   # dense weights are not 2:4
    assert apply_2_4(model) == 2
    for w0, lin in zip(before, ffn_linears(model)):
        w = lin.weight.detach()
        assert fraction_2_4(w) == 1.0 and (w != 0).float().mean() == 0.5
        # an independent check of "the two largest": each kept |w| >= each dropped |w| per group
        g0, g = w0.abs().reshape(w0.shape[0], -1, 4), w.reshape(w.shape[0], -1, 4)
        kept = torch.where(g != 0, g0, torch.inf).amin(-1)
        dropped = torch.where(g == 0, g0, -torch.inf).amax(-1)
        assert (kept >= dropped).all()
        assert torch.equal(w[w != 0], w0[w != 0])   # kept weights are unchanged
    ids = torch.randint(1, 50, (2, 12))
    assert model(ids, torch.ones_like(ids, dtype=torch.bool)).shape == (2, 2)


def test_convert_needs_a_supported_gpu_and_16_bit_weights():
    ok, why = supported("cpu")
    assert not ok and "CUDA" in why
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA GPUs only"):
            apply_2_4(build_model(50, preset="student"), convert=True)
    with pytest.raises(ValueError, match="no models.FeedForward"):
        ffn_linears(nn.Linear(4, 4))


def test_measure_2_4_refuses_a_device_without_the_kernels_and_says_why():
    from course_lib.pruning.semi_structured import measure_2_4
    ok, why = supported("cpu")
    assert not ok
    with pytest.raises(RuntimeError, match="cannot run here"):
        measure_2_4(build_model(50, preset="student"), [], (torch.zeros(1, 4, dtype=torch.long),
                                                            torch.ones(1, 4, dtype=torch.bool)),
                    device="cpu", dtype=torch.bfloat16)
