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

__all__ = ["Scored", "score", "compare_to", "percent"]


def percent(accuracy: float) -> str:
    """An accuracy as every lesson prints it: a percentage with two decimals, the resolution of
    a 2,000-review test split (one review is 0.05 points). One rounding for every source: the
    teacher's 1,987 of 2,000 prints as 99.35% whether it comes from a count (0.9935) or a
    float32 manifest (0.99349999...), where ``:.1%`` gave 99.4% and 99.3%."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy!r}")
    return f"{round(100 * accuracy, 2):.2f}%"


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
