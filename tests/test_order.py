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
    assert first == second and widths == sorted(widths)           # the sawtooth: same order,
                                                                  # ascending
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


def test_from_evidence_pairs_by_seed_and_counts_the_seeds_a_tolerance_needs():
    runs = [{"epochs": e, "seed": s, "arm": a, "test_accuracy": acc}
            for e, rows in {2: [(0.70, 0.72), (0.80, 0.78), (0.75, 0.79)]}.items()
            for s, pair in enumerate(rows)
            for a, acc in zip(("sorted, no shuffle", "bucketed, shuffled"), pair)]
    ev = {"recipe": {"budgets": [2], "arms": ["sorted, no shuffle", "bucketed, shuffled"]},
          "runs": runs}
    got = order.from_evidence(ev, tolerance=1.0)
    assert got["pairs"][2] == pytest.approx([-2.0, 2.0, -4.0]) and got["seeds"] == 3
    assert got["difference"][2].value == pytest.approx(-4 / 3) and got["difference"][2].dof == 2
    sd = (sum((x + 4 / 3) ** 2 for x in (-2.0, 2.0, -4.0)) / 2) ** 0.5          # by hand
    # by hand: t(0.975, 37) = 2.0262 gives 2.0262 * sd / sqrt(38) = 1.004 > 1 point;
    # t(0.975, 38) = 2.0244 gives 2.0244 * sd / sqrt(39) = 0.990: 39 seeds (a normal 1.96 says 36)
    assert sd == pytest.approx(3.05505, abs=1e-5) and got["seeds_needed"][2] == 39
    assert got["mean"][2, "bucketed, shuffled"] == pytest.approx((0.72 + 0.78 + 0.79) / 3)
    with pytest.raises(ValueError, match="two arms"):
        order.from_evidence({"recipe": {"budgets": [2], "arms": ["a"]}, "runs": []})
