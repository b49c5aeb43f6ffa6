import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.batching import BucketBatchSampler
from course_lib.padding import Collate, pad_batch, token_efficiency


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
    assert token_efficiency(pad_batch(seqs)[1]) == pytest.approx(13 / 20)


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
        assert len(flat) == (len(lengths) // bs) * bs or all(len(b) == bs for b in batches)


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
