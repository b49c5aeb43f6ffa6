"""Lesson 13's compiler checks: graph breaks and the recompile limit counted on small functions
whose answer is known, and the eager/compiled timing helpers against plain torch."""
import pytest
import torch
from torch import nn

from course_lib.optim import compile_timing as CT
from course_lib.optim.compile import (compile_or_eager, count_graphs_limited, graph_breaks,
                                      trimmed_forward)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(20, 8), nn.Linear(8, 2)

    def forward(self, ids, mask):
        h = self.emb(ids) * mask.unsqueeze(-1)
        return self.out(h.sum(1) / mask.sum(1, keepdim=True))


def batch(length=6, real=4):
    ids = torch.randint(1, 20, (3, length), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(3, length)
    mask[:, :real] = 1
    return ids * mask.long(), mask


def test_trimming_inside_the_call_breaks_the_graph_and_the_plain_call_does_not():
    model = Tiny()
    ids, mask = batch()
    plain = graph_breaks(model, (ids, mask))
    trimmed = graph_breaks(trimmed_forward(model), (ids, mask))
    assert plain["breaks"] == 0 and plain["graphs"] == 1
    assert trimmed["breaks"] >= 1 and trimmed["graphs"] >= 2 and trimmed["reasons"]
    # same answer
    assert torch.allclose(trimmed_forward(model)(ids, mask), model(ids, mask), atol=1e-6)


def test_recompile_limit_caps_the_graphs():
    f = lambda x: (x * 2).sum()  # noqa: E731
    calls = [(torch.ones(n),) for n in range(1, 7)]
    capped = count_graphs_limited(f, calls, recompile_limit=2)
    assert ({k: capped[k] for k in ("graphs", "calls", "limit")}
            == {"graphs": 2, "calls": 6, "limit": 2})
    assert capped["default"] == 8   # torch's default, restored after the call
    import torch._dynamo.config as dc
    assert getattr(dc, "recompile_limit", getattr(dc, "cache_size_limit", None)) == 8
    assert count_graphs_limited(f, calls, recompile_limit=8)["graphs"] == 6
    with pytest.raises(ValueError, match="recompile_limit"):
        count_graphs_limited(f, calls, recompile_limit=0)


def test_inference_function_matches_plain_torch():
    torch.manual_seed(0)
    model, ids, mask = Tiny(), *batch()
    assert torch.equal(CT.inference_fn(model)(ids, mask), model(ids, mask).detach())
    bf = CT.inference_fn(model, dtype=torch.bfloat16)(ids, mask)
    assert bf.dtype == torch.bfloat16                   # autocast really applied


def test_the_first_call_can_be_a_whole_training_step_around_the_compiled_loss():
    """Lesson 13 compiles the forward pass and loss, and times the first training step that
    uses it (the backward graph compiles at the first backward pass)."""
    from course_lib.core.train import make_step_fn
    from course_lib.core.task import task_loss
    torch.manual_seed(0)
    model, ids, mask = Tiny(), *batch()
    step_batch = {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1])}
    before = model.out.weight.detach().clone()
    seen = []

    def first(f):
        seen.append(f)
        make_step_fn(model, step_batch, precision_name="fp32", device="cpu", loss_fn=f)()
    c = compile_or_eager(task_loss("classification"), (model, step_batch), enabled=False,
                         first_call=first)
    assert not c.compiled and seen == [c.fn] and c.first_call_seconds > 0
    assert not torch.equal(before, model.out.weight)    # the step ran: the weights moved


def test_eager_alone_and_payback_by_hand():
    model = Tiny()
    r = CT.eager_vs_compiled(lambda: None, None, model=model, train_mode=True, repeats=2)
    assert r["compiled"]["speedup"] == (1.0, 0.0, float("inf")) and model.training
    assert CT.payback_calls(2.0, 0.010, 0.006) == pytest.approx(500)
    assert CT.payback_calls(2.0, 0.010, 0.012) is None
    with pytest.raises(ValueError, match="positive"):
        CT.payback_calls(1.0, 0.0, 0.1)


def test_fresh_inductor_cache_points_inductor_at_an_empty_directory_and_puts_it_back(monkeypatch):
    import os

    from course_lib.optim.compile import fresh_inductor_cache
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/somewhere_else")
    with fresh_inductor_cache() as path:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == path and os.listdir(path) == []
    assert (os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/somewhere_else"
            and not os.path.exists(path))
