"""The course's one training step, against a step written out with plain torch."""
import copy

import pytest
import torch
from torch import nn

from course_lib.core.train import seeded, train_step


def _loss(model, batch):
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def _setup(seed=0):
    net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for p in net.parameters():
            nn.init.normal_(p)
        x, y = torch.randn(8, 6), torch.randn(8, 1)
    return net, {"x": x, "y": y}


def test_one_step_matches_plain_torch():
    net, batch = _setup()
    ref = copy.deepcopy(net)
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    ropt = torch.optim.AdamW(ref.parameters(), lr=0.1)
    loss, skipped = train_step(net, batch, opt, device="cpu", dtype=None, loss_fn=_loss,
                               grad_clip=0.5)
    rloss = _loss(ref, batch)
    rloss.backward()
    nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    ropt.step()
    assert loss == pytest.approx(rloss.detach().item()) and not skipped
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-7)


def test_micro_batches_accumulate_to_the_full_batch_step():
    net, batch = _setup()
    full = copy.deepcopy(net)
    halves = [{k: v[:4] for k, v in batch.items()}, {k: v[4:] for k, v in batch.items()}]
    calls = []

    class Spy:
        def __enter__(self):
            calls.append(1)

        def __exit__(self, *a):
            return False

    def sgd(m):
        return torch.optim.SGD(m.parameters(), lr=0.1)
    l2, _ = train_step(net, halves, sgd(net), device="cpu", dtype=None, loss_fn=_loss,
                       grad_clip=None, no_sync=Spy)
    l1, _ = train_step(full, batch, sgd(full), device="cpu", dtype=None, loss_fn=_loss,
                       grad_clip=None)
    assert calls == [1]                       # no_sync around the first micro-batch only
    assert l2 == pytest.approx(l1, rel=1e-5)  # the mean loss of equal halves is the full mean
    for p, q in zip(net.parameters(), full.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_an_inf_gradient_is_skipped_by_a_scaler_and_poisons_without_one():
    net, batch = _setup()
    before = [p.clone() for p in net.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    _, skipped = train_step(net, batch, torch.optim.SGD(net.parameters(), lr=0.1), device="cpu",
                            dtype=None, loss_fn=_loss, scaler=scaler, inject_inf=True)
    assert skipped and scaler.get_scale() == 512.0
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before))
    _, skipped = train_step(net, batch, torch.optim.SGD(net.parameters(), lr=0.1), device="cpu",
                            dtype=None, loss_fn=_loss, grad_clip=None, inject_inf=True)
    assert not skipped and not all(torch.isfinite(p).all() for p in net.parameters())


def test_bad_input_is_named():
    net, batch = _setup()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="grad_clip"):
        train_step(net, batch, opt, device="cpu", dtype=None, loss_fn=_loss, grad_clip=-1.0)
    with pytest.raises(ValueError, match="batches"):
        train_step(net, [], opt, device="cpu", dtype=None, loss_fn=_loss)


def test_seeded_is_reproducible_and_leaves_the_callers_generator_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    with seeded(7):
        a = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), state)
    with seeded(7):
        b = torch.rand(3)
    assert torch.equal(a, b)


def test_train_and_amp_train_do_not_reseed_the_callers_generator():
    from course_lib.precision.amp import amp_train
    from course_lib.core.batching import make_loader
    from course_lib.core.data import CorpusConfig, load_corpus
    from course_lib.core.model import build_model
    from course_lib.core.train import TrainConfig, train
    corpus = load_corpus(CorpusConfig(n_train=32, n_val=4, n_test=4, n_transfer=4, max_length=32))
    torch.manual_seed(5)
    state = torch.get_rng_state()
    model = build_model(len(corpus.vocab), preset="student", seed=0, dropout=0.1)
    train(model, make_loader(corpus.train, batch_size=8, seed=0), cfg=TrainConfig(epochs=1),
          progress=False)
    amp_train(model, make_loader(corpus.train, batch_size=8, seed=0), steps=2)
    assert torch.equal(torch.get_rng_state(), state)
