"""course_lib.packing.order: the arms of lesson 02's convergence check."""
import pytest
import torch

from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.packing import order


def test_the_sorted_arm_runs_short_to_long_every_epoch_and_the_bucketed_one_reshuffles():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 200, (96,), generator=g).tolist()
    sorted_arm = order.sampler("sorted, no shuffle", lengths, batch_size=8, seed=0)
    first, second = list(sorted_arm), list(sorted_arm)
    widths = [max(lengths[i] for i in b) for b in first]
    assert first == second and widths == sorted(widths)           # the sawtooth: same order, ascending
    bucketed = order.sampler("bucketed, shuffled", lengths, batch_size=8, seed=0)
    assert list(bucketed) != list(bucketed)                        # a new order each epoch
    for arm in order.ARMS:                                         # every review once per epoch
        flat = [i for b in order.sampler(arm, lengths, batch_size=8, seed=1) for i in b]
        assert sorted(flat) == list(range(96)), arm
    with pytest.raises(ValueError, match="arm must be one of"):
        order.sampler("random", lengths, batch_size=8, seed=0)


def test_train_arm_trains_on_the_arms_batches_and_checks_its_lengths():
    corpus = load_corpus(CorpusConfig(n_test=64), scale=0.02)
    model, hist = order.train_arm(corpus.train, corpus.train.lengths, "sorted, no shuffle",
                                  vocab_size=len(corpus.vocab), seed=0, epochs=1, batch_size=16)
    assert len(hist.step_loss) == -(-len(corpus.train) // 16)
    with pytest.raises(ValueError, match="one entry per review"):
        order.train_arm(corpus.train, corpus.train.lengths[:-1], "sorted, no shuffle",
                        vocab_size=len(corpus.vocab), seed=0, epochs=1)
