"""Knowledge distillation: a small student learns from a frozen teacher's soft predictions.

Follows Hinton, Vinyals & Dean (2015), "Distilling the Knowledge in a Neural Network":
the soft loss is the KL divergence between the temperature-softened teacher and student
distributions, multiplied by T² (so its gradients keep their scale as T changes), mixed with
the ordinary cross-entropy on hard labels:

    loss = alpha * T² * KL(softmax(t / T) || softmax(s / T)) + (1 - alpha) * CE(s, y)

per review, averaged over the batch (``distillation_loss``: alpha is the balance on each
labelled review, whatever share of the batch carries a label).
Both distributions are computed in log space (``log_softmax`` on both sides,
``kl_div(..., log_target=True, reduction="batchmean")``): a probability of exactly zero can
never produce ``log(0) = -inf``. Unlabelled reviews (label -1, the *transfer set*) contribute
the soft part only: the teacher labels data nobody labelled.

The teacher is frozen, so its logits over the distillation set never change:
``teacher_logits`` computes them once (in dataset order, through each item's global
``"index"``), and ``distill(..., cached_logits=...)`` reads them instead of running the teacher
on every batch of every run (same loss, a fraction of the compute).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import ConcatDataset, Dataset

from course_lib.core.batching import make_loader
from course_lib.core.model import padding_mask
from course_lib.core.train import History, TrainConfig, train
from course_lib.core.evaluate import predict

UNLABELLED = -1



def _check(temperature: float, alpha: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def soft_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, *,
              temperature: float) -> torch.Tensor:
    """T² · KL(teacher_T || student_T), averaged over the batch (zero when logits match)."""
    _check(temperature, 0.0)
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean") * temperature ** 2


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      labels: torch.Tensor | None = None, *, temperature: float = 2.0,
                      alpha: float = 0.5) -> torch.Tensor:
    """The mean over the batch of each review's loss: ``alpha`` · its soft loss
    (T² · KL) + (1 - ``alpha``) · its cross-entropy when it has a label.

    ``alpha`` is the balance on every labelled review, whatever share of the batch is
    labelled: both terms are summed per review and divided by the same batch size. (Averaging
    the cross-entropy over the labelled reviews alone would weight each label by
    batch / labelled, four times the soft term's weight in a batch where a quarter of the
    reviews are labelled.) Unlabelled reviews (label -1) contribute ``alpha`` · their soft loss
    only; with no labels at all, or ``alpha`` = 1, the loss is the soft loss alone.
    """
    _check(temperature, alpha)
    soft = soft_loss(student_logits, teacher_logits, temperature=temperature)
    if labels is None or alpha == 1.0:
        return soft
    known = labels != UNLABELLED
    if not known.any():
        return soft
    hard = F.cross_entropy(student_logits[known].float(), labels[known],
                           reduction="sum") / labels.shape[0]
    return alpha * soft + (1.0 - alpha) * hard


def logit_mse_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """The alternative of Ba & Caruana (2014): regress the teacher's logits directly."""
    return F.mse_loss(student_logits.float(), teacher_logits.float())


class HiddenStateMatcher(nn.Module):
    """Match the student's pooled hidden state to the teacher's through a learned projection.

    (FitNets, Romero et al. 2015, use such a regressor because the widths differ.)
    """

    def __init__(self, student_dim: int, teacher_dim: int):
        super().__init__()
        if student_dim < 1 or teacher_dim < 1:
            raise ValueError("student_dim and teacher_dim must be >= 1")
        self.proj = nn.Linear(student_dim, teacher_dim)

    def forward(self, student_h: torch.Tensor, teacher_h: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.proj(student_h.float()), teacher_h.float())


def pooled_hidden(model: nn.Module, input_ids: torch.Tensor,
                  attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean-pooled encoder output of an ``EncoderClassifier`` (before its head)."""
    h = model.encode(model.embed(input_ids), mask=padding_mask(attention_mask))
    return model.pool(h, attention_mask)


class Unlabelled(Dataset):
    """A view of a dataset whose labels are hidden (-1): the transfer set."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        return {**self.dataset[i], "label": UNLABELLED}

    @property
    def lengths(self) -> list[int]:
        return self.dataset.lengths


class DistillSet(ConcatDataset):
    """Labelled training reviews followed by unlabelled ones, the *transfer set* of Hinton et
    al. (2015) that only the teacher labels (with ``lengths``, for the length samplers).

    Each item's ``"index"`` is its position in the whole set (the sub-datasets number their
    items from 0), so cached teacher logits can be looked up by index.
    """

    def __init__(self, labelled: Dataset, unlabelled: Dataset | None = None):
        parts = [labelled] + ([Unlabelled(unlabelled)] if unlabelled is not None else [])
        super().__init__(parts)

    def __getitem__(self, i: int) -> dict:
        if i < 0:
            if -i > len(self):
                raise IndexError(f"index {i} out of range for a set of {len(self)}")
            i += len(self)
        return {**super().__getitem__(i), "index": i}

    @property
    def lengths(self) -> list[int]:
        return [n for d in self.datasets for n in d.lengths]


@torch.no_grad()
def teacher_logits(teacher: nn.Module, dataset: Dataset, *, batch_size: int = 64,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """The frozen teacher's logits for every item of ``dataset``, row ``i`` for item ``i``.

    Computed once, in length-sorted batches (little padding); items must carry their own
    position as ``"index"`` (``ReviewDataset`` and ``DistillSet`` do). Returned on the CPU.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    loader = make_loader(dataset, batch_size=batch_size, shuffle=False)
    logits, index = predict(teacher, loader, device=device)
    if not torch.equal(index, torch.arange(len(dataset))):
        raise ValueError("dataset items must carry their own position as 'index' "
                         "(wrap concatenated datasets in DistillSet)")
    return logits


def distill(student: nn.Module, teacher: nn.Module | None, loader, *,
            cfg: TrainConfig = TrainConfig(), temperature: float = 2.0, alpha: float = 0.5,
            kind: str = "kl", cached_logits: torch.Tensor | None = None,
            device: torch.device | str = "cpu", val_loader=None, max_steps: int | None = None,
            progress: bool = True, autocast_dtype: torch.dtype | None | str = "auto") -> History:
    """Train ``student`` against the frozen ``teacher`` (eval mode, no gradients).

    ``kind``: "kl" (the Hinton loss above) or "mse" (logit regression, plus the hard loss
    weighted by 1 - alpha on labelled items). ``cached_logits`` (from ``teacher_logits`` over
    the loader's dataset) replaces the teacher's forward pass: row ``batch["index"]`` is used,
    and ``teacher`` may then be None. ``autocast_dtype``: as in ``train.train``.
    """
    _check(temperature, alpha)
    if kind not in ("kl", "mse"):
        raise ValueError(f"kind must be 'kl' or 'mse', got {kind!r}")
    if cached_logits is None:
        if teacher is None:
            raise ValueError("pass a teacher or cached_logits")
        teacher.eval().to(device)
        for p in teacher.parameters():
            p.requires_grad_(False)
    else:
        if cached_logits.dim() != 2 or cached_logits.shape[0] != len(loader.dataset):
            raise ValueError(f"cached_logits must be (len(dataset)={len(loader.dataset)}, "
                             f"classes), got {tuple(cached_logits.shape)}")
        cached_logits = cached_logits.detach().float().to(device)

    def loss_fn(model: nn.Module, batch: dict) -> torch.Tensor:
        if cached_logits is not None:
            t_logits = cached_logits[batch["index"]]
        else:
            with torch.no_grad():
                t_logits = teacher(batch["input_ids"], batch["attention_mask"])
        s_logits = model(batch["input_ids"], batch["attention_mask"])
        if kind == "kl":
            return distillation_loss(s_logits, t_logits, batch["labels"],
                                     temperature=temperature, alpha=alpha)
        loss = alpha * logit_mse_loss(s_logits, t_logits)
        known = batch["labels"] != UNLABELLED
        if alpha < 1 and known.any():
            loss = loss + (1 - alpha) * F.cross_entropy(s_logits[known].float(),
                                                        batch["labels"][known])
        return loss

    return train(student, loader, cfg=cfg, device=device, val_loader=val_loader,
                 loss_fn=loss_fn, max_steps=max_steps, progress=progress,
                 autocast_dtype=autocast_dtype)


@torch.no_grad()
def soft_targets(logits: torch.Tensor, temperatures: list[float]) -> dict[float, torch.Tensor]:
    """softmax(logits / T) for each T: how much "dark knowledge" each temperature reveals."""
    out = {}
    for t in temperatures:
        _check(t, 0.0)
        out[t] = F.softmax(logits.float() / t, dim=-1)
    return out
