"""Lesson 06's students and arms: one function trains any student with any recipe, so that the
lesson and the evidence run (``distill.transfer``) train exactly the same.

The students (``STUDENTS``), smallest first:

- ``small``: the ``student`` preset, 1 layer of width 64, random initialisation. It cannot
  represent the corpus's context rules (``models.py``): no loss can lift it far;
- ``half``: the teacher's width with half its layers (2 of 4), random initialisation;
- ``half_from_teacher``: the same shape initialised from the teacher's layers 0 and 2, with the
  teacher's embeddings and head (DistilBERT's recipe: every other layer).

The arms (``ARMS``) change the data or the targets, never the student, steps or schedule:

- ``scratch``: cross-entropy on the labelled training split;
- ``distilled``: ``distill``'s KL recipe on the distillation set (labelled + transfer);
- ``hard_labels``: cross-entropy on the distillation set, the transfer reviews labelled with the
  teacher's top class (the same extra data, no soft targets);
- ``distilled_labelled_only``: the KL recipe on the labelled split alone (no extra data);
- ``mse``: ``alpha`` · MSE between the logits + (1 - ``alpha``) · CE, on the distillation set
  (the KL arm with the soft loss swapped for a regression: the article's loss, at KL's alpha);
- ``hidden``: the KL recipe plus ``hidden_weight`` · the MSE between the student's pooled hidden
  state, projected (``HiddenStateMatcher``), and the teacher's (FitNets); runs the teacher.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from course_lib.core.batching import make_loader
from course_lib.distill.losses import (UNLABELLED, DistillSet, HiddenStateMatcher, distill,
                                       pooled_hidden)
from course_lib.core.model import EncoderClassifier, build_model
from course_lib.core.model import keep_layers
from course_lib.core.train import TrainConfig, train

STUDENTS = ("small", "half", "half_from_teacher")
ARMS = ("scratch", "distilled", "hard_labels", "distilled_labelled_only", "mse", "hidden")


def teacher_layers(n_layers: int) -> list[int]:
    """The teacher blocks half_from_teacher keeps: every other one (0 and 2 of the 4)."""
    return list(range(0, n_layers, 2))


@dataclass(frozen=True)
class StudentRecipe:
    steps: int = 800          # optimizer steps of every arm (lesson 06's STEPS)
    batch_size: int = 32
    lr: float = 2e-3          # peak learning rate of the students built from random weights
    lr_from_teacher: float = 5e-4  # ... and of half_from_teacher: it starts near a solution, and
                                   # 2e-3 pushed it away (a one-seed probe, 150 steps: 89.1% vs
                                   # 89.5% at 5e-4, distilled)
    temperature: float = 2.0  # KL arms
    alpha: float = 0.5        # weight of the soft (KL or MSE) loss; 1 - alpha on the labels
    hidden_weight: float = 1.0  # hidden arm: weight of the hidden-state loss


def build_student(student: str, *, vocab_size: int, teacher: EncoderClassifier | None,
                  seed: int) -> EncoderClassifier:
    """A fresh student of kind ``student`` (module docstring); ``seed`` fixes random weights."""
    if student not in STUDENTS:
        raise ValueError(f"student must be one of {STUDENTS}, got {student!r}")
    if student == "small":
        return build_model(vocab_size, preset="student", seed=seed)
    if teacher is None:
        raise ValueError(f"student {student!r} needs the teacher (its width and depth)")
    if student == "half":
        c = teacher.cfg
        return build_model(vocab_size, preset="teacher", seed=seed, d_model=c.d_model,
                           n_heads=c.n_heads, d_ff=c.d_ff, n_layers=len(teacher_layers(c.n_layers)),
                           max_len=c.max_len)
    return keep_layers(teacher, teacher_layers(teacher.cfg.n_layers)).train()


def hard_label_targets(labels: torch.Tensor, index: torch.Tensor,
                       cached_logits: torch.Tensor) -> torch.Tensor:
    """The batch's labels, with each unlabelled item given the teacher's top class."""
    return torch.where(labels != UNLABELLED, labels, cached_logits[index].argmax(-1))


class _WithMatcher(nn.Module):
    """The student and the hidden-state projection, trained together (one optimizer)."""

    def __init__(self, student: EncoderClassifier, matcher: HiddenStateMatcher):
        super().__init__()
        self.student, self.matcher = student, matcher


def _hidden_loss_fn(teacher: nn.Module, cached: torch.Tensor, recipe: StudentRecipe):
    from course_lib.distill.losses import distillation_loss

    def loss_fn(m: _WithMatcher, batch: dict) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with torch.no_grad():
            t_hidden = pooled_hidden(teacher, ids, mask)
        h = pooled_hidden(m.student, ids, mask)
        logits = m.student.head(h)
        kl = distillation_loss(logits, cached[batch["index"]], batch["labels"],
                               temperature=recipe.temperature, alpha=recipe.alpha)
        return kl + recipe.hidden_weight * m.matcher(h, t_hidden)
    return loss_fn


def train_student(arm: str, *, student: str = "small", corpus, distill_set: DistillSet,
                  cached_logits: torch.Tensor, seed: int, recipe: StudentRecipe = StudentRecipe(),
                  teacher: EncoderClassifier | None = None,
                  device: torch.device | str = "cpu") -> EncoderClassifier:
    """One ``student`` trained by ``arm`` (see the module docstring) from ``seed``, in FP32.
    ``distill_set`` is ``DistillSet(corpus.train, corpus.transfer)`` and ``cached_logits`` the
    teacher's logits for it (``distill.teacher_logits``); ``teacher`` is needed by the ``half``
    students and the ``hidden`` arm."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    if recipe.steps < 1:
        raise ValueError(f"recipe.steps must be >= 1, got {recipe.steps}")
    if arm == "hidden" and teacher is None:
        raise ValueError("arm 'hidden' needs the teacher (its hidden states are the targets)")
    model = build_student(student, vocab_size=len(corpus.vocab), teacher=teacher, seed=seed)
    lr = recipe.lr_from_teacher if student == "half_from_teacher" else recipe.lr
    data = {"scratch": corpus.train, "distilled_labelled_only": DistillSet(corpus.train)}.get(
        arm, distill_set)
    loader = make_loader(data, batch_size=recipe.batch_size, seed=seed)
    cfg = TrainConfig(epochs=-(-recipe.steps // len(loader)), lr=lr, seed=seed)
    common = dict(cfg=cfg, device=device, max_steps=recipe.steps, progress=False,
                  autocast_dtype=None)
    if arm == "scratch":
        train(model, loader, **common)
    elif arm == "hard_labels":
        cached = cached_logits.to(device)

        def loss_fn(m: nn.Module, batch: dict) -> torch.Tensor:
            y = hard_label_targets(batch["labels"], batch["index"], cached)
            return F.cross_entropy(m(batch["input_ids"], batch["attention_mask"]).float(), y)
        train(model, loader, loss_fn=loss_fn, **common)
    elif arm == "hidden":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            matcher = HiddenStateMatcher(model.cfg.d_model, teacher.cfg.d_model)
        teacher = teacher.eval().to(device)
        train(_WithMatcher(model, matcher), loader,
              loss_fn=_hidden_loss_fn(teacher, cached_logits.float().to(device), recipe), **common)
    else:
        logits = (cached_logits[:len(corpus.train)] if arm == "distilled_labelled_only"
                  else cached_logits)
        kind = "mse" if arm == "mse" else "kl"
        distill(model, None, loader, cached_logits=logits, temperature=recipe.temperature,
                alpha=recipe.alpha, kind=kind, **common)
    return model.eval()
