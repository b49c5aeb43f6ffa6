"""Lesson 15's labelled task and int8 recipes: the standard library's docstrings by topic, the
logistic head against a hand-made separable case, the paired scores by hand, and PyTorch's dynamic
int8 against the arithmetic written out (7-bit activations, and the 8th bit on this CPU)."""
import pytest
import torch
from torch import nn

from course_lib.quant.dynamic import DYNAMIC_RECIPES, quantize_dynamic_int8, recipe_sweep
from course_lib.quant.kernel import (emulate_dynamic_linear, int8_accumulation,
                                    overflowed_with_8_bits, saturation_probe)
from course_lib.real_model import task as T


def test_topics_come_from_their_modules_and_split_by_docstring(tmp_path):
    (tmp_path / "mailbox.py").write_text(
        '"""Read a mailbox of messages. Each message has a sender."""\n'
        'def f():\n    """Return the next message in the box."""\n')
    pkg = tmp_path / "asyncio"
    (pkg / "tests").mkdir(parents=True)
    (pkg / "events.py").write_text(
        '"""Run the event loop until it stops. Shared text here. Wait for a future."""\n')
    (pkg / "tests" / "test_x.py").write_text('"""A test module that must not be read."""\n')
    (tmp_path / "shared.py").write_text('"""Shared text here."""\n')
    got = T.stdlib_topics(topics={"mail": ("mailbox", "shared"), "async": ("asyncio", "gone")},
                          stdlib=tmp_path, min_words=3)
    assert got.topics == ("mail", "async")
    assert dict(zip(got.sentences, got.labels)) == {
        "Read a mailbox of messages.": 0, "Each message has a sender.": 0,
        "Return the next message in the box.": 0, "Run the event loop until it stops.": 1,
        "Wait for a future.": 1}
    assert got.groups[0] == got.groups[1] != got.groups[2]          # one docstring, one group
    folds = got.folds(2, seed=0)
    assert sorted(folds[0] + folds[1]) == list(range(len(got)))
    assert {got.groups[i] for i in folds[0]}.isdisjoint({got.groups[i] for i in folds[1]})
    with pytest.raises(ValueError, match="number of groups"):
        got.folds(len(set(got.groups)) + 1)
    with pytest.raises(ValueError, match="topic 'none'"):
        T.stdlib_topics(topics={"mail": ("mailbox",), "none": ("gone",)}, stdlib=tmp_path)
    with pytest.raises(ValueError, match="per_topic"):
        T.stdlib_topics(per_topic=1)


def test_the_real_standard_library_gives_every_topic_enough_sentences():
    got = T.stdlib_topics(per_topic=40, seed=1)
    assert got.counts() == {t: 40 for t in T.TOPICS}
    assert got == T.stdlib_topics(per_topic=40, seed=1)                 # seeded: the same sample
    assert len(set(got.sentences)) == len(got)


def test_the_head_separates_what_is_separable_and_checks_its_input():
    g = torch.Generator().manual_seed(0)
    centres = 4 * torch.eye(3, 8)
    y = torch.arange(3).repeat(40)
    x = centres[y] + 0.5 * torch.randn(120, 8, generator=g)
    head = T.fit_probe(x, y, n_classes=3)
    assert (head(x).argmax(-1) == y).all()
    # the closed form against the normal equations solved by hand (intercept as a column)
    xb = torch.cat([x.double(), torch.ones(120, 1, dtype=torch.double)], 1)
    a = xb.T @ xb + 1.0 * torch.diag(torch.tensor([1.0] * 8 + [0.0], dtype=torch.double))
    wb = torch.linalg.solve(a, xb.T @ torch.nn.functional.one_hot(y, 3).double())
    assert torch.allclose(head.weight.double(), wb[:8].T, atol=1e-5)
    assert torch.allclose(head.bias.double(), wb[8], atol=1e-5)
    with pytest.raises(ValueError, match="n_classes"):
        T.fit_probe(x, y, n_classes=2)
    with pytest.raises(ValueError, match="alpha"):
        T.fit_probe(x, y, n_classes=3, alpha=0.0)


def test_scores_are_the_cross_validated_paired_difference_by_hand():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(2).repeat(50)
    ref = torch.nn.functional.one_hot(y, 4).float() * 3 + 0.1 * torch.randn(100, 4, generator=g)
    worse = ref.clone()
    flip = [0, 1, 2, 3, 4, 60, 61, 62, 63, 64]     # ten rows, five per fold, moved to the other
                                                   # class
    worse[flip] = torch.nn.functional.one_hot(1 - y[flip], 4).float() * 3
    folds = [list(range(50)), list(range(50, 100))]
    s = T.task_scores({"FP32": ref, "worse": worse}, y, folds=folds, reference="FP32", n_classes=2)
    assert s["FP32"]["accuracy"] == 1.0 and s["FP32"]["diff_points"] == 0.0
    d = torch.tensor([-100.0] * 10 + [0.0] * 90)
    assert s["worse"]["n"] == 100
    assert s["worse"]["accuracy"] == pytest.approx(0.9)
    assert s["worse"]["diff_points"] == pytest.approx(-10.0)
    assert s["worse"]["diff_se"] == pytest.approx(float(d.std() / 100 ** 0.5))
    assert s["worse"]["ratio"] == pytest.approx(0.9) and s["worse"]["changed"] == pytest.approx(0.1)
    assert s["worse"]["refit_accuracy"] >= 0.9     # its own head learns from the moved rows too
    sweep = recipe_sweep({name: s["worse"] for name in DYNAMIC_RECIPES})
    assert set(sweep) == {"per-tensor weights", "per-channel weights"}
    assert sweep["per-tensor weights"][7].value == pytest.approx(-10.0)
    with pytest.raises(ValueError, match="disjoint"):
        T.task_scores({"FP32": ref}, y, folds=[[0, 1], [1, 2]], reference="FP32", n_classes=2)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamic_int8_computes_the_arithmetic_written_out(per_channel):
    torch.manual_seed(0)
    lin = nn.Linear(64, 32)
    x = torch.randn(16, 64)
    w, b = lin.weight.detach(), lin.bias.detach()
    err = lambda y, **kw: float(  # noqa: E731
        (y - emulate_dynamic_linear(x, w, b, per_channel=per_channel, **kw)).abs().max())
    with torch.no_grad():
        y7 = quantize_dynamic_int8(nn.Sequential(lin), per_channel=per_channel)(x)
        y8 = quantize_dynamic_int8(nn.Sequential(lin), per_channel=per_channel,
                                   activation_bits=8)(x)
        fp32_gap = float((y7 - lin(x)).abs().max())
    assert err(y7, activation_bits=7) < 0.2 * fp32_gap        # PyTorch's default: 7-bit activations
    # the 8th bit: exact int32 sums (VNNI) or pairs saturating in int16 (AVX2): one must match
    assert min(err(y8, activation_bits=8),
               err(y8, activation_bits=8, saturate_pairs=True)) < 0.2 * fp32_gap
    assert err(y8, activation_bits=7) > 0.2 * fp32_gap          # and it is not the 7-bit result
    with pytest.raises(ValueError, match="activation_bits"):
        quantize_dynamic_int8(nn.Sequential(lin), activation_bits=4)


def test_the_cpus_int8_sums_are_one_of_the_two_written_out():
    layer, x = saturation_probe()
    got = int8_accumulation(layer, x)
    assert got["sums"] in ("int32", "int16 pairs")
    best, other = sorted(got["max_difference"].values())
    # one of the two is the kernel's arithmetic; the other is far off (the probe saturates pairs)
    assert best < 1e-3 * float(layer(x).detach().abs().max()) < other
    # small integers everywhere (the one large weight meets a zero activation): no pair overflows
    torch.manual_seed(0)
    quiet = nn.Linear(64, 8)
    with torch.no_grad():
        quiet.weight.copy_(0.01 * torch.randn(8, 64))
        quiet.weight[0, 1] = 1.0
    x = torch.rand(4, 64)
    x[:, 1] = 0.0
    assert int8_accumulation(quiet, x)["sums"] == "either"


def test_cluster_standard_error_and_pooling_by_hand():
    v = torch.tensor([1.0, 1.0, -1.0, -1.0, 0.0, 0.0])
    assert T.mean_se(v) == pytest.approx(float(v.std() / 6 ** 0.5))
    # clusters {0,1}, {2,3}, {4,5}: deviations summed per cluster 2, -2, 0; g/(g-1) = 3/2
    assert T.mean_se(v, torch.tensor([0, 0, 1, 1, 2, 2])) == pytest.approx((8 * 1.5) ** 0.5 / 6)
    with pytest.raises(ValueError, match="2 clusters"):
        T.mean_se(v, torch.zeros(6))
    assert T.mean_se(torch.tensor([2.0])) == float("inf")   # one value: noise unknown, as
                                                            # mean_and_se
    runs = [{"scores": {"x": {"diff_points": d, "diff_se": 0.3, "ratio": 0.98, "accuracy": 0.7}}}
            for d in (-1.0, -2.0, -1.5)]
    p = T.pool_runs(runs, "x")
    assert p["diff_points"] == pytest.approx(-1.5)
    # test noise kept, heads' spread added
    assert p["diff_se"] == pytest.approx((0.09 + 0.25 / 3) ** 0.5)
    assert p["between_sd"] == pytest.approx(0.5) and p["runs"] == 3


def test_overflow_check_sees_the_probe_and_not_small_integers():
    layer, x = saturation_probe()
    torch.manual_seed(0)
    quiet = nn.Linear(64, 8)                  # small integer weights but one, which meets a zero
    with torch.no_grad():
        quiet.weight.copy_(0.01 * torch.randn(8, 64))
        quiet.weight[0, 1] = 1.0
    small = torch.rand(4, 64)
    small[:, 1] = 0.0
    assert overflowed_with_8_bits(quiet, small) < 1e-4
    sums = int8_accumulation(layer, x)["sums"]
    assert (overflowed_with_8_bits(layer, x) > 0.1) == (sums == "int16 pairs")
