"""What lesson 06 stores beside the baseline: the teacher's logits over the distillation set, and
the distilled student that lesson 14's distillation rung serves (``python -m
course_lib.tools.checkpoints --logits`` / ``--student`` write them)."""
from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from course_lib.core.batching import make_loader
from course_lib.core.checkpoints import DEFAULT_DIR, verify
from course_lib.core.data import Corpus
from course_lib.core.model import EncoderClassifier, EncoderConfig, count_parameters
from course_lib.core.padding import pad_batch
from course_lib.core.evaluate import evaluate
from course_lib.distill.losses import DistillSet, teacher_logits
from course_lib.distill.students import StudentRecipe, train_student


# the teacher's logits over lesson 06's distillation set
LOGITS_FILE = "baseline_distill_logits.pt"


def teacher_logits_stored(teacher: EncoderClassifier, distill_set, *,
                          directory: Path = DEFAULT_DIR, check_rows: int = 64, seed: int = 0,
                          tolerance: float = 1e-3) -> tuple[torch.Tensor, dict]:
    """The frozen teacher's logits over ``distill_set`` (``distill.teacher_logits``'s result),
    read from the stored file when it has one row per item and ``check_rows`` random rows agree
    with a live teacher call within ``tolerance``; computed now otherwise (about a minute on a
    2-core CPU). Returns the logits and ``{"source", "checked_rows", "max_difference",
    "seconds"}``: a lesson says which it used."""
    if check_rows < 1:
        raise ValueError(f"check_rows must be >= 1, got {check_rows}")
    t0, path = time.perf_counter(), directory / LOGITS_FILE
    teacher = teacher.eval()
    if path.exists():
        stored = torch.load(path, map_location="cpu", weights_only=True)
        if stored.shape[0] == len(distill_set):
            g = torch.Generator().manual_seed(seed)
            rows = torch.randperm(len(distill_set), generator=g)[:check_rows].tolist()
            ids, mask, _ = pad_batch([distill_set[i]["input_ids"] for i in rows])
            device = next(teacher.parameters()).device
            with torch.no_grad():
                live = teacher(ids.to(device), mask.to(device)).float().cpu()
            gap = float((stored[rows] - live).abs().max())
            if gap <= tolerance:
                return stored, {"source": "stored", "checked_rows": len(rows),
                                "max_difference": gap, "seconds": time.perf_counter() - t0}
    logits = teacher_logits(teacher, distill_set, device=next(teacher.parameters()).device)
    return logits, {"source": "computed now", "checked_rows": 0, "max_difference": 0.0,
                    "seconds": time.perf_counter() - t0}


def save_teacher_logits(logits: torch.Tensor, directory: Path = DEFAULT_DIR) -> Path:
    path = directory / LOGITS_FILE
    torch.save(logits.detach().float().cpu().contiguous(), path)
    return path


def train_student_checkpoint(corpus: Corpus, teacher: EncoderClassifier, *,
                             steps: int | None = None,
                             progress: bool = True) -> tuple[EncoderClassifier, dict]:
    """Lesson 06's best student: 2 layers initialised from the teacher's layers 0 and 2, distilled
    with the reference recipe (``distill.students.StudentRecipe``, seed 0). Lesson 14's distillation
    rung serves it. Returns the model and its manifest entries."""
    recipe = StudentRecipe() if steps is None else replace(StudentRecipe(), steps=steps)
    dset = DistillSet(corpus.train, corpus.transfer)
    cached, _ = teacher_logits_stored(teacher, dset)
    bar = None
    if progress:
        from course_lib.core.progress import tqdm
        bar = tqdm(total=1, desc=f"distilling the student ({recipe.steps} steps)", leave=False)
    t0 = time.perf_counter()
    model = train_student("distilled", student="half_from_teacher", corpus=corpus, distill_set=dset,
                          cached_logits=cached, seed=0, recipe=recipe, teacher=teacher)
    seconds = time.perf_counter() - t0
    if bar is not None:
        bar.update(1)
        bar.close()
    acc = evaluate(model, make_loader(corpus.test, batch_size=64, shuffle=False))["accuracy"]
    return model, {"config": model.cfg.to_dict(), "test_accuracy": acc, "recipe": asdict(recipe),
                   "student": "half_from_teacher", "arm": "distilled", "seed": 0,
                   "train_seconds": seconds, "parameters": count_parameters(model),
                   "torch": torch.__version__}


def stored_student(teacher: EncoderClassifier, *, directory: Path = DEFAULT_DIR
                   ) -> tuple[EncoderClassifier, dict] | None:
    """The stored student (``--student``), in eval mode on the CPU, if its checksum holds and
    ``teacher`` is the stored baseline it was distilled from; else None."""
    info, base = verify("student", directory), verify("baseline", directory)
    if info is None or base is None or info.get("teacher_sha256") != base["sha256"] \
            or not _same_weights(teacher, directory / "baseline.pt"):
        return None
    model = EncoderClassifier(EncoderConfig(**info["config"]))
    model.load_state_dict(torch.load(directory / "student.pt", map_location="cpu",
                                     weights_only=True))
    return model.eval(), {**info, "source": "checkpoint"}


def _same_weights(model: EncoderClassifier, path: Path) -> bool:
    state = torch.load(path, map_location="cpu", weights_only=True)
    mine = model.state_dict()
    return state.keys() == mine.keys() and all(torch.equal(state[k], mine[k].cpu()) for k in state)
