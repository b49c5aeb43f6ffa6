"""Lesson 06's student runs, one function for every arm, so that the lesson and
``python -m course_lib.headroom`` train exactly the same students.

Every arm trains a fresh ``student`` preset (initialised from ``seed``) for the same number of
optimizer steps with the course's schedule; only the data and the targets change:

- ``scratch``: cross-entropy on the labelled training split;
- ``distilled``: ``distill``'s KL recipe on the distillation set (labelled + transfer);
- ``hard_labels``: cross-entropy on the distillation set, the transfer reviews labelled with the
  teacher's top class (the same extra data, no soft targets);
- ``distilled_labelled_only``: the KL recipe on the labelled split alone (soft targets, no
  extra data);
- ``mse``: the article's recipe made to run, MSE between the logits, no label term.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .batching import make_loader
from .distill import UNLABELLED, DistillSet, distill
from .models import build_model
from .train import TrainConfig, train

ARMS = ("scratch", "distilled", "hard_labels", "distilled_labelled_only", "mse")


@dataclass(frozen=True)
class StudentRecipe:
    steps: int = 800          # optimizer steps of every arm (lesson 06's STEPS)
    batch_size: int = 32
    lr: float = 2e-3
    temperature: float = 2.0  # KL arms only
    alpha: float = 0.5        # KL arms: weight of the soft loss


def hard_label_targets(labels: torch.Tensor, index: torch.Tensor,
                       cached_logits: torch.Tensor) -> torch.Tensor:
    """The batch's labels, with each unlabelled item given the teacher's top class."""
    return torch.where(labels != UNLABELLED, labels, cached_logits[index].argmax(-1))


def train_student(arm: str, *, corpus, distill_set: DistillSet, cached_logits: torch.Tensor,
                  seed: int, recipe: StudentRecipe = StudentRecipe(),
                  device: torch.device | str = "cpu") -> nn.Module:
    """One student of ``arm`` (see the module docstring), trained from ``seed``.
    ``distill_set`` is ``DistillSet(corpus.train, corpus.transfer)`` and ``cached_logits`` the
    teacher's logits for it (``distill.teacher_logits``)."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    if recipe.steps < 1:
        raise ValueError(f"recipe.steps must be >= 1, got {recipe.steps}")
    torch.manual_seed(seed)
    model = build_model(len(corpus.vocab), preset="student")
    n_lab = len(corpus.train)
    data = {"scratch": corpus.train, "distilled_labelled_only": DistillSet(corpus.train)}.get(
        arm, distill_set)
    loader = make_loader(data, batch_size=recipe.batch_size, seed=seed)
    cfg = TrainConfig(epochs=-(-recipe.steps // len(loader)), lr=recipe.lr, seed=seed)
    common = dict(cfg=cfg, device=device, max_steps=recipe.steps, progress=False)
    if arm == "scratch":
        train(model, loader, **common)
    elif arm == "hard_labels":
        teacher = cached_logits.to(device)

        def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
            y = hard_label_targets(batch["labels"], batch["index"], teacher)
            return F.cross_entropy(m(batch["input_ids"], batch["attention_mask"]).float(), y)
        train(model, loader, loss_fn=loss_fn, **common)
    else:
        logits = cached_logits[:n_lab] if arm == "distilled_labelled_only" else cached_logits
        kind, T, alpha = ("mse", 1.0, 1.0) if arm == "mse" else ("kl", recipe.temperature, recipe.alpha)
        distill(model, None, loader, cached_logits=logits, temperature=T, alpha=alpha, kind=kind,
                **common)
    return model
