"""Lesson 15's checks around the real model: the kernel count against the configured attention,
the FLOP share against a hand count, the noise calibration against its target, and the grouped
split against leaks."""
import copy

import pytest
import torch

from course_lib.real_model import checks as E
from course_lib.real_model import encoder as R


def test_attention_flop_share_by_hand():
    # MiniLM: d 384, d_ff 1536, 26 tokens -> 2*26*384 / (2*26*384 + 4*384^2 + 2*384*1536)
    want = 19968 / (19968 + 589824 + 1179648)
    assert E.attention_flop_share(d_model=384, d_ff=1536, length=26) == pytest.approx(want)
    # long: attention wins
    assert E.attention_flop_share(d_model=64, d_ff=256, length=100_000) > 0.99
    with pytest.raises(ValueError, match="length"):
        E.attention_flop_share(d_model=384, d_ff=1536, length=0)


def test_noise_at_cosine_hits_its_target_and_is_seeded():
    g = torch.Generator().manual_seed(0)
    ref = torch.nn.functional.normalize(torch.randn(200, 32, generator=g), dim=-1)
    for target in (0.99, 0.9, 0.5):
        noisy = E.noise_at_cosine(ref, target, generator=torch.Generator().manual_seed(1))
        assert float((noisy * ref).sum(-1).mean()) == pytest.approx(target, abs=2e-4)
        assert torch.allclose(noisy.norm(dim=-1), torch.ones(200), atol=1e-5)
    a = E.noise_at_cosine(ref, 0.9, generator=torch.Generator().manual_seed(3))
    b = E.noise_at_cosine(ref, 0.9, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    # more damage, fewer neighbours kept: the calibration is monotone where it matters
    keep = [R.fidelity(ref, E.noise_at_cosine(ref, c, generator=torch.Generator().manual_seed(2)),
                       k=1)["top1_agreement"] for c in (0.999, 0.9, 0.5)]
    assert keep[0] > keep[1] > keep[2]
    with pytest.raises(ValueError, match="target"):
        E.noise_at_cosine(ref, 1.0, generator=g)


def test_split_by_group_keeps_each_group_on_one_side():
    groups = [0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5]
    seen, unseen = E.split_by_group(groups, held_out=0.5, seed=0)
    assert sorted(seen + unseen) == list(range(len(groups)))          # nothing lost
    assert not {groups[i] for i in seen} & {groups[i] for i in unseen}
    assert len({groups[i] for i in unseen}) == 3
    assert (seen, unseen) == E.split_by_group(groups, held_out=0.5, seed=0)
    assert (seen, unseen) != E.split_by_group(groups, held_out=0.5, seed=1)
    with pytest.raises(ValueError, match="2 groups"):
        E.split_by_group([7, 7])
    with pytest.raises(ValueError, match="held_out"):
        E.split_by_group(groups, held_out=1.0)


def test_typical_indices_and_batches_of():
    lengths = [5, 30, 12, 11, 13, 40, 12]
    assert E.typical_indices(lengths, 3) == [2, 6, 3]   # median 12: 12, 12, then 11 before 13
    assert E.batches_of(list("abcde"), 2) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="n must be"):
        E.typical_indices(lengths, 0)


st = pytest.importorskip("sentence_transformers", reason="the [real] extra is not installed")


def test_attention_kernels_tell_eager_from_sdpa():
    model, _ = R.load_real_model()
    ids, _ = R.tokenize(model.tokenizer, R.course_sentences()[:4])
    bert = R._bert(model).eval()
    eager = copy.deepcopy(bert)
    eager.set_attn_implementation("eager")
    s, e = E.attention_kernels(bert, ids), E.attention_kernels(eager, ids)
    assert s["implementation"] == "sdpa" and s["sdpa_calls"] == s["layers"] == 6
    assert e["implementation"] == "eager" and e["sdpa_calls"] == 0
    out = E.embed_call(eager, ids)()
    assert torch.allclose(out, R.embed(bert, ids, batches=[[0, 1, 2, 3]]), atol=1e-5)


def test_course_sentences_groups_are_docstrings():
    s, g = R.course_sentences(with_groups=True)
    assert s == R.course_sentences() and len(g) == len(s)
    assert g == sorted(g) and len(set(g)) < len(s)          # in order; some docstrings give several
