"""Lesson 02's strategies by name: plans, efficiency, loaders and the timed passes."""
import pytest
import torch
from torch.utils.data import Subset

from course_lib.packing import strategies as S
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.core.padding import batches_efficiency


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(CorpusConfig(n_train=120, n_val=4, n_test=4, n_transfer=4, max_length=96))


def test_every_strategy_covers_the_epoch_and_reports_what_its_batches_hold(corpus):
    lengths, cfg = corpus.train.lengths, S.StrategyConfig(batch_size=8, max_tokens=400, pack_len=96)
    table = S.epoch_table(lengths, cfg)
    assert list(table) == list(S.STRATEGIES)
    for name in S.STRATEGIES:
        plan = list(S.sampler(name, lengths, cfg, seed=3))
        assert sorted(i for b in plan for i in b) == list(range(len(lengths))), name
        assert 0 < table[name]["efficiency"] <= 1 and 0 <= table[name]["kept_batch_mates"] <= 1
    # by hand: real tokens over batch size x widest, padded to 512 for fixed
    plan = S.sampler("fixed 512", lengths, cfg, seed=0)
    real = sum(lengths)
    assert table["fixed 512"]["efficiency"] == pytest.approx(real / (len(lengths) * 512))
    assert table["dynamic"]["efficiency"] == pytest.approx(
        real / sum(len(b) * max(lengths[i] for i in b) for b in plan))
    assert table["uniform length"]["kept_batch_mates"] == 1.0          # the same batches each epoch
    assert table["uniform length"]["efficiency"] >= table["noisy sort"]["efficiency"] - 1e-9
    assert table["noisy sort"]["efficiency"] > table["dynamic"]["efficiency"]
    with pytest.raises(ValueError, match="strategy"):
        S.sampler("sorted-ish", lengths, cfg)


def test_loaders_keep_labels_with_their_reviews_and_the_passes_run(corpus):
    idx = list(range(0, 120, 3))
    data, lengths = Subset(corpus.train, idx), [corpus.train.lengths[i] for i in idx]
    cfg = S.StrategyConfig(batch_size=8, max_tokens=400, pack_len=96)
    model = build_model(len(corpus.vocab), preset="student", seed=0)
    for name in S.STRATEGIES:
        batches = list(S.loader(name, data, lengths, cfg))
        labels = torch.cat([b["labels"] for b in batches])
        index = torch.cat([b["index"] for b in batches])
        assert sorted(index.tolist()) == idx, name
        assert labels.tolist() == [corpus.train[int(i)]["label"] for i in index], name
        plan = [[idx.index(int(i)) for i in b["index"]] for b in batches]
        assert S.collated_efficiency(batches) == pytest.approx(
            S.efficiency(name, lengths, plan, cfg)), name
        if name == "fixed 512":
            assert all(b["input_ids"].shape[1] == 512 for b in batches)
        out = torch.cat([S.forward(model, name, b) for b in batches])
        assert out.shape == (len(idx), 2)
        before = [p.clone() for p in model.parameters()]
        S.training_pass(model, name, batches[:1], precision_name="fp32", device="cpu")()
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), name
        S.inference_pass(model, name, batches[:1], device="cpu")()


def test_width_log_records_each_padded_width(corpus):
    log = S.WidthLog()
    items = [corpus.train[i] for i in range(5)]
    log(items[:2]), log(items[2:])
    assert log.widths == [max(len(it["input_ids"]) for it in items[:2]),
                          max(len(it["input_ids"]) for it in items[2:])]
    assert batches_efficiency([3, 5], [[0, 1]]) == pytest.approx(8 / 10)


def test_grouped_pairs_come_from_each_sampler_and_bigger_pools_pad_less():
    from course_lib.packing.strategies import grouped_vs_random, pool_efficiency
    g = torch.Generator().manual_seed(0)
    lengths = (torch.rand(3000, generator=g) ** 3 * 500 + 8).long().tolist()
    pairs = grouped_vs_random(lengths, batch_size=32, pool=640, n=5, seed=0)
    assert len(pairs) == 5 and all(len(a) <= 32 and len(b) <= 32 for a, b in pairs)
    width = lambda idx: max(lengths[i] for i in idx) - min(lengths[i] for i in idx)   # noqa: E731
    assert sum(map(width, (b for _, b in pairs))) < sum(map(width, (a for a, _ in pairs)))
    effs = [pool_efficiency(lengths, batch_size=32, pool=p) for p in (32, 128, 1024, 3000)]
    assert effs == sorted(effs) and effs[-1] > 0.9 > effs[0]
    with pytest.raises(ValueError, match="pool must be >= batch_size"):
        grouped_vs_random(lengths, batch_size=32, pool=16, n=1)
