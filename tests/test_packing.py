import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from course_lib.core.model import build_model
from course_lib.packing.pack import (PackedCollate, PackingBatchSampler, block_mask, pack,
                                pack_best_fit, pack_greedy, packed_forward, packed_task_loss)

def unpack(values, seq_ids, n_seqs):
    """The test's own inverse of packing: each sequence's slice, read back by its seq id."""
    flat_ids = seq_ids.reshape(-1)
    flat = values.reshape(flat_ids.numel(), *values.shape[2:])
    return [flat[flat_ids == k] for k in range(n_seqs)]


LENGTHS = st.lists(st.integers(1, 64), min_size=1, max_size=60)


@given(LENGTHS, st.integers(64, 200), st.sampled_from(["greedy", "best_fit"]))
def test_pack_round_trips(lengths, max_len, strategy):
    seqs = [torch.arange(1, n + 1) * 3 + k for k, n in enumerate(lengths)]
    p = pack(seqs, max_len=max_len, strategy=strategy)
    assert p.input_ids.shape[1] <= max_len
    back = unpack(p.input_ids, p.seq_ids, len(seqs))
    assert all(torch.equal(a, b) for a, b in zip(back, seqs))
    pos = unpack(p.position_ids, p.seq_ids, len(seqs))
    assert all(torch.equal(q, torch.arange(n)) for q, n in zip(pos, lengths))
    assert int(p.attention_mask.sum()) == sum(lengths)
    assert p.cu_seqlens.tolist() == [0] + torch.tensor(lengths).cumsum(0).tolist()
    m = block_mask(p.seq_ids)
    same = p.seq_ids.unsqueeze(2) == p.seq_ids.unsqueeze(1)
    assert torch.equal(m, same) and bool(m.any(-1).all())   # no empty softmax row


@example([26, 26, 26, 56, 26, 31, 53], 134)
@given(LENGTHS, st.integers(64, 200))
def test_bin_packers_cover_and_fit(lengths, max_len):
    for packer in (pack_greedy, pack_best_fit):
        rows = packer(lengths, max_len=max_len)
        assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in r) <= max_len for r in rows)
    # Best-fit decreasing is not always better than next-fit (lengths [26, 26, 26, 56, 26, 31, 53]
    # at 134: 3 rows against 2), but it is never worse than 11/9 of the optimum + 6/9 (Dósa 2007),
    # and the optimum is at most next-fit's count; no packer beats the total length's bound.
    bfd, nf = (len(pack_best_fit(lengths, max_len=max_len)),
               len(pack_greedy(lengths, max_len=max_len)))
    lower = -(-sum(lengths) // max_len)
    assert lower <= bfd <= 11 / 9 * nf + 6 / 9 and lower <= nf


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=300), st.integers(1, 5),
       st.integers(1, 3))
def test_packing_sampler_epoch_and_ranks(lengths, rows, replicas):
    from course_lib.distributed.setup import ShardedBatchSampler

    samplers = [ShardedBatchSampler(PackingBatchSampler(lengths, max_len=128, rows_per_batch=rows,
                                                        megabatch_size=50, seed=3),
                                    num_replicas=replicas, rank=r, drop_last=False)
                for r in range(replicas)]
    flat = []
    collate = PackedCollate(max_len=128)
    for s in samplers:
        for b in s:
            flat += b
            out = collate([{"input_ids": torch.ones(lengths[i], dtype=torch.long), "label": 0,
                            "rating": 1.0, "index": i} for i in b])
            assert out["input_ids"].shape[0] <= rows
    assert set(flat) == set(range(len(lengths)))       # every review, some repeated to pad
    assert len({len(s) for s in samplers}) == 1          # the same number of steps per rank


def test_packed_forward_matches_one_sequence_at_a_time():
    torch.manual_seed(0)
    model = build_model(50, preset="student", d_model=32, n_heads=2)
    seqs = [torch.randint(2, 50, (n,)) for n in (5, 31, 12, 7, 40, 3, 1)]
    items = [{"input_ids": s, "label": k % 2, "rating": 2.0, "index": k}
             for k, s in enumerate(seqs)]
    batch = PackedCollate(max_len=64, strategy="best_fit")(items)
    assert batch["input_ids"].shape[0] < len(seqs)
    for mode in (model.train, model.eval):
        mode()
        with torch.no_grad():
            out = packed_forward(model, batch)
            ref = torch.cat([model(s[None], torch.ones(1, len(s), dtype=torch.bool)) for s in seqs])
        assert (out - ref).abs().max() < 1e-5
    loss = packed_task_loss()(model.train(), batch)
    loss.backward()
    assert torch.isfinite(loss)


def test_packing_bad_input():
    with pytest.raises(ValueError, match="max_len"):
        pack_greedy([3], max_len=0)
    with pytest.raises(ValueError, match="lengths"):
        pack_best_fit([], max_len=8)
    with pytest.raises(ValueError, match="lengths"):
        pack_greedy([0, 3], max_len=8)
    with pytest.raises(ValueError, match="max_len must be >= the longest"):
        pack([torch.ones(9)], max_len=8)
    with pytest.raises(ValueError, match="strategy"):
        pack([torch.ones(3)], max_len=8, strategy="worst")
    with pytest.raises(ValueError, match="rows_per_batch"):
        PackingBatchSampler([3], rows_per_batch=0)


def test_issue_targets_on_course_corpus_lengths():
    """Issue targets at batch 32: token budget >= 0.95, packing >= 0.99; sortish with megabatches
    of 100 batches reaches 0.947 (0.95 needs a megabatch spanning nearly the whole split)."""
    from course_lib.core.batching import BucketBatchSampler, TokenBudgetBatchSampler
    from course_lib.core.data import CorpusConfig, generate
    from course_lib.packing.pack import packing_efficiency
    from course_lib.core.padding import batches_efficiency

    lengths = [len(r.text.split()) for r in generate(4000, cfg=CorpusConfig(), seed=123)]
    assert batches_efficiency(lengths, list(BucketBatchSampler(lengths, batch_size=32,
                                                               megabatch_size=100))) >= 0.94
    assert batches_efficiency(lengths,
                              list(TokenBudgetBatchSampler(lengths, max_tokens=2560))) >= 0.95
    plan = list(PackingBatchSampler(lengths, max_len=512, rows_per_batch=5))
    assert packing_efficiency(lengths, plan, max_len=512) >= 0.99
    with pytest.raises(ValueError, match="batches"):
        packing_efficiency(lengths, [], max_len=512)
