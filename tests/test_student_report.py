"""Lesson 06's tables and timings: checked against hand computations."""
import pytest

from course_lib.distill import report as sr
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.measure.verdicts import speedup


def _evidence():
    """Two seeds, every cell of distill.transfer: accuracies chosen so each effect is known."""
    acc = {("scratch", 0): [0.880, 0.890], ("soft", 0): [0.885, 0.893],
           ("hard", 2000): [0.900, 0.910], ("soft", 2000): [0.905, 0.915],
           ("hard", 12000): [0.920, 0.925], ("soft", 12000): [0.910, 0.914]}
    runs = [{"student": "small", "arm": a, "transfer": n, "seed": k, "test_accuracy": v}
            for (a, n), vals in acc.items() for k, v in enumerate(vals)]
    runs += [{"student": "half_from_teacher", "arm": "scratch", "transfer": 0, "seed": 0,
              "test_accuracy": 0.95}]
    return {"recipe": {"teacher_test_accuracy": 0.99}, "runs": runs}


def test_from_evidence_pairs_each_arm_by_seed_against_a_hand_computation():
    from course_lib.distill import transfer
    red = transfer.from_evidence(_evidence())
    assert red["sizes"] == [0, 2000, 12000] and red["teacher"] == 0.99
    assert red["soft_vs_hard"][0].value == pytest.approx(0.4)        # (0.5 + 0.3) / 2, vs scratch
    assert (red["soft_vs_hard"][2000].value == pytest.approx(0.5)
            and red["soft_vs_hard"][2000].se == 0)
    assert red["soft_vs_hard"][12000].value == pytest.approx(-1.05)  # (-1.0 - 1.1) / 2
    assert red["soft_vs_hard"][12000].se == pytest.approx(0.05)      # sd 0.0707 / sqrt 2
    assert red["hard_vs_scratch"][12000].value == pytest.approx(3.75)
    assert 0 not in red["hard_vs_scratch"]
    assert red["gap"]["soft", 12000].value == pytest.approx(-7.8)
    assert red["mean"]["scratch", 0].value == pytest.approx(88.5)
    with pytest.raises(ValueError, match="no runs of student 'half'"):
        transfer.from_evidence(_evidence(), "half")


def test_transfer_markdown_names_each_size_and_the_call():
    from course_lib.distill import transfer
    md = sr.transfer_markdown(transfer.from_evidence(_evidence()))
    rows = [line for line in md.splitlines()[2:] if line.startswith("|")]
    assert "soft − hard is soft targets against scratch" in md
    assert [r.split("|")[1].strip() for r in rows] == ["0", "2,000", "12,000"]
    assert "+0.50 (a gain)" in rows[1]
    assert "-1.05 ± 0.64 (a loss)" in rows[2] and rows[0].endswith("– |")
    fig = sr.transfer_figure(transfer.from_evidence(_evidence()), live={("soft", 12000): 0.9})
    assert fig.axes[0].get_xticklabels()[2].get_text() == "12,000"


def test_split_seconds_times_every_model_per_repeat_and_rejects_one_repeat():
    corpus = load_corpus(CorpusConfig(n_train=8, n_val=4, n_test=40, n_transfer=4, max_length=64))
    a = build_model(len(corpus.vocab), preset="student", seed=0).eval()
    b = build_model(len(corpus.vocab), preset="teacher", seed=0).eval()
    calls = []
    a_hook = a.register_forward_hook(lambda *_: calls.append("a"))
    secs = sr.split_seconds({"a": a, "b": b}, corpus.test, batch_size=8, repeats=2, max_batches=3)
    a_hook.remove()
    assert set(secs) == {"a", "b"} and all(len(v) == 2 and min(v) > 0 for v in secs.values())
    assert len(calls) == 1 + 2 * 3                     # one warm-up, then repeats x batches
    assert speedup(secs["b"], secs["a"]).dof == 1
    with pytest.raises(ValueError, match="repeats"):
        sr.split_seconds({"a": a}, corpus.test, repeats=1)


def test_seeds_for_interval_solves_students_t_by_hand():
    import math
    from course_lib.measure.verdicts import seeds_for_interval, t_quantile
    d = [1.0, 3.0]                      # sd = sqrt(2)
    n = seeds_for_interval(d, 1.0)
    assert t_quantile(0.975, n - 1) * math.sqrt(2) / math.sqrt(n) <= 1.0
    assert t_quantile(0.975, n - 2) * math.sqrt(2) / math.sqrt(n - 1) > 1.0
    assert n == 11                      # t(0.975, 10) = 2.228: 2.228 * 1.414 / 3.317 = 0.95
    assert seeds_for_interval([2.0, 2.0], 1.0) == 2
    with pytest.raises(ValueError, match="half_width"):
        seeds_for_interval([1.0], 1.0)


def test_from_evidence_gives_the_seeds_a_1_point_interval_needs():
    from course_lib.distill import transfer
    from course_lib.measure.verdicts import seeds_for_interval
    red = transfer.from_evidence(_evidence())
    assert red["seeds_for_1pt"][12000] == seeds_for_interval([-1.0, -1.1], 1.0) == 2
    assert red["seeds_for_1pt"][0] == seeds_for_interval([0.5, 0.3], 1.0)
