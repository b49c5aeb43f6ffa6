"""The order-free baseline and the headroom breakdown, against hand computations."""
import json
from pathlib import Path

import pytest
import torch

from course_lib.core.bow import BagOfWords, train_bag_of_words
from course_lib.core.data import RULES, CorpusConfig, load_corpus
from course_lib.tools.headroom import LENGTH_BINS, LessonRecipes, accuracy_by_rule, rule_table
from course_lib.distill.transfer import RECIPE


def test_bag_of_words_is_the_mean_of_word_weights_and_ignores_order_and_padding():
    torch.manual_seed(0)
    m = BagOfWords(10)
    torch.nn.init.normal_(m.weights.weight)
    with torch.no_grad():
        m.weights.weight[0].zero_()
        m.bias.copy_(torch.tensor([0.5, -0.5]))
    ids = torch.tensor([[3, 4, 4, 7]])
    hand = m.weights.weight[[3, 4, 4, 7]].mean(0) + m.bias
    assert torch.allclose(m(ids), hand[None], atol=1e-6)
    assert torch.allclose(m(ids[:, [2, 0, 3, 1]]), hand[None], atol=1e-6)   # order-free
    padded = torch.tensor([[3, 4, 4, 7, 0, 0]])
    assert torch.allclose(m(padded, padded != 0), hand[None], atol=1e-6)
    with pytest.raises(ValueError, match="vocab_size"):
        BagOfWords(0)


def test_bag_of_words_reads_plain_reviews_but_not_negation():
    corpus = load_corpus()
    model, scores = train_bag_of_words(corpus)
    by_rule = accuracy_by_rule(model, corpus.test)
    assert by_rule["plain"]["accuracy"] > 0.9       # the adjectives alone decide plain reviews
    assert by_rule["negated"]["accuracy"] < 0.6     # "not good" looks like "good" without order
    assert 0.55 < scores["test"] < 0.72


def test_accuracy_by_rule_counts_each_review_under_each_of_its_rules(monkeypatch):
    corpus = load_corpus(CorpusConfig(n_test=300), scale=1.0)
    ds = corpus.test
    # A fake predict: correct exactly on reviews that contain "negated".
    def fake_predict(model, loader, device="cpu"):
        idx = torch.arange(len(ds))
        right = torch.tensor([r.label if "negated" in r.rules else 1 - r.label for r in ds.reviews])
        return torch.nn.functional.one_hot(right, 2).float(), idx
    monkeypatch.setattr("course_lib.tools.headroom.predict", fake_predict)
    out = accuracy_by_rule(None, ds)
    assert out["negated"]["accuracy"] == 1.0
    assert out["plain"]["accuracy"] == 0.0
    n_neg = sum("negated" in r.rules for r in ds.reviews)
    assert out["negated"]["n"] == n_neg
    assert out["all"]["accuracy"] == pytest.approx(n_neg / len(ds))
    assert out["all"]["n"] == len(ds)
    assert sum(out[name]["n"] for _, _, name in LENGTH_BINS) == len(ds)
    assert set(out) <= {"all", *RULES, *(n for _, _, n in LENGTH_BINS)}
    table = rule_table({"a": out, "b": out})
    assert "| negated |" in table and "100.0%" in table


def parameters(nb: str) -> dict:
    """The literal knobs of a notebook's parameters cell (smoke/full values resolved to full)."""
    import ast
    cells = json.loads((Path(__file__).parents[1] / "notebooks"
                        / f"{nb}.ipynb").read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    values = {}
    for line in "".join(cell["source"]).splitlines():
        if "=" not in line or line.startswith(("#", "import", "SMOKE")):
            continue
        names, _, rest = line.partition("=")
        expr, _, comment = rest.partition("#")
        if expr.strip() == "None" and "full:" in comment:
            expr = comment.split("full:")[1].strip()[:-1]   # drop the closing "]"
        value = ast.literal_eval(expr.strip())
        targets = [n.strip() for n in names.split(",")]
        for t, v in zip(targets, value if len(targets) > 1 else [value]):
            values[t] = v
    return values


def test_headroom_recipes_are_the_lessons_defaults():
    r = LessonRecipes()
    p06, p00, p04 = (parameters("06_distillation"), parameters("00_welcome"),
                     parameters("04_mixed_precision"))
    assert (r.distill_steps, r.distill_batch) == (p06["STEPS"], p06["BATCH"]) == (
        RECIPE["steps"], RECIPE["batch_size"])
    assert (r.temperature, r.alpha) == (p06["TEMPERATURE"], p06["ALPHA"]) == (
        RECIPE["temperature"], RECIPE["alpha"])
    assert (r.first_run_preset, r.first_run_epochs, r.first_run_lr) == (
        p00["TRAIN_PRESET"], p00["TRAIN_EPOCHS"], p00["TRAIN_LR"])
    assert (r.reg_steps, r.reg_length, r.reg_scale) == (p04["REG_STEPS"], p04["REG_LENGTH"],
                                                        p04["CORPUS_SCALE"])


def test_headroom_reads_the_students_from_lesson_06s_evidence():
    from course_lib.tools.evidence import EVIDENCE_DIR
    from course_lib.tools.headroom import student_runs
    if not (EVIDENCE_DIR / "distillation_transfer.json").exists():
        pytest.skip("distillation_transfer not committed yet")
    runs = student_runs(recipes=LessonRecipes())
    assert len(runs["scratch"]) == len(runs["distilled"]) >= 4
    with pytest.raises(ValueError, match="not lesson 06's recipe"):
        student_runs(recipes=LessonRecipes(distill_steps=800))
