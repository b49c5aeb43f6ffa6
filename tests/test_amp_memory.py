"""Training memory under autocast, against hand counts: what FP16 saves, and where it does not."""
import pytest
import torch
from torch import nn

from course_lib.precision import memory as amp_memory
from course_lib.measure.memory import saved_activation_bytes
from course_lib.core.model import build_model, count_parameters


class OneLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 8, bias=False)

    def forward(self, x, mask):
        return self.a(x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_saves_16_bit_input_and_weight_copies(dtype):
    x = torch.randn(4, 16, requires_grad=True)   # as an embedding's output: its gradient is needed
    assert saved_activation_bytes(OneLinear(), x, None) == 4 * 4 * 16          # x in fp32
    # under autocast linear saves its 16-bit input and, for the input's gradient, the 16-bit
    # copy of the weight: the copy is not the parameter's storage, so it counts
    assert (saved_activation_bytes(OneLinear(), x, None, autocast_dtype=dtype)
            == 2 * (4 * 16 + 8 * 16))
    # without a gradient for the input, the weight copy is not kept
    assert saved_activation_bytes(OneLinear(), x.detach(), None, autocast_dtype=dtype) == 2 * 4 * 16


def test_parameter_state_stays_fp32_and_the_ratio_is_the_totals():
    model = build_model(60, preset="student", seed=0)
    ids = torch.randint(2, 60, (4, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    ratio, low, full = amp_memory.memory_ratio(model, ids, mask, precision_name="fp16")
    assert low.parameter_state_bytes == full.parameter_state_bytes == 16 * count_parameters(model)
    assert full.activation_bytes == saved_activation_bytes(model, ids, mask)
    assert 0 < low.activation_bytes < full.activation_bytes
    assert ratio == pytest.approx(low.total_bytes / full.total_bytes)
    with pytest.raises(ValueError, match="precision_name"):
        amp_memory.training_memory(model, ids, mask, precision_name="fp8")


def test_saving_grows_with_the_batch_and_is_bounded_by_the_activation_ratio():
    model = build_model(60, preset="teacher", seed=0)
    rows = amp_memory.by_batch(model, vocab_size=60, batches=[1, 8, 64], length=32)
    ratios = [r["ratio"] for r in rows]
    assert ratios[0] > ratios[1] > ratios[2]          # activations take over as the batch grows
    assert all(r > 0.5 for r in ratios)               # 16-bit activations cannot save more than
                                                      # half
    assert ratios[0] > 1 > ratios[2]                  # at batch 1 the weight copies cost more than
                                                      # they save
    shares = [r["activation_share_fp32"] for r in rows]
    assert shares == sorted(shares)
    with pytest.raises(ValueError, match="batches and length"):
        amp_memory.by_batch(model, vocab_size=60, batches=[0], length=32)
