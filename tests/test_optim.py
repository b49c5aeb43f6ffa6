
import pytest
import torch
from torch import nn

from course_lib.core.optimizers import (OPTIMIZERS, STATE_PER_ELEMENT, Lamb, make_optimizer,
                                        state_bytes, state_values)
from course_lib.optim.optimizers import single_step_delta
from course_lib.measure.memory import memory_per_parameter


def test_lamb_first_step_matches_hand_computation():
    w0 = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    g = torch.tensor([[0.1, -0.3], [0.2, 0.4]])
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.99, 1e-6, 0.01
    p = nn.Parameter(w0.clone())
    opt = Lamb([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    p.grad = g.clone()
    opt.step()
    # By hand (You et al. 2020, Algorithm 2), first step t = 1:
    m = (1 - b1) * g
    v = (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1), v / (1 - b2)          # = g and g**2
    r = m_hat / (v_hat.sqrt() + eps)                   # ~ sign(g)
    u = r + wd * w0
    ratio = w0.norm() / u.norm()
    expected = w0 - lr * ratio * u
    torch.testing.assert_close(p.detach(), expected)
    assert opt.state[p]["last_trust_ratio"] == pytest.approx(float(ratio), rel=1e-6)
    # and the first direction is almost the sign of the gradient
    torch.testing.assert_close(r, torch.sign(g), atol=1e-4, rtol=0)


def test_lamb_second_step_uses_bias_corrected_moments():
    p = nn.Parameter(torch.tensor([2.0, -1.0]))
    opt = Lamb([p], lr=0.05, betas=(0.8, 0.9), eps=1e-6)
    g1, g2 = torch.tensor([1.0, 2.0]), torch.tensor([-0.5, 1.0])
    x = p.detach().clone()
    m = torch.zeros(2)
    v = torch.zeros(2)
    for t, g in enumerate((g1, g2), start=1):
        p.grad = g.clone()
        opt.step()
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        u = (m / (1 - 0.8 ** t)) / ((v / (1 - 0.9 ** t)).sqrt() + 1e-6)
        x = x - 0.05 * (x.norm() / u.norm()) * u
    torch.testing.assert_close(p.detach(), x)


def test_trust_ratio_is_one_for_zero_weights_or_zero_update():
    one = Lamb.trust_ratio(torch.tensor(0.0), torch.tensor(3.0))
    assert float(one) == 1.0
    assert float(Lamb.trust_ratio(torch.tensor(2.0), torch.tensor(0.0))) == 1.0
    assert float(Lamb.trust_ratio(torch.tensor(2.0), torch.tensor(4.0))) == 0.5
    # a zero-initialised bias still moves, by lr * sign(g) on the first step
    b = nn.Parameter(torch.zeros(3))
    opt = Lamb([b], lr=0.01)
    b.grad = torch.tensor([1.0, -2.0, 0.5])
    opt.step()
    assert opt.state[b]["last_trust_ratio"] == 1.0
    torch.testing.assert_close(b.detach(), torch.tensor([-0.01, 0.01, -0.01]), atol=1e-7, rtol=0)
    # zero gradient and no decay: zero update, ratio 1, weights unchanged
    w = nn.Parameter(torch.ones(2))
    opt = Lamb([w], lr=0.01)
    w.grad = torch.zeros(2)
    opt.step()
    assert opt.state[w]["last_trust_ratio"] == 1.0
    torch.testing.assert_close(w.detach(), torch.ones(2))


@pytest.mark.parametrize("kw, word", [
    (dict(lr=0.0), "lr"), (dict(lr=-1e-3), "lr"), (dict(lr=float("nan")), "lr"),
    (dict(lr=1e-3, betas=(1.0, 0.9)), "betas[0]"), (dict(lr=1e-3, betas=(0.9, -0.1)), "betas[1]"),
    (dict(lr=1e-3, eps=0.0), "eps"), (dict(lr=1e-3, weight_decay=-1.0), "weight_decay")])
def test_bad_hyperparameters_raise_clear_errors(kw, word):
    p = [nn.Parameter(torch.ones(2))]
    with pytest.raises(ValueError, match=word.replace("[", r"\[").replace("]", r"\]")):
        Lamb(p, **kw)
    with pytest.raises(ValueError, match=word.replace("[", r"\[").replace("]", r"\]")):
        make_optimizer("adamw", p, **kw)


def test_make_optimizer_rejects_unknown_names_and_implementations():
    p = [nn.Parameter(torch.ones(2))]
    with pytest.raises(ValueError, match="name"):
        make_optimizer("adagrad", p, lr=1e-3)
    with pytest.raises(ValueError, match="implementation"):
        make_optimizer("adam", p, lr=1e-3, implementation="cuda")
    with pytest.raises(ValueError, match="implementation"):
        make_optimizer("lamb", p, lr=1e-3, implementation="fused")


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_bytes_match_the_actual_state_tensors(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    n_params = sum(p.numel() for p in model.parameters())
    opt = make_optimizer(name, model.parameters(), lr=1e-2)
    model(torch.randn(4, 5)).sum().backward()
    opt.step()
    shapes = [tuple(p.shape) for p in model.parameters()]
    expected = 4 * state_values(name, shapes)               # the paper count, in FP32 bytes
    assert state_bytes(opt, include_scalars=False) == expected
    if name in STATE_PER_ELEMENT:
        assert expected == memory_per_parameter(name)["states"] * n_params
    else:   # Adafactor: a row and a column per matrix, a vector in full
        assert expected == 4 * (7 + 5 + 7 + 3 + 7 + 3)
    # Adam/AdamW/Adafactor keep a 0-d float32 `step` tensor per parameter tensor; LAMB an int
    scalars = state_bytes(opt) - expected
    assert scalars == (4 * len(shapes) if name in ("adam", "adamw", "adafactor") else 0)


def test_memory_per_parameter_totals():
    assert memory_per_parameter("adam")["total"] == 16
    assert memory_per_parameter("adam", precision="mixed")["total"] == 16  # 2+2+4+8 (ZeRO)
    assert memory_per_parameter("sgd")["total"] == 8
    assert memory_per_parameter("sgd_momentum", precision="mixed")["total"] == 12
    assert memory_per_parameter("lamb") == memory_per_parameter("adamw")
    with pytest.raises(ValueError, match="precision"):
        memory_per_parameter("adam", precision="fp8")


def adamw_by_hand(w, grads, *, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
    """AdamW written out (Loshchilov & Hutter, 2019, Algorithm 2, with bias correction): the
    weight decays first, then moves by the corrected first moment over the root of the second."""
    w, m, v = w.clone().double(), torch.zeros_like(w).double(), torch.zeros_like(w).double()
    for t, g in enumerate(grads, start=1):
        g = g.double()
        w = w * (1 - lr * weight_decay)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        w = w - lr * m_hat / (v_hat.sqrt() + eps)
    return w.float()


@pytest.mark.parametrize("impl", ["for_loop", "foreach", "fused"])
def test_implementations_give_the_same_step(impl):
    torch.manual_seed(0)
    w, g = torch.randn(10), torch.randn(10)
    ref = adamw_by_hand(w, [g, g * 0.5], lr=1e-2, weight_decay=0.1) - w
    torch.testing.assert_close(single_step_delta("adamw", w, [g, g * 0.5], lr=1e-2,
                                                 weight_decay=0.1),
                               ref, atol=1e-6, rtol=1e-5)
    p = nn.Parameter(w.clone())
    opt = make_optimizer("adamw", [p], lr=1e-2, weight_decay=0.1, implementation=impl)
    for gg in (g, g * 0.5):
        p.grad = gg.clone()
        opt.step()
    torch.testing.assert_close(p.detach() - w, ref, atol=1e-6, rtol=1e-5)


def test_adam_couples_decay_adamw_decouples_it():
    w = torch.tensor([1.0, 1.0])
    g = torch.tensor([10.0, 0.001])   # one large-gradient and one tiny-gradient coordinate
    grads = [g * (-1) ** t for t in range(10)]   # noise: no net direction
    lr, wd = 0.01, 0.1
    no_decay = single_step_delta("adamw", w, grads, lr=lr, weight_decay=0.0)
    decay_w = single_step_delta("adamw", w, grads, lr=lr, weight_decay=wd) - no_decay
    decay_a = single_step_delta("adam", w, grads, lr=lr, weight_decay=wd) - no_decay
    # AdamW: every weight shrinks alike, by about steps * lr * wd * w
    assert float(decay_w[0]) == pytest.approx(float(decay_w[1]), rel=1e-3)
    assert float(decay_w[0]) == pytest.approx(-10 * lr * wd, rel=0.05)
    # Adam: the decay passes through the 1/sqrt(v) normalisation: weak where gradients are
    # large, much stronger than AdamW's where they are tiny
    assert abs(float(decay_a[0])) < 0.2 * abs(float(decay_w[0]))
    assert abs(float(decay_a[1])) > 5 * abs(float(decay_w[1]))
