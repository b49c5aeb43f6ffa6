import math

import pytest
import torch

from course_lib.core.batching import make_loader
from course_lib.core.data import load_corpus
from course_lib.distill.losses import (DistillSet, HiddenStateMatcher, distill, distillation_loss,
                                pooled_hidden, soft_loss, soft_targets, teacher_logits)
from course_lib.core.model import build_model
from course_lib.core.padding import pad_batch
from course_lib.core.train import TrainConfig


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
    got = distillation_loss(s, t, y, temperature=2.0, alpha=0.3)
    # by hand, review by review: alpha * soft_i + (1 - alpha) * CE_i (labelled only), then the mean
    per_review = [0.3 * soft_loss(s[i:i + 1], t[i:i + 1], temperature=2.0)
                  + (0.7 * torch.nn.functional.cross_entropy(s[i:i + 1], y[i:i + 1])
                     if y[i] >= 0 else 0.0)
                  for i in range(4)]
    assert got.item() == pytest.approx(sum(float(v) for v in per_review) / 4, rel=1e-6)
    # alpha means the same balance whatever share is labelled: all labelled, the usual mix
    full = torch.tensor([0, 1, 1, 0])
    hard = torch.nn.functional.cross_entropy(s, full)
    assert distillation_loss(s, t, full, temperature=2.0, alpha=0.3).item() == pytest.approx(
        (0.3 * soft + 0.7 * hard).item(), rel=1e-6)
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


def tiny_pair(c):
    torch.manual_seed(0)
    teacher = build_model(len(c.vocab), d_model=32, n_heads=2, n_layers=1, d_ff=32).eval()
    student = build_model(len(c.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=16)
    return teacher, student


def test_distill_set_items_carry_unique_global_indices():
    c = load_corpus(scale=0.01)
    data = DistillSet(c.train, c.transfer)
    index = [data[i]["index"] for i in range(len(data))]
    assert index == list(range(len(data)))      # unique, and covering the whole set
    # the sub-datasets number from 0; the global index does not
    assert c.transfer[0]["index"] == 0 and data[len(c.train)]["index"] == len(c.train)
    assert data[-1]["index"] == len(data) - 1
    assert torch.equal(data[-1]["input_ids"], c.transfer[len(c.transfer) - 1]["input_ids"])
    with pytest.raises(IndexError):
        data[-len(data) - 1]


def test_teacher_logits_match_the_teacher_item_by_item():
    c = load_corpus(scale=0.01)
    teacher, _ = tiny_pair(c)
    data = DistillSet(c.train, c.transfer)
    cached = teacher_logits(teacher, data, batch_size=8)
    assert cached.shape == (len(data), 2)
    with torch.no_grad():   # the reference: each item alone, no padding, in dataset order
        ref = torch.cat([teacher(data[i]["input_ids"][None]) for i in range(len(data))])
    torch.testing.assert_close(cached, ref, rtol=1e-4, atol=1e-5)


def test_teacher_logits_need_global_indices():
    c = load_corpus(scale=0.01)
    teacher, _ = tiny_pair(c)
    concat = torch.utils.data.ConcatDataset([c.train, c.transfer])
    concat.lengths = c.train.lengths + c.transfer.lengths   # what make_loader needs
    with pytest.raises(ValueError, match="index"):
        teacher_logits(teacher, concat)


class PerItemTeacher(torch.nn.Module):
    """A teacher whose output for a review depends on that review only (a bag of words with
    weights in multiples of 1/8, so every sum is exact): padding and batch composition cannot
    change a single bit of its logits."""

    def __init__(self, vocab_size):
        super().__init__()
        self.table = torch.nn.Embedding(vocab_size, 2, padding_idx=0)
        with torch.no_grad():
            self.table.weight.copy_(torch.randint(-8, 9, (vocab_size, 2)) / 8)
            self.table.weight[0].zero_()

    def forward(self, input_ids, attention_mask=None):
        return self.table(input_ids).sum(1)


@pytest.mark.parametrize("kind", ["kl", "mse"])
def test_cached_logits_give_the_same_training_as_the_teacher_per_batch(kind):
    c = load_corpus(scale=0.02)
    data = DistillSet(c.train, c.transfer)
    torch.manual_seed(1)
    teacher = PerItemTeacher(len(c.vocab))
    cached = teacher_logits(teacher, data, batch_size=7)
    runs = []
    for cache in (None, cached):
        torch.manual_seed(0)
        student = build_model(len(c.vocab), d_model=16, n_heads=2, n_layers=1, d_ff=16)
        loader = make_loader(data, batch_size=16, seed=3)
        h = distill(student, None if cache is not None else teacher, loader, kind=kind,
                    cfg=TrainConfig(epochs=2, lr=5e-3), temperature=3.0, alpha=0.7,
                    cached_logits=cache, progress=False)
        runs.append((h.step_loss, [p.detach().clone() for p in student.parameters()]))
    (loss_a, params_a), (loss_b, params_b) = runs
    assert loss_a == loss_b        # bit for bit: same data, same teacher numbers
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))


def test_cached_logits_gradients_equal_running_the_teacher_on_one_batch():
    c = load_corpus(scale=0.01)
    teacher, student = tiny_pair(c)
    data = DistillSet(c.train, c.transfer)
    cached = teacher_logits(teacher, data, batch_size=4)
    items = [data[i] for i in (0, 5, len(c.train) + 2)]
    ids, mask, _ = pad_batch([it["input_ids"] for it in items])
    labels = torch.tensor([it["label"] for it in items])
    grads = []
    for t_logits in (teacher(ids, mask).detach(), cached[[it["index"] for it in items]]):
        student.zero_grad()
        distillation_loss(student(ids, mask), t_logits, labels).backward()
        grads.append([p.grad.clone() for p in student.parameters() if p.grad is not None])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_distill_argument_checks():
    c = load_corpus(scale=0.01)
    data = DistillSet(c.train, c.transfer)
    _, student = tiny_pair(c)
    loader = make_loader(data, batch_size=8)
    with pytest.raises(ValueError, match="teacher or cached_logits"):
        distill(student, None, loader, progress=False)
    with pytest.raises(ValueError, match="cached_logits"):
        distill(student, None, loader, cached_logits=torch.zeros(len(data) - 1, 2),
                progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        teacher_logits(student, data, batch_size=0)
