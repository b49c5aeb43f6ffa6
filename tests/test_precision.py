"""The course's one precision rule (``core.precision``): every caller asks the same function, and
it follows the hardware's instructions."""
import pytest
import torch

from course_lib.core import device as D
from course_lib.core import precision as P


@pytest.mark.parametrize("cc, want", [((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16"),
                                      ((6, 1), "fp32")])
def test_on_cuda_bf16_from_compute_capability_8_and_fp16_with_a_scaler_below(monkeypatch, cc,
                                                                               want):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "test GPU")
    chosen = P.choose_precision("cuda")
    assert chosen.name == want
    assert chosen.use_scaler == (want == "fp16")        # FP16 gradients underflow without one
    assert P.training_autocast("cuda") == P.DTYPES[want] == P.amp_dtype("cuda")


@pytest.mark.parametrize("flags, want", [(set(), "fp32"), ({"avx2"}, "fp32"),
                                         ({"avx512_bf16"}, "bf16"), ({"amx_bf16"}, "bf16")])
def test_on_a_cpu_bf16_where_it_has_bf16_instructions_and_train_agrees(monkeypatch, flags, want):
    """The issue this module closes: train's "auto" and the rule lessons print disagreed on a
    CPU with bf16 instructions. Now both are the same function's answer."""
    monkeypatch.setattr(D, "cpu_flags", lambda: set(flags))
    assert P.choose_precision("cpu").name == want
    assert P.training_autocast("cpu") == P.choose_precision("cpu").dtype == P.DTYPES[want]


def test_an_explicit_dtype_or_none_wins_and_a_bad_one_is_named():
    assert P.training_autocast("cuda", None) is None
    assert P.training_autocast("cpu", torch.bfloat16) == torch.bfloat16
    with pytest.raises(ValueError, match="autocast_dtype must be"):
        P.training_autocast("cpu", "bf16")
    with pytest.raises(ValueError, match="precision_name must be one of"):
        P.precision("fp8")
    assert [P.precision_of(P.DTYPES[n]) for n in P.DTYPES] == list(P.DTYPES)


def test_autocast_is_off_for_fp32_and_casts_a_matmul_otherwise():
    a = torch.randn(4, 4)
    with P.autocast("cpu", None):
        assert (a @ a).dtype == torch.float32
    with P.autocast("cpu", torch.bfloat16):
        assert (a @ a).dtype == torch.bfloat16
