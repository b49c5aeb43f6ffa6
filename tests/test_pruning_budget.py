"""Lesson 05's evidence over the fine-tune budget (``pruning.budget``) and the CSR size of a
pruned model (``masks.sparse_model_bytes``), against hand counts."""
import pytest
import torch

from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model, count_parameters
from course_lib.pruning import budget
from course_lib.pruning import masks as pruning


@pytest.fixture(scope="module")
def tiny():
    corpus = load_corpus(CorpusConfig(n_train=32, n_val=8, n_test=16, n_transfer=4, max_length=48))
    teacher = build_model(len(corpus.vocab), preset="teacher", seed=0, d_model=32, n_heads=4,
                          d_ff=64).eval()
    return corpus, teacher


def test_each_variant_removes_what_it_says_and_leaves_the_baseline(tiny):
    corpus, teacher = tiny
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    layers = budget.build_variant(teacher, "layers")
    assert layers.cfg.n_layers == teacher.cfg.n_layers // 2
    assert budget.build_variant(teacher, "heads50").cfg.n_heads == teacher.cfg.n_heads // 2
    assert budget.build_variant(teacher, "ffn90").cfg.d_ff == teacher.cfg.d_ff - round(0.9 * 64)
    masked = budget.build_variant(teacher, "masked50")
    assert pruning.global_sparsity([r for r in pruning.sparsity_report(masked) if r["pruned"]]) \
        == pytest.approx(0.5, abs=0.01)
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in before.items())
    with pytest.raises(ValueError, match="name must be one of"):
        budget.build_variant(teacher, "rows")


def test_run_fine_tunes_every_cell_and_from_evidence_matches_a_hand_computation(tiny):
    corpus, teacher = tiny
    body = budget.run(corpus, teacher, seeds=(0, 1), budgets=(0, 2), variants=("layers", "ffn90"),
                      batch_size=8, log=lambda _: None)
    cells = [(r["variant"], r["steps"], r["seed"]) for r in body["runs"]]
    assert cells == [("layers", 0, None), ("layers", 2, 0), ("layers", 2, 1),
                     ("ffn90", 0, None), ("ffn90", 2, 0), ("ffn90", 2, 1)]
    red = budget.from_evidence(body)
    dense = body["recipe"]["dense_test_accuracy"]
    label = budget.VARIANTS["layers"]
    cut = next(r["test_accuracy"] for r in body["runs"]
               if r["variant"] == "layers" and r["steps"] == 0)
    assert red["change"][label][0].value == pytest.approx(100 * (cut - dense))
    zero = next(r for r in body["runs"] if r["variant"] == "layers" and r["steps"] == 0)
    from course_lib.measure.scoring import score
    from course_lib.measure.verdicts import paired_accuracy_change
    from course_lib.core.batching import make_loader
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    labels = torch.tensor([r.label for r in corpus.test.reviews])
    want = paired_accuracy_change(score(teacher, test, labels).correct,
                                  score(budget.build_variant(teacher, "layers"), test,
                                        labels).correct)
    assert red["change"][label][0].se == pytest.approx(want.se) == pytest.approx(zero["paired_se"])
    tuned = [100 * (r["test_accuracy"] - dense) for r in body["runs"]
             if r["variant"] == "layers" and r["steps"] == 2]
    ses = [r["paired_se"] for r in body["runs"] if r["variant"] == "layers" and r["steps"] == 2]
    assert len(ses) == 2                                  # every run keeps its test-set error
    from course_lib.measure.verdicts import over_seeds
    assert red["change"][label][2] == pytest.approx(over_seeds(tuned, ses, test_dof=want.dof))
    assert red["seeds"] == 2 and red["budgets"] == [0, 2]
    with pytest.raises(ValueError, match="budgets must be >= 0"):
        budget.run(corpus, teacher, budgets=(-1,))


def test_sparse_model_bytes_counts_csr_indices_and_the_dense_rest(tiny):
    _, teacher = tiny
    dense = pruning.sparse_model_bytes(teacher)
    assert dense["dense_bytes"] == 4 * count_parameters(teacher) and dense["removed"] == 0
    assert dense["ratio"] > 2            # every value pays an 8-byte index on top of its 4 bytes
    zero = pruning.copy_model(teacher)
    owned = pruning.prunable(zero, include_out_proj=True, include_head=True)
    with torch.no_grad():
        for _, m, p in owned:
            getattr(m, p).zero_()
    got = pruning.sparse_model_bytes(zero)
    n_owned = sum(getattr(m, p).numel() for _, m, p in owned)
    rows = sum(getattr(m, p).shape[0] + 1 for _, m, p in owned)   # CSR keeps a pointer per row
    assert got["removed"] == pytest.approx(n_owned / count_parameters(teacher))
    assert got["csr_bytes"] == 4 * (count_parameters(teacher) - n_owned) + 8 * rows


def test_one_noise_model_over_the_whole_budget_curve():
    """With every run's paired test-set error stored, each point's error holds the test set's
    noise and the seeds' spread together (verdicts.over_seeds, by hand here); budget 0 (one
    model) keeps the test set's alone, never an error of a different kind."""
    import math

    from course_lib.measure.verdicts import over_seeds
    from course_lib.pruning import budget

    runs = [{"variant": "layers", "steps": 0, "seed": None, "test_accuracy": 0.90,
             "paired_se": 0.6, "paired_dof": 1999}]
    runs += [{"variant": "layers", "steps": 40, "seed": s, "test_accuracy": a, "paired_se": 0.3,
              "paired_dof": 1999} for s, a in enumerate((0.98, 0.97, 0.99))]
    ev = {"recipe": {"dense_test_accuracy": 0.99, "variants": {"layers": "layers"},
                     "budgets": [0, 40]}, "runs": runs}
    change = budget.from_evidence(ev)["change"]["layers"]
    assert change[0].value == pytest.approx(-9.0) and change[0].se == pytest.approx(0.6)
    d = [-1.0, -2.0, 0.0]
    by_hand = math.sqrt(0.3 ** 2 + 1.0 / 3)            # test noise + seed variance / seeds
    assert change[40].value == pytest.approx(-1.0) and change[40].se == pytest.approx(by_hand)
    assert change[40] == pytest.approx(over_seeds(d, [0.3] * 3, test_dof=1999))
