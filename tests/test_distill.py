import math

import pytest
import torch

from course_lib.batching import make_loader
from course_lib.data import load_corpus
from course_lib.distill import (DistillSet, HiddenStateMatcher, distill, distillation_loss,
                                pooled_hidden, soft_loss, soft_targets)
from course_lib.models import build_model
from course_lib.train import TrainConfig


def kl_by_hand(p, q):
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))


@pytest.mark.parametrize("T", [1.0, 2.0, 4.0])
def test_soft_loss_equals_hand_computation(T):
    t = torch.tensor([[math.log(3.0), 0.0]])
    s = torch.tensor([[0.0, 0.0]])
    z = 3.0 ** (1 / T)
    expected = kl_by_hand([z / (1 + z), 1 / (1 + z)], [0.5, 0.5]) * T * T
    assert soft_loss(s, t, temperature=T).item() == pytest.approx(expected, rel=1e-5)


def test_mixed_loss_and_unlabelled_items():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(4, 2, generator=g), torch.randn(4, 2, generator=g)
    y = torch.tensor([0, 1, -1, -1])
    soft = soft_loss(s, t, temperature=2.0)
    hard = torch.nn.functional.cross_entropy(s[:2], y[:2])
    got = distillation_loss(s, t, y, temperature=2.0, alpha=0.3)
    assert got.item() == pytest.approx((0.3 * soft + 0.7 * hard).item(), rel=1e-6)
    # a batch of only unlabelled items gives the soft loss, never NaN
    assert distillation_loss(s, t, torch.full((4,), -1)).item() == pytest.approx(soft.item())


def test_zero_when_student_matches_teacher_and_finite_for_extreme_logits():
    t = torch.tensor([[5.0, -3.0], [0.1, 0.2]])
    assert soft_loss(t.clone(), t, temperature=3.0).item() == pytest.approx(0.0, abs=1e-7)
    s = torch.tensor([[1000.0, -1000.0]], requires_grad=True)
    loss = distillation_loss(s, torch.tensor([[-1000.0, 1000.0]]), torch.tensor([0]),
                             temperature=1.0, alpha=0.5)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


@pytest.mark.parametrize("kw, match", [(dict(alpha=1.5), "alpha"), (dict(alpha=-0.1), "alpha"),
                                        (dict(temperature=0.0), "temperature")])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        distillation_loss(torch.zeros(1, 2), torch.zeros(1, 2), **kw)


def test_soft_targets_flatten_with_temperature():
    p = soft_targets(torch.tensor([[2.0, 0.0]]), [1.0, 4.0])
    assert p[4.0][0, 1] > p[1.0][0, 1] and torch.allclose(p[1.0].sum(-1), torch.ones(1))


def test_distill_loop_lowers_the_loss_on_a_tiny_problem():
    c = load_corpus(scale=0.03)
    torch.manual_seed(0)
    teacher = build_model(len(c.vocab), d_model=32, n_heads=2, n_layers=1, d_ff=32)
    student = build_model(len(c.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=16)
    data = DistillSet(c.train, c.transfer)
    assert len(data) == len(c.train) + len(c.transfer)
    assert data[len(c.train)]["label"] == -1
    loader = make_loader(data, batch_size=16, seed=0)
    h = distill(student, teacher, loader, cfg=TrainConfig(epochs=3, lr=5e-3), progress=False)
    assert sum(h.step_loss[-5:]) / 5 < sum(h.step_loss[:5]) / 5
    assert not any(p.requires_grad for p in teacher.parameters())


def test_hidden_state_matcher_shapes():
    c = load_corpus(scale=0.01)
    m = build_model(len(c.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=16)
    ids = torch.randint(2, len(c.vocab), (3, 7))
    h = pooled_hidden(m, ids, torch.ones_like(ids, dtype=torch.bool))
    assert h.shape == (3, 16)
    loss = HiddenStateMatcher(16, 32)(h, torch.zeros(3, 32))
    assert loss.ndim == 0
