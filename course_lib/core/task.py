"""What the course's models learn: the two tasks on the reviews and their plain losses.

Classification predicts a review's label (cross-entropy); regression predicts its star rating
(mean squared error, lesson 04). A loss is a function ``loss_fn(model, batch) -> loss`` so that a
lesson can swap in its own (lesson 06's distillation loss) without touching the training step.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["LossFn", "TASKS", "check_task", "task_loss", "to_device"]

LossFn = Callable[[nn.Module, dict], torch.Tensor]


def to_device(batch: dict, device: torch.device) -> dict:
    """The batch with its tensors on ``device`` (other values as they are)."""
    return {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v)
            for k, v in batch.items()}


TASKS = ("classification", "regression")


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")


def task_loss(task: str) -> LossFn:
    """The plain supervised loss: cross-entropy on labels, or MSE on ratings."""
    check_task(task)
    def loss_fn(model: nn.Module, batch: dict) -> torch.Tensor:
        out = model(batch["input_ids"], batch["attention_mask"])
        if task == "regression":
            return nn.functional.mse_loss(out.float(), batch["ratings"])
        return nn.functional.cross_entropy(out.float(), batch["labels"])
    return loss_fn
