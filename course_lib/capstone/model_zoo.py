"""The models lesson 14's rungs serve, each built once: the teacher, the distilled student, their
pruned versions, and the int8 version of each.

Each build is its lesson's function: the student is lesson 06's best (2 layers initialised from
the teacher's layers, distilled: ``stored_student`` when the stored one belongs to
this teacher, else ``distill.students.train_student`` on the teacher's logits, read once by
``teacher_logits_stored``), ``structured.prune_ffn_neurons`` + ``pruning.fine_tune`` (05),
``quant.dynamic.quantize_dynamic_int8`` (07, CPU kernels: an int8 model stays on the CPU even on
a GPU machine). A rung's run-time techniques (bucketing, precision, attention kernel) do not change
the model, so the zoo keys models by ``(distill, prune, int8)`` only.
"""
from __future__ import annotations

import time

import torch
from torch import nn

from course_lib.pruning import masks as pruning
from course_lib.quant import dynamic as quant_dynamic
from course_lib.pruning import structured
from course_lib.core.batching import make_loader
from course_lib.measure.memory import state_dict_bytes
from course_lib.distill.stored import stored_student, teacher_logits_stored
from course_lib.distill.losses import DistillSet
from course_lib.capstone.ladder import Rung, Settings
from course_lib.core.model import EncoderClassifier
from course_lib.distill.students import StudentRecipe, train_student


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class ModelZoo:
    """Builds the model each rung serves, once, and says how big it is on disk."""

    def __init__(self, teacher: EncoderClassifier, corpus, *, device: torch.device | str,
                 settings: Settings = Settings(), seed: int = 0, progress: bool = True):
        settings.validate()
        self.device = torch.device(device)
        self.teacher = teacher.eval().to(self.device)
        self.corpus, self.settings, self.seed, self.progress = corpus, settings, seed, progress
        self.build_seconds: dict[str, float] = {}   # "distill", "distill_prune", ...: seconds
        self._models: dict[tuple[bool, bool, bool], nn.Module] = {}
        self._transfer: tuple[DistillSet, torch.Tensor] | None = None
        self.student_source: str | None = None   # "checkpoint" or how it was distilled here

    @staticmethod
    def key(rung: Rung) -> tuple[bool, bool, bool]:
        return rung.distill, rung.prune, rung.int8

    def model(self, rung: Rung) -> nn.Module:
        """The model ``rung`` serves, in eval mode."""
        key = self.key(rung)
        if key not in self._models:
            self._models[key] = self._build(rung)
        return self._models[key]

    def size_bytes(self, rung: Rung) -> int:
        """Size on disk: bytes of ``torch.save(state_dict)`` (``state_dict_bytes``)."""
        model = self.model(rung)
        return state_dict_bytes(model)

    def distill_set(self) -> tuple[DistillSet, torch.Tensor]:
        """Lesson 06's distillation set (labelled training split + unlabelled transfer split)
        and the frozen teacher's logits for it, computed once."""
        if self._transfer is None:
            data = DistillSet(self.corpus.train, self.corpus.transfer)
            self._transfer = data, teacher_logits_stored(self.teacher, data)[0]
        return self._transfer

    def _build(self, rung: Rung) -> nn.Module:
        if not (rung.int8 or rung.prune or rung.distill):
            return self.teacher
        t0, s = time.perf_counter(), self.settings
        if rung.int8:
            model = quant_dynamic.quantize_dynamic_int8(
                self.model(Rung("below", distill=rung.distill, prune=rung.prune)))
        elif rung.prune:
            model = structured.prune_ffn_neurons(self.model(Rung("below", distill=rung.distill)),
                                              amount=s.prune_amount)
            loader = make_loader(self.corpus.train, batch_size=s.train_batch, seed=self.seed)
            pruning.fine_tune(model, loader, steps=s.finetune_steps, lr=s.finetune_lr,
                              device=self.device, seed=self.seed, progress=self.progress)
        else:
            model = self._student()
        self.build_seconds["_".join(t for t in ("distill", "prune", "int8")
                                    if getattr(rung, t))] = time.perf_counter() - t0
        return model.eval()

    def _student(self) -> nn.Module:
        stored = None if self.settings.train_student else stored_student(self.teacher)
        if stored is not None:
            self.student_source = ("the stored student "
                                   "(`python -m course_lib.tools.checkpoints --student`)")
            return stored[0].to(self.device)
        s = self.settings
        data, cached = self.distill_set()
        recipe = StudentRecipe(steps=s.distill_steps, batch_size=s.train_batch,
                               lr_from_teacher=s.distill_lr)
        self.student_source = f"distilled here ({s.distill_steps} steps)"
        return train_student("distilled", student="half_from_teacher", corpus=self.corpus,
                             distill_set=data, cached_logits=cached, seed=self.seed,
                             recipe=recipe, teacher=self.teacher, device=self.device)
