import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.core.batching import (BucketBatchSampler, TokenBudgetBatchSampler,
                                      UniformLengthBatchSampler, make_loader,
                                      uniform_length_batches)
from course_lib.core.padding import (Collate, batches_efficiency, fixed_length, key_padding_mask,
                                     lengths_to_mask, pad_batch, padded_tokens)


@given(st.lists(st.integers(1, 30), min_size=1, max_size=20))
def test_dynamic_padding_matches_torch_pad_sequence(lengths):
    seqs = [torch.arange(1, n + 1) for n in lengths]
    ids, mask, cut = pad_batch(seqs)
    ref = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
    assert torch.equal(ids, ref)
    assert mask.sum(1).tolist() == lengths and cut == 0


def test_fixed_length_reports_truncation_and_multiple_of():
    seqs = [torch.arange(1, 11), torch.arange(1, 4)]
    ids, mask, cut = pad_batch(seqs, max_length=5)
    assert ids.shape == (2, 5) and cut == 5
    ids, _, _ = pad_batch(seqs, pad_to_multiple_of=8)
    assert ids.shape == (2, 16)
    assert pad_batch(seqs)[1].float().mean().item() == pytest.approx(13 / 20)   # real tokens


@pytest.mark.parametrize("kw, match", [(dict(max_length=0), "max_length"),
                                        (dict(pad_to_multiple_of=0), "pad_to_multiple_of")])
def test_pad_batch_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        pad_batch([torch.tensor([1])], **kw)
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([])


def test_collate_keeps_labels_with_their_sequences():
    items = [{"input_ids": torch.tensor([5] * n), "label": n % 2, "rating": float(n),
              "length": n, "index": i} for i, n in enumerate([3, 1, 2])]
    b = Collate()(items)
    assert b["labels"].tolist() == [1, 1, 0] and b["lengths"].tolist() == [3, 1, 2]
    assert b["attention_mask"].sum(1).tolist() == [3, 1, 2]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=300), st.integers(1, 17),
       st.integers(1, 5), st.booleans())
def test_bucket_sampler_covers_every_index_once(lengths, bs, mega, drop_last):
    s = BucketBatchSampler(lengths, batch_size=bs, megabatch_size=mega, drop_last=drop_last,
                           seed=0)
    batches = list(s)
    flat = [i for b in batches for i in b]
    assert len(flat) == len(set(flat)) and len(batches) == len(s)
    if not drop_last:
        assert sorted(flat) == list(range(len(lengths)))
    else:
        # Pools hold batch_size * megabatch_size sequences, so only the last pool has a
        # partial batch: drop_last loses fewer than batch_size indices, all batches are full.
        assert len(flat) == (len(lengths) // bs) * bs and all(len(b) == bs for b in batches)


def test_bucket_sampler_reduces_padding_and_reshuffles():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 400, (2000,), generator=g).tolist()
    s = BucketBatchSampler(lengths, batch_size=32, seed=0)
    def eff(batches):
        return sum(sum(lengths[i] for i in b) for b in batches) / sum(
            len(b) * max(lengths[i] for i in b) for b in batches)
    e1, e2 = list(s), list(s)
    assert e1 != e2                  # a new order every epoch
    random = [list(range(i, min(i + 32, 2000))) for i in range(0, 2000, 32)]
    assert eff(e1) > 0.9 > eff(random)


def test_bucket_sampler_bad_input():
    with pytest.raises(ValueError, match="batch_size"):
        BucketBatchSampler([1, 2], batch_size=0)
    with pytest.raises(ValueError, match="lengths"):
        BucketBatchSampler([], batch_size=2)
    with pytest.raises(ValueError, match=">= 1"):
        BucketBatchSampler([0, 2], batch_size=2)


# --- lesson 01/02 additions -------------------------------------------------------------

LENGTHS = st.lists(st.integers(1, 200), min_size=1, max_size=200)


@given(LENGTHS, st.integers(1, 64), st.integers(1, 8))
def test_masks_mark_exactly_the_real_tokens(lengths, width_extra, multiple):
    seqs = [torch.full((n,), 7) for n in lengths]
    ids, mask, _ = pad_batch(seqs, pad_to_multiple_of=multiple)
    assert ids.shape[1] % multiple == 0
    assert torch.equal(mask, lengths_to_mask(lengths, width=ids.shape[1]))
    assert torch.equal(mask, ids == 7) and torch.equal(key_padding_mask(mask), ids == 0)
    assert padded_tokens(lengths, pad_to_multiple_of=multiple) == (sum(lengths), mask.numel())
    width = max(lengths) + width_extra
    ids, mask, cut = fixed_length(seqs, max_length=width)
    assert ids.shape == (len(lengths), width) and cut == 0 and int(mask.sum()) == sum(lengths)


@given(LENGTHS, st.integers(1, 100))
def test_fixed_length_never_cuts_silently(lengths, max_length):
    _, mask, cut = fixed_length([torch.ones(n) for n in lengths], max_length=max_length)
    assert cut == sum(max(0, n - max_length) for n in lengths)
    assert int(mask.sum()) + cut == sum(lengths)
    assert padded_tokens(lengths, max_length=max_length)[0] == int(mask.sum())


def _check_epoch(batches, n, labels=None):
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(n)), "every index exactly once"


@settings(max_examples=40, deadline=None)
@given(LENGTHS, st.integers(1, 17), st.booleans(), st.integers(0, 99))
def test_uniform_length_is_pure_and_aligned(lengths, bs, shuffle, seed):
    before = list(lengths)
    labels = [n % 3 for n in lengths]
    s = UniformLengthBatchSampler(lengths, batch_size=bs, shuffle=shuffle, seed=seed)
    batches = list(s)
    assert lengths == before                      # the caller's list is untouched
    _check_epoch(batches, len(lengths))
    assert all(labels[i] == lengths[i] % 3 for b in batches for i in b)
    plain = uniform_length_batches(lengths, batch_size=bs)
    if not shuffle:
        assert batches == plain
    widths = [max(lengths[i] for i in b) for b in plain]
    assert widths == sorted(widths)


@settings(max_examples=40, deadline=None)
@given(LENGTHS, st.integers(200, 2000), st.one_of(st.none(), st.integers(1, 40)),
       st.one_of(st.none(), st.integers(1, 16)), st.integers(1, 300), st.booleans())
def test_token_budget_respected_and_complete(lengths, max_tokens, max_bs, multiple, mega,
                                             drop_last):
    longest = -(-max(lengths) // multiple) * multiple if multiple else max(lengths)
    if longest > max_tokens:
        with pytest.raises(ValueError, match="max_tokens"):
            TokenBudgetBatchSampler(lengths, max_tokens=max_tokens, multiple_of=multiple)
        return
    s = TokenBudgetBatchSampler(lengths, max_tokens=max_tokens, max_batch_size=max_bs,
                                multiple_of=multiple, megabatch_size=mega, drop_last=drop_last)
    n_batches = len(s)
    batches = list(s)
    assert len(batches) == n_batches
    for b in batches:
        assert s.cost(b) <= max_tokens and (max_bs is None or len(b) <= max_bs)
    if not drop_last:
        _check_epoch(batches, len(lengths))
    else:
        flat = [i for b in batches for i in b]
        assert len(flat) == len(set(flat))


@settings(max_examples=30, deadline=None)
@given(LENGTHS, st.integers(1, 9), st.integers(1, 4), st.sampled_from(["bucket", "uniform",
                                                                          "budget"]))
def test_sharded_samplers_give_every_rank_the_same_steps(lengths, bs, replicas, kind):
    """Each rank builds the sampler with the same seed and wraps it: equal batch counts on every
    rank (unequal counts deadlock DDP), and together the ranks cover the epoch: exactly once
    with drop_last (the remainder dropped), at least once without (the first batches repeat)."""
    from course_lib.distributed.setup import ShardedBatchSampler

    def make():
        if kind == "bucket":
            return BucketBatchSampler(lengths, batch_size=bs, megabatch_size=3, seed=5)
        if kind == "uniform":
            return UniformLengthBatchSampler(lengths, batch_size=bs, seed=5)
        return TokenBudgetBatchSampler(lengths, max_tokens=400, seed=5)
    for drop_last in (False, True):
        for epoch in range(2):
            bases = [make() for _ in range(replicas)]
            for b in bases:
                b.set_epoch(epoch)
            shards = [list(ShardedBatchSampler(b, num_replicas=replicas, rank=r,
                                               drop_last=drop_last))
                      for r, b in enumerate(bases)]
            assert len({len(s) for s in shards}) == 1
            flat = [i for s in shards for batch in s for i in batch]
            if drop_last:
                assert len(flat) == len(set(flat))
            else:
                assert set(flat) == set(range(len(lengths)))


def test_bucket_sampler_keeps_training_random_no_sawtooth():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 500, (3200,), generator=g).tolist()
    width = lambda batches: [max(lengths[i] for i in b) for b in batches]  # noqa: E731
    sorted_w = width(list(UniformLengthBatchSampler(lengths, batch_size=32, shuffle=False)))
    bucket_w = width(list(BucketBatchSampler(lengths, batch_size=32, seed=0)))
    corr = lambda w: float(torch.corrcoef(torch.tensor([list(range(len(w))), w],  # noqa: E731
                                                       dtype=torch.float))[0, 1])
    assert corr(sorted_w) > 0.95 and abs(corr(bucket_w)) < 0.3
    assert batches_efficiency(lengths, list(BucketBatchSampler(lengths, batch_size=32))) > 0.9


def test_new_samplers_bad_input():
    with pytest.raises(ValueError, match="batch_size"):
        UniformLengthBatchSampler([1, 2], batch_size=0)
    with pytest.raises(ValueError, match="lengths"):
        TokenBudgetBatchSampler([], max_tokens=10)
    with pytest.raises(ValueError, match="lengths"):
        UniformLengthBatchSampler([-3, 2], batch_size=1)
    with pytest.raises(ValueError, match="max_tokens must be >= the longest"):
        TokenBudgetBatchSampler([5, 50], max_tokens=40)
    with pytest.raises(ValueError, match="max_batch_size"):
        TokenBudgetBatchSampler([5], max_tokens=40, max_batch_size=0)
    with pytest.raises(ValueError, match="lengths"):
        lengths_to_mask([0, 2])
    with pytest.raises(ValueError, match="batches"):
        batches_efficiency([1], [])


def test_make_loader_with_a_subset():
    from torch.utils.data import Subset

    items = [{"input_ids": torch.tensor([3] * n), "label": n % 2, "rating": 1.0, "length": n,
              "index": i} for i, n in enumerate([4, 9, 2, 7, 5])]
    sub = Subset(items, [1, 3, 4])
    loader = make_loader(sub, batch_size=2, lengths=[9, 7, 5], pad_to_multiple_of=8)
    batches = list(loader)
    assert sorted(int(i) for b in batches for i in b["index"]) == [1, 3, 4]
    assert all(b["input_ids"].shape[1] % 8 == 0 for b in batches)


def test_random_batches_cover_every_index_once_and_follow_the_seed():
    from course_lib.core.batching import random_batches

    a, b = random_batches(10, batch_size=4, seed=3), random_batches(10, batch_size=4, seed=3)
    assert a == b and [len(x) for x in a] == [4, 4, 2]
    assert sorted(i for x in a for i in x) == list(range(10))
    assert a != random_batches(10, batch_size=4, seed=4)
    want = torch.randperm(10, generator=torch.Generator().manual_seed(3)).tolist()
    assert [i for x in a for i in x] == want
    with pytest.raises(ValueError, match="batch_size"):
        random_batches(3, batch_size=0, seed=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=2, max_size=300), st.integers(1, 17),
       st.floats(0, 1), st.booleans(), st.integers(0, 99))
def test_noisy_sort_covers_every_index_once_per_epoch(lengths, bs, noise, drop_last, seed):
    from course_lib.core.batching import NoisySortBatchSampler
    s = NoisySortBatchSampler(lengths, batch_size=bs, noise=noise, drop_last=drop_last, seed=seed)
    for _ in range(2):
        batches = list(s)
        if drop_last:
            flat = [i for b in batches for i in b]
            assert all(len(b) == bs for b in batches) and len(flat) == len(set(flat))
            assert len(flat) == len(lengths) // bs * bs
        else:
            _check_epoch(batches, len(lengths))


def test_noisy_sort_at_zero_noise_pads_like_the_full_sort_and_still_changes_batches():
    from course_lib.core.batching import (NoisySortBatchSampler, kept_batch_mates,
                                          uniform_length_batches)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 60, (2000,), generator=g).tolist()   # many ties, as in the corpus
    s = NoisySortBatchSampler(lengths, batch_size=16, noise=0.0, seed=0)
    e1, e2 = list(s), list(s)
    full = uniform_length_batches(lengths, batch_size=16)
    # the same sorted lengths cut at the same places: the same widths, the same efficiency
    assert batches_efficiency(lengths, e1) == pytest.approx(batches_efficiency(lengths, full))
    assert len(s) == len(full)
    assert kept_batch_mates(e1, e2) < 0.9          # ties are broken afresh every epoch
    assert kept_batch_mates(full, full) == 1.0
    # more noise: more mixing, more padding
    loud = NoisySortBatchSampler(lengths, batch_size=16, noise=0.5, seed=0)
    l1, l2 = list(loud), list(loud)
    assert kept_batch_mates(l1, l2) < kept_batch_mates(e1, e2)
    assert batches_efficiency(lengths, l1) < batches_efficiency(lengths, e1)
    with pytest.raises(ValueError, match="noise"):
        NoisySortBatchSampler(lengths, batch_size=16, noise=-0.1)


def test_kept_batch_mates_by_hand():
    from course_lib.core.batching import kept_batch_mates
    assert kept_batch_mates([[0, 1], [2, 3]], [[1, 0], [3, 2]]) == 1.0
    assert kept_batch_mates([[0, 1], [2, 3]], [[0, 1], [2], [3]]) == 0.5
    assert kept_batch_mates([[0, 1, 2]], [[0, 1], [2]]) == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    with pytest.raises(ValueError, match="two or more"):
        kept_batch_mates([[0], [1]], [[0, 1]])
