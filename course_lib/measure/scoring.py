"""Scoring models on the same test reviews, so that any two can be compared pair by pair.

A model's score keeps which reviews it got right, not just its accuracy: two models scored on
the same reviews are then compared by the paired change (``verdicts.paired_accuracy_change``),
where only the reviews on which they disagree carry noise. Lessons 05 (pruned models) and 07
(quantized ones) judge every variant this way.
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.core.evaluate import predict
from course_lib.measure.verdicts import Rule, paired_accuracy_change

__all__ = ["Scored", "score", "compare_to"]


class Scored:
    """A model's logits on the test loader (dataset order) and which reviews it got right."""

    def __init__(self, logits: torch.Tensor, labels: torch.Tensor):
        if logits.shape[0] != labels.shape[0]:
            raise ValueError(f"logits hold {logits.shape[0]} rows but labels {labels.shape[0]}")
        self.logits = logits
        self.correct = (logits.argmax(-1) == labels).tolist()

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct)


def score(model: nn.Module, loader, labels: torch.Tensor, *,
          device: torch.device | str = "cpu") -> Scored:
    """Run ``model`` over ``loader`` on ``device`` and score it against ``labels`` (in the
    dataset's order; the loader may batch in any order)."""
    logits, index = predict(model, loader, device=device)
    return Scored(logits.cpu(), labels[index.cpu()])


def compare_to(ref: Scored, other: Scored, rule: Rule) -> dict:
    """Accuracy, agreement with ``ref``, the paired change in points with its standard error
    and degrees of freedom, and ``rule``'s outcome on that change."""
    change = paired_accuracy_change(ref.correct, other.correct)
    return {"accuracy": other.accuracy, "agreement": agreement(other.logits, ref.logits),
            "change": change.value, "se": change.se, "dof": change.dof,
            "outcome": rule.judge(change.value, change.se, change.dof)}


def agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of rows where two sets of logits predict the same class."""
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}")
    return float((a.argmax(-1) == b.argmax(-1)).float().mean())
