"""What lesson 14 measures on each rung, as functions of a ``ModelZoo``: accuracy, latency, the
test set's time, a training epoch's time, size and peak memory; ``measure`` fills the table.

Inputs (``Inputs``): a *typical bucket* (32 test reviews of median length) for latency and
memory, and a random subset of the test set that is timed at fixed padding (every batch costs
the same there, so the time is scaled to the whole set). Every forward pass runs through
``core.evaluate.predict`` or a plain call inside ``rung_context``: the rung's precision and
attention kernel (``ladder.applied``).
"""
from __future__ import annotations

import copy
import functools
import itertools
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils.data import Subset
from course_lib.core.progress import tqdm

from course_lib.measure import bench
from course_lib.quant import dynamic as quant_dynamic
from course_lib.core.precision import choose_precision
from course_lib.core.train import make_step_fn
from course_lib.core.batching import BucketBatchSampler, make_loader
from course_lib.capstone.ladder import Rung, Settings, applied
from course_lib.capstone.ladder_analysis import pareto_front
from course_lib.capstone.ladder_speedups import epoch_estimate
from course_lib.capstone.model_zoo import ModelZoo, model_device
from course_lib.core.model import EncoderClassifier, EncoderConfig
from course_lib.core.padding import Collate, pad_batch
from course_lib.core.evaluate import predict

MiB = 2**20

# A practitioner's first attempt, measured beside the fixed-512 baseline: the teacher in FP32
# with SDPA's fused kernel, each batch padded to its own longest review, batches in the data's
# order (dynamic padding, lesson 01; sorting by length would be bucketing, lesson 02).
PRACTITIONER = Rung("practitioner", sdpa=True)


@dataclass(frozen=True)
class Inputs:
    typical: list[torch.Tensor]   # token ids of test reviews of median length (a typical bucket)
    fixed_subset: list[int]       # test reviews timed at fixed padding


def choose_inputs(corpus, *, settings: Settings, seed: int = 0) -> Inputs:
    n = corpus.test.lengths
    mid = statistics.median(n)
    by_mid = sorted(range(len(n)), key=lambda i: abs(n[i] - mid))
    subset = torch.randperm(len(n), generator=torch.Generator().manual_seed(seed))
    return Inputs([corpus.test[i]["input_ids"] for i in by_mid[:32]],
                  sorted(subset[:settings.fixed_test_reviews].tolist()))


def rung_context(rung: Rung, device: torch.device) -> Callable:
    """A factory of the block ``rung`` runs in on ``device`` (for ``core.evaluate.predict``)."""
    dtype = choose_precision(device).dtype
    return lambda: applied(rung, device_type=device.type, dtype=dtype)


def forward_fn(model, rung: Rung, ids: torch.Tensor, mask: torch.Tensor) -> Callable:
    return bench.forward_call(model, ids, mask, context=rung_context(rung, ids.device))


def typical_batch(zoo: ModelZoo, inputs: Inputs, rung: Rung, size: int):
    """``size`` typical reviews, padded to the batch's longest with bucketing, else to
    ``fixed_length``, on the device of the model ``rung`` serves."""
    ids, mask, _ = pad_batch(inputs.typical[:size],
                             max_length=None if rung.bucketing else zoo.settings.fixed_length)
    dev = model_device(zoo.model(rung))
    return ids.to(dev), mask.to(dev)


def test_loader(zoo: ModelZoo, inputs: Inputs, rung: Rung, *, dynamic: bool = False):
    """The test split as ``rung`` runs it: bucketed, or ``fixed_test_reviews`` of it at fixed
    padding, or with ``dynamic`` the whole split in its order, each batch padded to its longest."""
    s, test = zoo.settings, zoo.corpus.test
    if dynamic:
        return make_loader(test, bucketed=False, batch_size=s.eval_batch, shuffle=False)
    if rung.bucketing:
        return make_loader(test, batch_size=s.eval_batch, shuffle=False)
    return make_loader(Subset(test, inputs.fixed_subset), bucketed=False,
                       batch_size=s.eval_batch, shuffle=False, max_length=s.fixed_length)


def run_test_set(zoo: ModelZoo, inputs: Inputs, rung: Rung, loader=None):
    """``rung``'s outputs over ``loader`` (default: its test loader) and the dataset indices."""
    model = zoo.model(rung)
    dev = model_device(model)
    return predict(model, loader or test_loader(zoo, inputs, rung), device=dev,
                   context=rung_context(rung, dev))


def rung_correct(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> torch.Tensor:
    """Whether the model ``rung`` serves, in its precision, gets each test review right (in
    test-split order). Padding (masked) and the attention kernel change float rounding only
    (lessons 01, 10; checked by the tests), so it is scored with dynamic padding and the fused
    kernel."""
    r = replace(rung, bucketing=True, sdpa=True)
    model = zoo.model(r)
    dev = model_device(model)
    out, index = predict(model, test_loader(zoo, inputs, r), device=dev,
                         context=rung_context(r, dev))
    labels = torch.tensor([zoo.corpus.test.reviews[int(i)].label for i in index])
    return out.argmax(-1) == labels


def accuracy(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> float:
    """Test accuracy of the model ``rung`` serves, in its precision (``correct``'s mean)."""
    return float(rung_correct(zoo, inputs, rung).float().mean())


def latency_samples(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, batch_size: int,
                    repeats: int | None = None) -> dict[tuple, list[float]]:
    """ms of each repeat of a forward pass on ``batch_size`` typical reviews, the rungs
    interleaved with the order rotated (repeat i of every rung in round i); by ``Rung.key``."""
    if not 1 <= batch_size <= len(inputs.typical):
        raise ValueError(f"batch_size must be in [1, {len(inputs.typical)}], got {batch_size}")
    fns = {r.key: forward_fn(zoo.model(r), r, *typical_batch(zoo, inputs, r, batch_size))
           for r in rungs}
    res = bench.compare(fns, warmup=zoo.settings.warmup, repeats=repeats or zoo.settings.repeats,
                        device=zoo.device, rotate=True)
    return {k: [1e3 * t for t in v["timing"].samples] for k, v in res.items()}


def latencies(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, batch_size: int,
              repeats: int | None = None) -> dict[tuple, float]:
    """Median ms of ``latency_samples``, by ``Rung.key``."""
    return {k: statistics.median(v) for k, v in latency_samples(
        zoo, inputs, rungs, batch_size=batch_size, repeats=repeats).items()}


def timed_strata(zoo: ModelZoo, inputs: Inputs, rung: Rung, *, dynamic: bool = False
                 ) -> list[tuple[object, float]]:
    """What is timed to stand for the whole test set: ``(batches, factor)`` strata whose times,
    each multiplied by its factor, add up to the set's. Fixed padding: ``fixed_test_reviews``
    random reviews (every batch costs the same), scaled to the set. Bucketing: the set's own
    batches; the costliest (by padded tokens) that make up half of all padded tokens are timed
    in full, and of the rest every ``bucket_sample``-th, scaled by padded tokens (a ratio
    estimate: a few wide batches, whose attention grows as L², dominate the time and are never
    sampled away). Dynamic padding (``dynamic``): the split's batches in its own order, all
    of them wide (a batch of random reviews holds a long one), so a plain systematic sample
    does: every ``dynamic_sample``-th batch in width order, scaled by padded tokens. Accuracy is
    scored on every review (``test_loader``)."""
    s, test = zoo.settings, zoo.corpus.test
    loader = test_loader(zoo, inputs, rung, dynamic=dynamic)
    tokens = lambda b: b["input_ids"].numel()   # noqa: E731
    if dynamic:
        batches = sorted(loader, key=tokens)
        sample = batches[s.dynamic_sample // 2::s.dynamic_sample] or batches
        return [(sample, sum(map(tokens, batches)) / sum(map(tokens, sample)))]
    if not rung.bucketing:
        return [(loader, len(test) / len(loader.dataset))]
    if s.bucket_sample <= 1:
        return [(loader, 1.0)]
    batches = sorted(loader, key=tokens, reverse=True)
    total, acc, cut = sum(map(tokens, batches)), 0, 0
    while cut < len(batches) and acc < total / 2:
        acc, cut = acc + tokens(batches[cut]), cut + 1
    top, rest = batches[:cut], batches[cut:]
    sample = rest[s.bucket_sample // 2::s.bucket_sample]
    if not sample:
        return [(top + rest, 1.0)]
    return [(top, 1.0), (sample, sum(map(tokens, rest)) / sum(map(tokens, sample)))]


def test_set_samples(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *,
                     practitioner: bool = False) -> dict[tuple, list[float]]:
    """Seconds to run the whole test set, each repeat, interleaved with the order rotated, by
    ``Rung.key``: the strata of ``timed_strata``, each timed and scaled, added up per repeat;
    with ``practitioner``, ``PRACTITIONER`` (dynamic padding) too, under the key
    ``("practitioner",)``. No warm-up: ``accuracy`` and ``latencies`` ran every model before."""
    runs = [(r.key, r, False) for r in rungs] + ([(("practitioner",), PRACTITIONER, True)]
                                                 if practitioner else [])
    strata = {k: timed_strata(zoo, inputs, r, dynamic=d) for k, r, d in runs}
    fns = {(k, i): functools.partial(run_test_set, zoo, inputs, r, part)
           for k, r, _ in runs for i, (part, _) in enumerate(strata[k])}
    res = bench.compare(fns, warmup=0, repeats=zoo.settings.test_repeats, device=zoo.device,
                        rotate=True)
    return {k: [sum(res[(k, i)]["timing"].samples[j] * f for i, (_, f) in enumerate(parts))
                for j in range(zoo.settings.test_repeats)] for k, parts in strata.items()}


def _epoch_sample(zoo: ModelZoo, padding: str) -> tuple[list[dict], list[int]]:
    """A few collated training batches standing for an epoch, and the width of every batch of
    the epoch. ``padding``: "fixed" (random batches padded to ``fixed_length``), "bucketed", or
    "dynamic" (random batches padded to their longest); bucketed and dynamic batches are picked
    evenly over the epoch's batch widths, in width order."""
    n, s = zoo.corpus.train.lengths, zoo.settings
    if padding == "bucketed":
        plan = list(BucketBatchSampler(n, batch_size=s.train_batch, seed=zoo.seed))
    else:
        perm = torch.randperm(len(n), generator=torch.Generator().manual_seed(zoo.seed))
        plan = [perm[i:i + s.train_batch].tolist() for i in range(0, len(n), s.train_batch)]
    if padding == "fixed":
        k, cost = s.fixed_train_batches, len
        widths = [s.fixed_length] * len(plan)
    else:
        k, cost = s.bucket_train_batches, lambda b: max(n[i] for i in b)   # noqa: E731
        widths = [max(n[i] for i in b) for b in plan]
    k, by_cost = min(k, len(plan)), sorted(plan, key=cost)
    collate = Collate(max_length=s.fixed_length if padding == "fixed" else None)
    return [collate([zoo.corpus.train[i] for i in by_cost[(2 * j + 1) * len(plan) // (2 * k)]])
            for j in range(k)], widths


def _training_steps(zoo: ModelZoo, rung: Rung, batches: list[dict]) -> Callable:
    """One training step per call, cycling over ``batches``, on a copy of the float model
    (it may be the teacher, which ``distill`` froze: the copy trains again)."""
    model = copy.deepcopy(zoo.model(replace(rung, int8=False))).requires_grad_(True)
    name = choose_precision(zoo.device).name if rung.amp else "fp32"
    fns = [make_step_fn(model, b, precision_name=name, device=zoo.device) for b in batches]
    # the first call (the warm-up) takes the last batch, so that the timed calls then run the
    # batches in their order (by width, for bucketing): ``ladder_speedups`` relies on it
    steps = itertools.cycle(fns[-1:] + fns[:-1])

    def step():
        with applied(replace(rung, amp=False), device_type=zoo.device.type, dtype=None):
            next(steps)()
    return step


def train_epoch_samples(zoo: ModelZoo, rungs: Sequence[Rung], *, practitioner: bool = False
                        ) -> dict[tuple, list[float]]:
    """Seconds per epoch of training the float model each rung serves with its training
    techniques (bucketing, amp, sdpa; int8 comes after training), by ``Rung.key``; with
    ``practitioner``, ``PRACTITIONER`` too (dynamic padding), under ``("practitioner",)``. Each
    timed step runs one of a few batches of one epoch's plan (fixed padding: any; bucketed and
    dynamic: spread over the batch widths, in the order of their width), scaled to the epoch;
    their mean estimates the epoch. After a warm-up step each, the steps are interleaved in
    rounds, the order rotated from round to round and the fewer fixed-padding steps spread over
    the rounds, so drift hits all alike."""
    def padding(r):
        return "bucketed" if r.bucketing else "fixed"
    todo = {(r.distill, r.prune, r.bucketing, r.amp, r.sdpa): (r, padding(r)) for r in rungs}
    if practitioner:
        todo[("practitioner",)] = (PRACTITIONER, "dynamic")
    sample = {p: _epoch_sample(zoo, p) for p in {p for _, p in todo.values()}}
    steps = {k: _training_steps(zoo, r, sample[p][0]) for k, (r, p) in todo.items()}
    for step in steps.values():
        step()
    rounds = max((len(b) for b, _ in sample.values()), default=0)
    due = {k: {i * rounds // len(sample[p][0]) for i in range(len(sample[p][0]))}
           for k, (_, p) in todo.items()}
    times: dict[tuple, list[float]] = {k: [] for k in todo}
    for j in range(rounds):
        now = [(k, step) for k, step in steps.items() if j in due[k]]
        now = dict(now[j % len(now):] + now[:j % len(now)]) if now else {}
        for k, v in (bench.compare(now, warmup=0, repeats=1, device=zoo.device).items()
                     if now else ()):
            times[k].append(v["timing"].median)
    per = {k: [t * len(sample[p][1]) for t in times[k]] for k, (_, p) in todo.items()}
    out = {r.key: per[(r.distill, r.prune, r.bucketing, r.amp, r.sdpa)] for r in rungs}
    return out | ({("practitioner",): per[("practitioner",)]} if practitioner else {})


def _median(xs):
    return statistics.median(xs) if xs else None


def _mean(xs):
    return statistics.fmean(xs) if xs else None


def peak_mib(zoo: ModelZoo, inputs: Inputs, rung: Rung) -> float:
    """Peak memory of serving a batch of 32: the weights (``size_bytes``) plus the forward
    pass's own peak, CUDA's allocator peak or the peak RSS in a fresh process on a CPU
    (``bench.peak_rss``). With ``measure_memory=False``: the weights only."""
    weights = zoo.size_bytes(rung)
    ids, mask = typical_batch(zoo, inputs, rung, len(inputs.typical))
    if not zoo.settings.measure_memory:
        return weights / MiB
    if ids.device.type == "cuda":
        fn = forward_fn(zoo.model(rung), rung, ids, mask)
        return (weights + bench.cuda_peak_memory(fn, ids.device)) / MiB
    src = zoo.model(replace(rung, int8=False))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.pt"
        torch.save({"config": src.cfg.to_dict(), "state": src.state_dict(),
                    "ids": ids.cpu(), "mask": mask.cpu()}, path)
        extra = bench.peak_rss("course_lib.capstone.ladder_meters:serve_probe",
                               {"path": str(path), "int8": rung.int8, "amp": rung.amp,
                                "sdpa": rung.sdpa}, prepare=True).extra_bytes
    return (weights + extra) / MiB


def peaks_mib(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *, workers: int = 2
              ) -> dict[tuple, float]:
    """``peak_mib`` of each rung, by ``Rung.key``. On a CPU the fresh processes run ``workers``
    at a time: each process has its own peak RSS, so they do not disturb one another."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    parallel = zoo.settings.measure_memory and zoo.device.type != "cuda"
    with ThreadPoolExecutor(workers if parallel else 1) as pool:
        values = list(pool.map(lambda r: peak_mib(zoo, inputs, r), rungs))
    return {r.key: v for r, v in zip(rungs, values)}


def serve_probe(*, path: str, int8: bool, amp: bool, sdpa: bool, prepare: bool = False):
    """A CPU forward pass of a saved model on a saved batch, for ``bench.peak_rss``
    (``prepare=True`` returns it, built before the memory baseline is read)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = EncoderClassifier(EncoderConfig(**saved["config"]))
    model.load_state_dict(saved["state"])
    model = quant_dynamic.quantize_dynamic_int8(model) if int8 else model.eval()
    run = forward_fn(model, Rung("probe", amp=amp, sdpa=sdpa), saved["ids"], saved["mask"])
    return run if prepare else run()


def measure(zoo: ModelZoo, inputs: Inputs, rungs: Sequence[Rung], *,
            others: Sequence[Rung] = (), progress: bool = True,
            practitioner: dict | None = None) -> tuple[list[dict], dict[tuple, dict]]:
    """Measure ``rungs`` fully and ``others`` (e.g. ``combinations()``) for accuracy, latency
    and size, and the training time of every point that trains the teacher. Returns the rows
    of ``rungs`` and every point by ``Rung.key`` (None where a metric was not measured). Given
    a dict, ``practitioner`` is filled with ``PRACTITIONER``'s test set and training epoch,
    timed interleaved with the rungs' (its samples pair with theirs)."""
    points = list({r.key: r for r in [*others, *rungs]}.values())
    correct: dict[tuple, torch.Tensor] = {}   # one score per model and precision
    for r in tqdm(points, desc="accuracy", disable=not progress, leave=False):
        k = (*ModelZoo.key(r), r.amp)
        if k not in correct:
            correct[k] = rung_correct(zoo, inputs, r)
    acc = {k: float(v.float().mean()) for k, v in correct.items()}
    # Every repeat for the points whose speed-ups carry an error: the rungs, each technique
    # alone (the "speed-ups multiply" check divides by those) and every combination that lacks
    # one available technique (the guide's "on top" pairs); one for the other combinations.
    full, n_avail = {r.key for r in rungs}, max((len(r.techniques) for r in points), default=0)
    repeated = [*rungs, *(r for r in points if len(r.techniques) in (1, n_avail - 1)
                          and r.key not in full)]
    b1, b32, keys = {}, {}, {r.key for r in repeated}
    for group, repeats in ((repeated, None), ([r for r in points if r.key not in keys], 1)):
        if group:
            b1.update(latency_samples(zoo, inputs, group, batch_size=1, repeats=repeats))
            b32.update(latency_samples(zoo, inputs, group, batch_size=len(inputs.typical),
                                       repeats=repeats))
    # The test set is timed for the rungs and for every point on the accuracy-vs-latency front
    # (batch 32): the best configuration within an accuracy bound is one of those.
    scored = [{"key": r.key, "latency_b32_ms": statistics.median(b32[r.key]),
               "test_accuracy": acc[(*ModelZoo.key(r), r.amp)]} for r in points]
    front = {p["key"] for p in pareto_front(scored, x="latency_b32_ms")}
    extra = practitioner is not None
    test_s = test_set_samples(zoo, inputs, [*rungs, *(r for r in points
                                                     if r.key in front and r.key not in full)],
                              practitioner=extra)
    train_s = train_epoch_samples(zoo, [r for r in points if r.key in full
                                        or not (r.distill or r.prune)], practitioner=extra)
    design = {p: {"x": [b["input_ids"].shape[1] for b in batches], "population": widths}
              for p in ("bucketed", "dynamic")[:2 if extra else 1]
              for batches, widths in [_epoch_sample(zoo, p)]}
    if extra:
        k, teacher = ("practitioner",), (*ModelZoo.key(PRACTITIONER), False)
        if teacher not in correct:   # the rungs did not include the FP32 teacher
            correct[teacher] = rung_correct(zoo, inputs, PRACTITIONER)
            acc[teacher] = float(correct[teacher].float().mean())
        practitioner.update({"name": PRACTITIONER.name, "techniques": PRACTITIONER.techniques,
                             "test_accuracy": acc[teacher], "test_correct": correct[teacher],
                             "test_set_s": _median(test_s[k]), "train_epoch_s": _mean(train_s[k]),
                             "train_design": design["dynamic"],
                             "samples": {"test_set_s": test_s[k], "train_epoch_s": train_s[k]}})
    peak = peaks_mib(zoo, inputs, rungs)
    table = {r.key: {"name": r.name, "key": r.key, "techniques": r.techniques,
                     # where it ran: int8 models stay on the CPU even on a GPU machine
                     "device": model_device(zoo.model(r)).type,
                     "test_accuracy": acc[(*ModelZoo.key(r), r.amp)],
                     # each test review right or wrong, in test-split order (paired changes)
                     "test_correct": correct[(*ModelZoo.key(r), r.amp)],
                     "test_set_s": _median(test_s.get(r.key)),
                     "latency_b1_ms": _median(b1[r.key]), "latency_b32_ms": _median(b32[r.key]),
                     "train_epoch_s": _mean(train_s.get(r.key)),
                     # the widths its timed training steps stand for (ladder_speedups)
                     "train_design": design["bucketed"] if r.bucketing else None,
                     "size_bytes": zoo.size_bytes(r), "peak_mib": peak.get(r.key),
                     # every timed sample, for the errors of the speed-ups (ladder_speedups)
                     "samples": {"test_set_s": test_s.get(r.key, []), "latency_b1_ms": b1[r.key],
                                 "latency_b32_ms": b32[r.key],
                                 "train_epoch_s": train_s.get(r.key, [])}}
             for r in points}
    # the one estimate of an epoch
    for row in [*table.values(), *([practitioner] if extra else [])]:
        if row.get("train_design") and row["samples"]["train_epoch_s"]:
            row["train_epoch_s"] = epoch_estimate(row).value
    return [{**table[r.key], "name": r.name} for r in rungs], table
