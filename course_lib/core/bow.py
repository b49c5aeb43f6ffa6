"""The bar a Transformer must clear: a bag of words, which sees which words occur but not where.

A logistic regression on word frequencies (``nn.EmbeddingBag`` in "mean" mode: one learned
weight per word and class, averaged over the review's words, plus a bias). It reads "good" and
"terrible" perfectly well; it cannot tell "not good" from "good" or see which side of a "but" a
word is on, because shuffling a review's words leaves its input unchanged. Whatever accuracy
the corpus allows above this model is the part that needs word order, which is the part the
course's Transformer has to earn.

It has the same ``forward(input_ids, attention_mask)`` as the course's encoder, so
``course_lib.core.train.train`` and ``evaluate`` train and score it unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.core.batching import make_loader
from course_lib.core.data import Corpus
from course_lib.core.train import seeded
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import evaluate


class BagOfWords(nn.Module):
    def __init__(self, vocab_size: int, *, n_outputs: int = 2, pad_id: int = 0):
        super().__init__()
        if vocab_size < 1 or n_outputs < 1:
            raise ValueError("vocab_size and n_outputs must be >= 1, "
                             f"got {vocab_size}, {n_outputs}")
        self.pad_id = pad_id
        self.weights = nn.EmbeddingBag(vocab_size, n_outputs, mode="mean", padding_idx=pad_id)
        self.bias = nn.Parameter(torch.zeros(n_outputs))
        nn.init.zeros_(self.weights.weight)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        # padding_idx makes EmbeddingBag skip padding ids, so the mean is over real words only.
        if attention_mask is not None:
            input_ids = input_ids.masked_fill(~attention_mask, self.pad_id)
        return self.weights(input_ids) + self.bias


@dataclass(frozen=True)
class BowRecipe:
    epochs: int = 10        # a convex problem: more epochs than this change the third digit
    lr: float = 0.2         # large on purpose: word weights start at zero and have far to go
    batch_size: int = 64
    seed: int = 0


def train_bag_of_words(corpus: Corpus, *, recipe: BowRecipe = BowRecipe(),
                       progress: bool = False) -> tuple[BagOfWords, dict[str, float]]:
    """Fit the bag of words on the training split; returns it and its train/test accuracy."""
    with seeded(recipe.seed):
        model = BagOfWords(len(corpus.vocab), pad_id=corpus.vocab.pad_id)
    loader = make_loader(corpus.train, batch_size=recipe.batch_size, seed=recipe.seed)
    train(model, loader, cfg=TrainConfig(epochs=recipe.epochs, lr=recipe.lr, weight_decay=0.0,
                                         seed=recipe.seed), progress=progress)
    scores = {name: evaluate(model, make_loader(ds, batch_size=256, shuffle=False))["accuracy"]
              for name, ds in (("train", corpus.train), ("test", corpus.test))}
    return model.eval(), scores
