"""The course corpus: synthetic product reviews, generated from a seed, no download.

Why synthetic: the course must run offline, in seconds, on a laptop, and every lesson needs
the same texts. Why not trivially easy: a bag of words cannot solve it. The label follows
rules a reader can check by hand, and three of them depend on word order and context:

1. Each opinion phrase has a value: the adjective's strength (+-1 or +-2).
2. An intensifier ("very", "really", ...) right before the adjective doubles it.
3. A negator ("not", "never", "hardly") before the phrase flips its sign, and so does a
   clause opener such as "i do n't think" several tokens earlier.
4. In "X but Y" only the clause after "but" counts.

The review's score is the sum of its phrase values; the label is ``score > 0`` (positive) and
the regression target is a star rating ``1 + 4 * sigmoid(score / 2)`` in (1, 5).

Lengths: the number of tokens is drawn from a log-normal distribution with median 60 and
sigma 0.75, truncated to [8, 512]. That is a stated modelling choice, not a fit to a named
dataset: it gives the long right tail of real review text (most reviews are short, a few run
to hundreds of tokens), which is what lessons 01-02 on padding and batching need.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from course_lib.core.vocab import (FILLER, INTENSIFIERS, NEGATIVE, NEGATORS, NOUNS,  # noqa: F401
                                   OPENERS, PAD, POSITIVE, PUNCT, UNK, Vocab, build_vocab)


@dataclass(frozen=True)
class CorpusConfig:
    """How many reviews, how long, and how hard. Defaults are what every lesson uses."""

    n_train: int = 4000       # labelled training reviews
    n_val: int = 1000         # model selection
    n_test: int = 2000        # reported accuracy
    n_transfer: int = 12000   # unlabelled reviews a teacher can label (lesson 06)
    n_teacher_extra: int = 12000  # labelled reviews only the baseline (the teacher) trains on,
                                  # with the training split: teachers get the bigger dataset.
                                  # Generated on demand (``teacher_training_set``), not by
                                  # load_corpus: no lesson needs them.
    median_length: float = 60.0   # tokens; log-normal median
    length_sigma: float = 0.75    # log-normal sigma: the heavy tail
    min_length: int = 8
    max_length: int = 512
    p_negate: float = 0.25        # chance an opinion phrase is negated
    p_opener: float = 0.1         # chance a sentence starts with a distant negation
    p_contrast: float = 0.2       # chance an opinion sentence is "X but Y"
    p_intensify: float = 0.3      # chance an adjective gets an intensifier
    tokens_per_opinion: float = 40.0  # one opinion sentence per this many tokens (Poisson)
    max_opinions: int = 2         # long reviews are mostly neutral text around a few opinions
    min_margin: float = 1.0       # |score| below this is redrawn: labels stay decidable
    seed: int = 0

    def validate(self) -> None:
        for name in ("n_train", "n_val", "n_test", "n_transfer", "n_teacher_extra"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(f"min_length must be in [1, max_length={self.max_length}], "
                             f"got {self.min_length}")
        if self.median_length <= 0 or self.length_sigma <= 0:
            raise ValueError("median_length and length_sigma must be > 0")
        if self.tokens_per_opinion <= 0:
            raise ValueError(f"tokens_per_opinion must be > 0, got {self.tokens_per_opinion}")
        for name in ("p_negate", "p_opener", "p_contrast", "p_intensify"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not isinstance(self.max_opinions, int) or self.max_opinions < 1:
            raise ValueError(f"max_opinions must be an integer >= 1, got {self.max_opinions!r}")
        # The largest |score| one opinion can carry; a margin above it is reached only when
        # several opinions agree, which is rare: the generator would redraw almost forever.
        one = max(abs(v) for v in (*POSITIVE.values(), *NEGATIVE.values()))
        one *= 2 if self.p_intensify > 0 else 1
        if not 0.0 <= self.min_margin <= one:
            raise ValueError(f"min_margin must be in [0, {one:g}] (the largest |score| of one "
                             f"opinion with these settings), got {self.min_margin}")


# The rules a review can exercise, as recorded by the generator (``Review.rules``). A review
# with none of them is "plain": its label is the sign of its adjectives, which an order-free
# model can read; every other tag needs word order or context.
RULES = ("plain", "intensified", "negated", "contrast", "opener", "mixed")


@dataclass(frozen=True)
class Review:
    text: str
    label: int       # 1 positive, 0 negative
    score: float     # the rule-based sentiment score
    rating: float    # regression target in (1, 5)
    rules: tuple[str, ...] = ()   # which of RULES appear in the review ("mixed": two opinions
                                  # of opposite sign); ("plain",) when none does


# Redraws of one review's opinions before the generator gives up (a valid config needs a few).
_MAX_REDRAWS = 10_000


class _Generator:
    def __init__(self, cfg: CorpusConfig, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng
        self.adjectives = list(POSITIVE.items()) + list(NEGATIVE.items())

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    # Each step returns (words, value, tags): the tags name the rules it applied. Recording
    # them draws no random numbers, so the corpus is the same with or without them.
    def phrase(self) -> tuple[list[str], float, set[str]]:
        word, value = self.pick(self.adjectives)
        words, tags = [word], set()
        if self.rng.random() < self.cfg.p_intensify:
            words.insert(0, self.pick(INTENSIFIERS))
            value *= 2
            tags.add("intensified")
        if self.rng.random() < self.cfg.p_negate:
            words.insert(0, self.pick(NEGATORS))
            value = -value
            tags.add("negated")
        return words, float(value), tags

    def clause(self) -> tuple[list[str], float, set[str]]:
        words, value, tags = self.phrase()
        return ["the", self.pick(NOUNS), "is", *words], value, tags

    def opinion(self) -> tuple[list[str], float, set[str]]:
        words, value, tags = self.clause()
        if self.rng.random() < self.cfg.p_contrast:
            second, value2, tags2 = self.clause()
            words, value, tags = words + ["but"] + second, value2, tags | tags2 | {"contrast"}
        if self.rng.random() < self.cfg.p_opener:
            words, value = [*self.pick(OPENERS), *words], -value
            tags = tags | {"opener"}
        return words + [self.pick(PUNCT)], value, tags

    def review(self) -> Review:
        cfg = self.cfg
        target = math.exp(math.log(cfg.median_length)
                          + cfg.length_sigma * self.rng.standard_normal())
        target = min(max(int(round(target)), cfg.min_length), cfg.max_length)
        for attempt in range(_MAX_REDRAWS):
            # Opinions scale with length, so a mean over tokens sees the same density of
            # evidence in short and long reviews.
            k = max(1, int(self.rng.poisson(target / cfg.tokens_per_opinion)))
            k = min(k, cfg.max_opinions)
            opinions = [self.opinion() for _ in range(k)]
            score = sum(v for _, v, _ in opinions)
            if abs(score) < cfg.min_margin:
                continue
            tags = set().union(*(t for _, _, t in opinions))
            if len({v > 0 for _, v, _ in opinions}) > 1:
                tags.add("mixed")
            sentences = [w for w, _, _ in opinions]
            n = sum(len(w) for w in sentences)
            while n < target:   # neutral sentences fill the review up to its drawn length
                filler = [*self.pick(FILLER), self.pick(PUNCT)]
                if n + len(filler) > cfg.max_length:
                    break
                sentences.insert(int(self.rng.integers(len(sentences) + 1)), filler)
                n += len(filler)
            words = [w for sent in sentences for w in sent]
            rating = 1.0 + 4.0 / (1.0 + math.exp(-score / 2.0))
            rules = tuple(r for r in RULES if r in tags) or ("plain",)
            return Review(" ".join(words), int(score > 0), score, rating, rules)
        raise RuntimeError(f"no review reached |score| >= min_margin={cfg.min_margin} in "
                           f"{_MAX_REDRAWS:,} draws: lower min_margin or raise max_opinions")


def generate(n: int, *, cfg: CorpusConfig, seed: int) -> list[Review]:
    """``n`` reviews from ``seed``: the same seed always gives the same reviews."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    gen = _Generator(cfg, np.random.default_rng(seed))
    return [gen.review() for _ in range(n)]


class ReviewDataset(Dataset):
    """Token ids, label, length and rating of each review (one dict per item)."""

    def __init__(self, reviews: list[Review], vocab: Vocab):
        self.reviews, self.vocab = reviews, vocab
        self.ids = [torch.tensor(vocab.encode(r.text), dtype=torch.long) for r in reviews]

    def __len__(self) -> int:
        return len(self.reviews)

    def __getitem__(self, i: int) -> dict:
        r = self.reviews[i]
        return {"input_ids": self.ids[i], "label": r.label, "rating": r.rating,
                "length": len(self.ids[i]), "index": i}

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


@dataclass
class Corpus:
    vocab: Vocab
    train: ReviewDataset
    val: ReviewDataset
    test: ReviewDataset
    transfer: ReviewDataset   # labels exist but lessons treat this split as unlabelled
    config: CorpusConfig


def load_corpus(cfg: CorpusConfig | None = None, *, scale: float = 1.0) -> Corpus:
    """Build the corpus. ``scale`` shrinks every split (smoke runs use e.g. 0.1)."""
    cfg = cfg or CorpusConfig()
    cfg.validate()
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    vocab = Vocab(build_vocab())
    # Each split has its own seed stream, so shrinking one split never changes another.
    seeds = np.random.SeedSequence(cfg.seed).spawn(4)
    names = ("n_train", "n_val", "n_test", "n_transfer")
    splits = [ReviewDataset(generate(max(1, int(getattr(cfg, k) * scale)), cfg=cfg,
                                     seed=int(s.generate_state(1)[0])), vocab)
              for k, s in zip(names, seeds)]
    return Corpus(vocab, *splits, config=cfg)


def teacher_training_set(corpus: Corpus) -> ReviewDataset:
    """The training split plus ``n_teacher_extra`` more labelled reviews: what the baseline is
    trained on. The extra reviews come from their own seed stream (the fifth child of the
    corpus seed), so they never overlap the other splits' streams."""
    seed = np.random.SeedSequence(corpus.config.seed).spawn(5)[4]
    extra = generate(corpus.config.n_teacher_extra, cfg=corpus.config,
                     seed=int(seed.generate_state(1)[0]))
    return ReviewDataset(corpus.train.reviews + extra, corpus.vocab)


def length_stats(lengths) -> dict[str, float]:
    """Median, mean, 90th/99th percentile and maximum of a list of lengths."""
    a = np.asarray(list(lengths), dtype=float)
    if a.size == 0:
        raise ValueError("lengths must not be empty")
    return {"median": float(np.median(a)), "mean": float(a.mean()),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max())}
