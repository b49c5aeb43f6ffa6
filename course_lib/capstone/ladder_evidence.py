"""Evidence for lesson 14's "speed-ups multiply" check, which the live lesson cannot afford.

The check divides the speed-up of a stack of techniques by the product of each technique's
speed-up alone. Seven timings enter every round at batch 32 on the reference CPU (the baseline,
five techniques alone, the stack; mixed precision is left out there), each moving by 10-20% from
round to round on a shared 2-core machine, so the
lesson's few repeats leave an interval of measured / predicted from about 0.2 to 1: wider than
the band (0.75 to 1.33) the call needs. ``run`` times the same points in many more interleaved
rounds, and the training steps of the training stack on more batches, with the meters'
own functions; the lesson judges on it and shows its live run as one replicate.

    python -m course_lib.tools.evidence ladder_multiply --rounds 20   # ~5 min on a 2-core CPU

A timing: it holds for the machine it ran on (the file records it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from course_lib.capstone import ladder_inputs as LI
from course_lib.capstone import ladder_timing as LT
from course_lib.capstone.ladder import (ORDER, TECHNIQUES, TRAINS_THE_TEACHER, Rung, Settings,
                                        unavailable_here)
from course_lib.capstone.ladder_analysis import stack_versus_product
from course_lib.capstone.model_zoo import ModelZoo


def cases(available) -> dict[str, tuple[Rung, list[Rung]]]:
    """The two stacks the lesson checks, each with the techniques it is the product of:
    inference at batch 32 with every available technique, and training the teacher with every
    available training technique."""
    avail = [t for t in ORDER if t in available]
    train = [t for t in avail if t in TRAINS_THE_TEACHER]
    return {"inference_b32": (Rung("stack", **{t: True for t in avail}),
                              [Rung(t, **{t: True}) for t in avail]),
            "training": (Rung("train_stack", **{t: True for t in train}),
                         [Rung(t, **{t: True}) for t in train])}


def run(*, rounds: int = 20, fixed_batches: int = 10, bucket_batches: int = 16,
        device: str = "cpu", log: Callable[[str], None] = print) -> dict:
    """Time both stacks of ``cases``, their techniques alone and the baseline: ``rounds``
    interleaved repeats at batch 32 (``ladder_timing.latency_samples``, order rotated) and
    ``fixed_batches`` / ``bucket_batches`` training steps (``train_epoch_samples``). Returns
    every point's samples (and the bucketed epoch's design) for ``stacks``."""
    from course_lib.core.checkpoints import load_baseline
    from course_lib.core.data import load_corpus

    if rounds < 3 or fixed_batches < 2 or bucket_batches < 4:
        raise ValueError(f"rounds must be >= 3, fixed_batches >= 2 and bucket_batches >= 4, got "
                         f"{rounds}, {fixed_batches}, {bucket_batches}")
    corpus = load_corpus()
    teacher, _ = load_baseline(corpus, train_if_missing=False)
    settings = replace(Settings(), repeats=rounds, fixed_train_batches=fixed_batches,
                       bucket_train_batches=bucket_batches)
    zoo = ModelZoo(teacher, corpus, device=device, settings=settings, seed=0, progress=False)
    inputs = LI.choose_inputs(corpus, settings=settings, seed=0)
    unavailable = unavailable_here(device)
    (inf_top, inf_alone), (train_top, train_alone) = cases(
        [t for t in TECHNIQUES if t not in unavailable]).values()
    base = Rung("baseline")
    log(f"building {len({ModelZoo.key(r) for r in (inf_top, *inf_alone)})} models")
    inf_rungs = [base, *inf_alone, inf_top]
    log(f"batch 32: {len(inf_rungs)} points, {rounds} interleaved rounds")
    b32 = LT.latency_samples(zoo, inputs, inf_rungs, batch_size=len(inputs.typical), repeats=rounds)
    train_rungs = [base, *train_alone, train_top]
    log(f"training: {len(train_rungs)} points, {fixed_batches} fixed-padding and {bucket_batches} "
        "bucketed steps each")
    steps = LT.train_epoch_samples(zoo, train_rungs)
    batches, widths = LT.epoch_sample(zoo, "bucketed")
    design = {"x": [b["input_ids"].shape[1] for b in batches], "population": widths}
    points = {}
    for r in (*inf_rungs, *train_rungs):
        p = points.setdefault(r.key, {"name": "_".join(r.techniques) or "baseline",
                                      "techniques": list(r.techniques), "samples": {},
                                      "train_design": design if r.bucketing else None})
        if r.key in b32:
            p["samples"]["latency_b32_ms"] = b32[r.key]
        if r.key in steps:
            p["samples"]["train_epoch_s"] = steps[r.key]
    return {"rounds": rounds, "fixed_batches": fixed_batches, "bucket_batches": bucket_batches,
            "threads": torch.get_num_threads(), "unavailable": unavailable,
            "points": list(points.values())}


def stacks(evidence: dict, labels: dict[str, str]) -> list[dict]:
    """``ladder_analysis.stack_versus_product`` on the evidence's points: one row per stack of
    ``cases`` (inference at batch 32, training), each with its label and call."""
    points = {tuple(t in p["techniques"] for t in TECHNIQUES):
              {**p, "techniques": tuple(p["techniques"])} for p in evidence["points"]}
    base = points[(False,) * len(TECHNIQUES)]
    available = [t for t in TECHNIQUES if t not in evidence["unavailable"]]
    out = []
    for (name, (top, _)), metric in zip(cases(available).items(),
                                        ("latency_b32_ms", "train_epoch_s")):
        what = " + ".join(labels[t] for t in top.techniques)
        label = (f"inference, batch 32: {what}" if name == "inference_b32"
                 else f"training the teacher: {what}")
        out += stack_versus_product(points, base, [(label, metric, points[top.key])])
    return out
