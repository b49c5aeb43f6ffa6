import numpy as np
import pytest

from course_lib.core.data import (NEGATORS, POSITIVE, CorpusConfig, Vocab, build_vocab, generate,
                             length_stats, load_corpus)


def score_by_hand(text: str) -> float:
    """An independent re-implementation of the documented label rules, from the words alone."""
    from course_lib.core.data import INTENSIFIERS, NEGATIVE, OPENERS
    values = {**POSITIVE, **NEGATIVE}
    openers = {" ".join(o) for o in OPENERS}
    total = 0.0
    for sent in text.replace("!", ".").split(" . "):
        sent = sent.strip(" .")
        if not any(w in values for w in sent.split()):
            continue
        sign = 1.0
        for op in openers:
            if sent.startswith(op + " "):
                sign, sent = -1.0, sent[len(op) + 1:]
        clause = sent.split(" but ")[-1].split()
        adj = clause[-1]
        v = values[adj]
        if clause[-2] in INTENSIFIERS:
            v *= 2
            if clause[-3] in NEGATORS:
                v = -v
        elif clause[-2] in NEGATORS:
            v = -v
        total += sign * v
    return total


def test_generation_is_deterministic_and_seed_dependent():
    cfg = CorpusConfig()
    a, b = generate(50, cfg=cfg, seed=1), generate(50, cfg=cfg, seed=1)
    c = generate(50, cfg=cfg, seed=2)
    assert a == b
    assert a != c


def test_labels_follow_the_documented_rules():
    for r in generate(300, cfg=CorpusConfig(), seed=3):
        assert score_by_hand(r.text) == pytest.approx(r.score)
        assert r.label == int(r.score > 0)
        assert 1.0 < r.rating < 5.0
        assert abs(r.score) >= CorpusConfig().min_margin


def rules_by_hand(text: str) -> tuple[str, ...]:
    """The rule tags recomputed from the words alone (independent of the generator)."""
    from course_lib.core.data import INTENSIFIERS, OPENERS, RULES
    tags, signs = set(), set()
    for sent in text.replace("!", ".").split(" . "):
        sent = sent.strip(" .")
        if score_by_hand(sent + " .") == 0:
            continue                       # a neutral filler sentence
        signs.add(score_by_hand(sent + " .") > 0)
        for op in (" ".join(o) for o in OPENERS):
            if sent.startswith(op + " "):
                tags.add("opener")
                sent = sent[len(op) + 1:]
        words = sent.split()
        tags |= {"contrast"} if "but" in words else set()
        tags |= {"negated"} if any(w in NEGATORS for w in words) else set()
        tags |= {"intensified"} if any(w in INTENSIFIERS for w in words) else set()
    if len(signs) > 1:
        tags.add("mixed")
    return tuple(r for r in RULES if r in tags) or ("plain",)


def test_rule_tags_match_the_words():
    reviews = generate(400, cfg=CorpusConfig(), seed=4)
    for r in reviews:
        assert r.rules == rules_by_hand(r.text), r.text
    seen = {t for r in reviews for t in r.rules}
    from course_lib.core.data import RULES
    assert seen == set(RULES)   # every tag occurs in a few hundred reviews


def test_lengths_are_heavy_tailed_within_bounds():
    cfg = CorpusConfig()
    lengths = [len(r.text.split()) for r in generate(2000, cfg=cfg, seed=0)]
    s = length_stats(lengths)
    assert cfg.min_length <= min(lengths) and max(lengths) <= cfg.max_length
    assert 50 <= s["median"] <= 80
    assert s["p99"] > 4 * s["median"]   # the long tail the padding lessons need


def test_order_matters_bag_of_words_is_not_enough():
    # "A but B" takes B's sign. Read from the text by hand (the adjective after "but" decides), the
    # label is right for every review; where A and B disagree, swapping the two clauses keeps the
    # bag of words and flips the label: no bag-of-words model can get both right.
    from collections import Counter

    from course_lib.core.data import POSITIVE
    cfg = CorpusConfig(p_contrast=1.0, p_opener=0.0, p_negate=0.0, p_intensify=0.0, max_opinions=1)
    swapped_flips = 0
    for r in generate(200, cfg=cfg, seed=4):
        w = r.text.split()
        i = w.index("but")
        first, second = w[i - 4:i], w[i + 1:i + 5]          # "the NOUN is ADJ" on each side
        assert r.label == int(second[-1] in POSITIVE), r.text
        swapped = w[:i - 4] + second + ["but"] + first + w[i + 5:]
        assert Counter(swapped) == Counter(w)
        swapped_flips += int((first[-1] in POSITIVE) != (second[-1] in POSITIVE))
    assert swapped_flips > 50     # about half the reviews: opposite adjectives are common


def test_vocab_round_trip_and_unknown_words():
    v = Vocab(build_vocab())
    text = generate(1, cfg=CorpusConfig(), seed=0)[0].text
    assert v.decode(v.encode(text)) == text
    assert v.encode("zzzz") == [v.unk_id]
    with pytest.raises(ValueError, match="duplicates"):
        Vocab(["a", "a"])


def test_corpus_splits_and_dataset_items():
    c = load_corpus(scale=0.02)
    item = c.train[0]
    assert set(item) >= {"input_ids", "label", "rating", "length", "index"}
    assert item["length"] == len(item["input_ids"])
    assert len(c.train) == int(CorpusConfig().n_train * 0.02)
    # splits are distinct draws
    assert c.train.reviews[0].text != c.test.reviews[0].text
    labels = np.array([r.label for r in c.test.reviews])
    assert 0.3 < labels.mean() < 0.7


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_train=-1), "n_train"), (dict(min_length=0), "min_length"),
    (dict(p_negate=1.5), "p_negate"), (dict(tokens_per_opinion=0), "tokens_per_opinion")])
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_corpus(CorpusConfig(**kwargs))


def test_bad_scale_and_n():
    with pytest.raises(ValueError, match="scale"):
        load_corpus(scale=0)
    with pytest.raises(ValueError, match="n must"):
        generate(-1, cfg=CorpusConfig(), seed=0)
    with pytest.raises(ValueError, match="empty"):
        length_stats([])


def test_teacher_training_set_extends_the_training_split_without_touching_other_splits():
    from course_lib.core.data import teacher_training_set
    cfg = CorpusConfig(n_train=50, n_val=20, n_test=30, n_transfer=20, n_teacher_extra=40)
    corpus = load_corpus(cfg)
    big = teacher_training_set(corpus)
    assert len(big) == 90
    assert big.reviews[:50] == corpus.train.reviews
    others = {r.text for ds in (corpus.val, corpus.test, corpus.transfer) for r in ds.reviews}
    assert not others & {r.text for r in big.reviews[50:]}
    assert teacher_training_set(corpus).reviews == big.reviews     # deterministic
    # The extra split leaves the lessons' splits as they were.
    assert load_corpus(CorpusConfig(n_train=50, n_val=20, n_test=30, n_transfer=20,
                                    n_teacher_extra=0)).test.reviews == corpus.test.reviews
