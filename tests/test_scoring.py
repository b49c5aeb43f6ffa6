"""course_lib.measure.scoring: a score lines up with the dataset's order whatever order the loader
batches in; the sparsity plot draws what the pruning report says."""
import matplotlib

matplotlib.use("Agg")

import torch

from course_lib.pruning import masks as pruning
from course_lib.core.batching import make_loader
from course_lib.core.data import load_corpus
from course_lib.core.model import build_model
from course_lib.ui.plots import new_figure, sparsity_bars
from course_lib.measure.scoring import score


def test_score_matches_a_review_by_review_prediction_despite_bucketing():
    corpus = load_corpus(scale=0.02)
    model = build_model(len(corpus.vocab), preset="student", seed=0).eval()
    test = corpus.test
    labels = torch.tensor([r.label for r in test.reviews])
    bucketed = make_loader(test, batch_size=8, shuffle=False)      # sorts by length: not dataset
                                                                   # order
    scored = score(model, bucketed, labels, device="cpu")
    by_hand = []
    with torch.no_grad():
        for i in range(len(test)):
            item = next(iter(make_loader(type(test)([test.reviews[i]], corpus.vocab), batch_size=1,
                                         shuffle=False)))
            by_hand.append(int(model(item["input_ids"], item["attention_mask"]).argmax(-1))
                           == test.reviews[i].label)
    assert scored.correct == by_hand
    assert scored.accuracy == sum(by_hand) / len(by_hand)


def test_sparsity_bars_draw_one_bar_per_tensor_at_its_sparsity():
    model = build_model(40, preset="student", seed=0)
    report = pruning.prune_unstructured(model, amount=0.5, scope="layer")
    fig, ax = new_figure()
    sparsity_bars(report, ax=ax, title="t")
    heights = [p.get_height() for p in ax.patches]
    assert heights == [r["sparsity"] for r in report] and ax.get_title() == "t"


def test_one_rounding_for_an_accuracy_from_a_count_or_a_float32_manifest():
    import pytest

    from course_lib.measure.scoring import percent
    count, manifest = 1987 / 2000, float(torch.tensor(1987 / 2000, dtype=torch.float32))
    assert format(count, ".1%") != format(manifest, ".1%")          # the old two roundings
    assert percent(count) == percent(manifest) == "99.35%"
    assert percent(1.0) == "100.00%" and percent(0.0) == "0.00%"
    with pytest.raises(ValueError, match="accuracy must be in"):
        percent(1.5)
