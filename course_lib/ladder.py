"""The optimization ladder (lesson 11): every technique of the course on one model, measured.

Glue only, each technique is its lesson's function: ``bucketing`` (``batching.make_loader``,
02), ``amp`` (autocast in ``amp.choose_precision``'s dtype, 04), ``distill`` (a 1-layer student,
``distill.distill``, 06), ``prune`` (``pruning.prune_ffn_neurons`` + ``fine_tune``, 05), ``int8``
(``quant.quantize_dynamic_int8``, CPU kernels, 07), ``sdpa`` (SDPA's fused kernel instead of its
math backend, 09). The baseline: the teacher, padded to ``fixed_length``, FP32, math attention.
PyTorch's encoder fast path is off everywhere: it does not apply to training and int8 needs it
off (lesson 07), so with it on the rungs could not be compared.

A ``Rung`` says which techniques are on (``ladder``: one more per rung; ``combinations``: every
subset); ``Pipeline`` builds each model once and measures rungs; ``measure`` fills the table.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import re
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import Subset
from tqdm.auto import tqdm

from . import bench, pruning, quant
from .amp import choose_precision, make_step_fn
from .batching import BucketBatchSampler, make_loader
from .amp import ACCURACY_TOLERANCE_POINTS as AMP_TOLERANCE
from .distill import ACCURACY_TOLERANCE_POINTS as DISTILL_TOLERANCE
from .distill import DistillSet, distill
from .models import EncoderClassifier, EncoderConfig, build_model, mha_fastpath
from .padding import Collate, pad_batch
from .train import TrainConfig

TECHNIQUES = ("bucketing", "amp", "distill", "prune", "int8", "sdpa")
RUNG_NAMES = {"bucketing": "bucketing", "amp": "mixed_precision", "distill": "distillation",
              "prune": "pruning", "int8": "int8", "sdpa": "sdpa"}
METRICS = {"test_accuracy": "fraction", "test_set_s": "s", "latency_b1_ms": "ms",
           "latency_b32_ms": "ms", "train_epoch_s": "s", "size_bytes": "bytes", "peak_mib": "MiB"}
# Largest accuracy loss (points) each lesson promised for its technique, against its input:
# exact padding and attention (01, 09), int8 (07), pruning + fine-tune (05), the student (06).
# The accuracy (points) each technique may cost, as its own module states it (lessons 04-07
# judge their claims with the same numbers). Bucketing and SDPA have no bound here: the ladder
# scores each model's accuracy once, with plain batches and math attention, so a rung that only
# adds them reuses the same accuracy and a check could not fail (lessons 01, 02 and 09 measure
# that they change outputs by rounding only).
BOUNDS = {"amp": AMP_TOLERANCE, "distill": DISTILL_TOLERANCE,
          "prune": pruning.ACCURACY_TOLERANCE_POINTS, "int8": quant.INT8_ACCURACY_TOLERANCE_POINTS}
ACCURACY_NEUTRAL = ("bucketing", "sdpa")
MiB = 2**20


@dataclass(frozen=True)
class Rung:
    """One configuration: its name and which techniques are on."""
    name: str
    bucketing: bool = False
    amp: bool = False
    distill: bool = False
    prune: bool = False
    int8: bool = False
    sdpa: bool = False

    def __post_init__(self):
        if not re.match(r"^[a-z][a-z0-9_]*$", self.name):
            raise ValueError(f"name must be snake_case ([a-z][a-z0-9_]*), got {self.name!r}")

    @property
    def key(self) -> tuple[bool, ...]:
        return tuple(getattr(self, t) for t in TECHNIQUES)

    @property
    def techniques(self) -> tuple[str, ...]:
        return tuple(t for t in TECHNIQUES if getattr(self, t))


def ladder(order: Sequence[str] = TECHNIQUES) -> list[Rung]:
    """The baseline, then one more technique per rung, in ``order`` (cumulative)."""
    order = tuple(order)
    if any(t not in TECHNIQUES for t in order) or len(set(order)) != len(order):
        raise ValueError(f"order must list distinct techniques from {TECHNIQUES}, got {order}")
    rungs = [Rung("baseline")]
    for t in order:
        rungs.append(replace(rungs[-1], name=RUNG_NAMES[t], **{t: True}))
    return rungs


def combinations() -> list[Rung]:
    """Every subset of the techniques (64 rungs), named by what is on ("baseline": none)."""
    return [Rung("_".join(on) or "baseline", **{t: True for t in on})
            for n in range(len(TECHNIQUES) + 1) for on in itertools.combinations(TECHNIQUES, n)]


@dataclass(frozen=True)
class Settings:
    """What is built and how it is measured (the lesson's parameters cell sets these)."""
    fixed_length: int = 512         # the baseline's padding
    train_batch: int = 32           # training batch size (the baseline's recipe)
    eval_batch: int = 64            # test-set batch size
    fixed_train_batches: int = 2    # timed steps at fixed padding (every batch costs the same)
    bucket_train_batches: int = 8   # timed bucketed steps, spread over the epoch's batch widths
    fixed_test_reviews: int = 128   # test reviews timed at fixed padding, scaled to the test set
    warmup: int = 1
    repeats: int = 3                # latency repeats of the rungs (other points: one)
    test_repeats: int = 2           # test-set passes per rung
    distill_steps: int = 400
    distill_lr: float = 2e-3
    prune_amount: float = 0.5       # share of feed-forward neurons removed
    finetune_steps: int = 40
    finetune_lr: float = 5e-4
    measure_memory: bool = True     # False: peak memory = the weights only (a lower bound)

    def validate(self) -> None:
        for f in fields(self):
            v, low = getattr(self, f.name), 0 if f.name == "warmup" else 1
            if (f.type == "int" and v < low) or (f.type == "float" and not 0 < v < 1):
                need = f">= {low}" if f.type == "int" else "in (0, 1)"
                raise ValueError(f"{f.name} must be {need}, got {v}")


@contextlib.contextmanager
def applied(rung: Rung, *, device_type: str, dtype: torch.dtype | None) -> Iterator[None]:
    """The run-time techniques of ``rung`` in a block: autocast in ``dtype`` if ``amp``, SDPA's
    math backend unless ``sdpa``, and the encoder fast path off (see the module docstring)."""
    dtype = dtype if rung.amp else None
    kernels = contextlib.nullcontext() if rung.sdpa else sdpa_kernel([SDPBackend.MATH])
    with mha_fastpath(False), kernels, torch.amp.autocast(
            device_type=device_type, dtype=dtype or torch.float32, enabled=dtype is not None):
        yield


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class Pipeline:
    """Builds the model each rung serves (each model once) and measures rungs (cached)."""

    def __init__(self, teacher: EncoderClassifier, corpus, *, device: torch.device | str,
                 settings: Settings = Settings(), seed: int = 0, progress: bool = True):
        settings.validate()
        self.device = torch.device(device)
        self.teacher = teacher.eval().to(self.device)
        self.corpus, self.s, self.seed, self.progress = corpus, settings, seed, progress
        self.build_seconds: dict[str, float] = {}
        self._cache: dict[tuple, object] = {}
        n = corpus.test.lengths
        mid = statistics.median(n)
        by_mid = sorted(range(len(n)), key=lambda i: abs(n[i] - mid))
        self.typical = [corpus.test[i]["input_ids"] for i in by_mid[:32]]  # a typical bucket
        self.fixed_subset = sorted(torch.randperm(len(n), generator=torch.Generator().manual_seed(
            seed))[:settings.fixed_test_reviews].tolist())

    def _memo(self, key: tuple, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def model(self, rung: Rung) -> nn.Module:
        """The model ``rung`` serves, in eval mode (int8 runs on the CPU, lesson 07)."""
        return self._memo(("model", rung.distill, rung.prune, rung.int8), lambda: self._build(rung))

    def _build(self, rung: Rung) -> nn.Module:
        if not (rung.int8 or rung.prune or rung.distill):
            return self.teacher
        t0, s = time.perf_counter(), self.s
        if rung.int8:
            model = quant.quantize_dynamic_int8(self.model(replace(rung, int8=False)))
        elif rung.prune:
            model = pruning.prune_ffn_neurons(self.model(replace(rung, prune=False)),
                                              amount=s.prune_amount)
            loader = make_loader(self.corpus.train, batch_size=s.train_batch, seed=self.seed)
            pruning.fine_tune(model, loader, steps=s.finetune_steps, lr=s.finetune_lr,
                              device=self.device, seed=self.seed, progress=self.progress)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                model = build_model(self.teacher.cfg.vocab_size, preset="student",
                                    max_len=self.teacher.cfg.max_len)
            loader = make_loader(DistillSet(self.corpus.train, self.corpus.transfer),
                                 batch_size=s.train_batch, seed=self.seed)
            cfg = TrainConfig(epochs=math.ceil(s.distill_steps / len(loader)), lr=s.distill_lr,
                              seed=self.seed)
            with mha_fastpath(False):   # the teacher's forward passes, as everywhere here
                distill(model, self.teacher, loader, cfg=cfg, max_steps=s.distill_steps,
                        device=self.device, progress=self.progress)
        self.build_seconds["_".join(t for t in ("distill", "prune", "int8")
                                    if getattr(rung, t))] = time.perf_counter() - t0
        return model.eval()

    def size_bytes(self, rung: Rung) -> int:
        """Size on disk: bytes of ``torch.save(state_dict)`` (``quant.state_dict_bytes``)."""
        model = self.model(rung)
        return quant.state_dict_bytes(model.model if isinstance(model, quant.NoFastPath) else model)

    def _forward(self, rung: Rung, ids: torch.Tensor, mask: torch.Tensor):
        model, dtype = self.model(rung), choose_precision(ids.device).dtype

        def run():
            with torch.inference_mode(), applied(rung, device_type=ids.device.type, dtype=dtype):
                return model(ids, mask)
        return run

    def _batch(self, rung: Rung, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask, _ = pad_batch(self.typical[:size],
                                 max_length=None if rung.bucketing else self.s.fixed_length)
        dev = _device(self.model(rung))
        return ids.to(dev), mask.to(dev)

    def _test_loader(self, rung: Rung):
        if rung.bucketing:
            return make_loader(self.corpus.test, batch_size=self.s.eval_batch, shuffle=False)
        return make_loader(Subset(self.corpus.test, self.fixed_subset), bucketed=False,
                           batch_size=self.s.eval_batch, shuffle=False,
                           max_length=self.s.fixed_length)

    def logits(self, rung: Rung, loader) -> tuple[torch.Tensor, torch.Tensor]:
        """``rung``'s outputs (float, on the CPU) for every item of ``loader``, and their
        dataset indices, with the rung's run-time techniques."""
        outs, index = [], []
        for b in loader:
            dev = _device(self.model(rung))
            ids, mask = b["input_ids"].to(dev), b["attention_mask"].to(dev)
            outs.append(self._forward(rung, ids, mask)().float().cpu())
            index.append(b["index"])
        return torch.cat(outs), torch.cat(index)

    def accuracy(self, rung: Rung) -> float:
        """Test accuracy of the model ``rung`` serves, in its precision. Padding (masked) and the
        attention kernel change float rounding only (lessons 01, 09; checked by the tests): one
        pass per model and precision, with dynamic padding and the fused kernel."""
        def run():
            r = replace(rung, bucketing=True, sdpa=True)
            out, index = self.logits(r, self._test_loader(r))
            labels = torch.tensor([self.corpus.test[int(i)]["label"] for i in index])
            return float((out.argmax(-1) == labels).float().mean())
        return self._memo(("acc", rung.distill, rung.prune, rung.int8, rung.amp), run)

    def latencies(self, rungs: Sequence[Rung], *, batch_size: int,
                  repeats: int | None = None) -> dict[tuple, float]:
        """Median ms of a forward pass on ``batch_size`` test reviews of median length (a typical
        bucket; padded to ``fixed_length`` without bucketing), interleaved; by ``Rung.key``."""
        if not 1 <= batch_size <= len(self.typical):
            raise ValueError(f"batch_size must be in [1, {len(self.typical)}], got {batch_size}")
        res = bench.compare({r.key: self._forward(r, *self._batch(r, batch_size)) for r in rungs},
                            warmup=self.s.warmup, repeats=repeats or self.s.repeats,
                            device=self.device)
        return {k: v["timing"].median * 1e3 for k, v in res.items()}

    def test_set_seconds(self, rungs: Sequence[Rung]) -> dict[tuple, float]:
        """Seconds to run the whole test set, interleaved, by ``Rung.key``. At fixed padding
        every batch costs the same: ``fixed_test_reviews`` are timed and the time scaled. No
        warm-up: ``accuracy`` and ``latencies`` ran every model before."""
        loaders = {r.key: self._test_loader(r) for r in rungs}
        res = bench.compare({r.key: functools.partial(self.logits, r, loaders[r.key])
                             for r in rungs}, warmup=0, repeats=self.s.test_repeats,
                            device=self.device)
        return {k: v["timing"].median * len(self.corpus.test) / len(loaders[k].dataset)
                for k, v in res.items()}

    def train_epoch_seconds(self, rungs: Sequence[Rung]) -> dict[tuple, float]:
        """Seconds per epoch (training split, AdamW) of training the float model each rung
        serves with its training techniques (bucketing, amp, sdpa; int8 comes after training),
        by ``Rung.key``: training steps (``amp.make_step_fn``) on a few batches of one epoch's
        plan, scaled to the epoch. Fixed padding: any batches (all cost the same); bucketed:
        spread over the range of batch widths. After a warm-up step each, the rungs' steps are
        interleaved in rounds (``bench.compare``), the fewer fixed-padding steps spread over
        the rounds, so that drift hits every rung alike."""
        def tkey(r):
            return ("train", r.distill, r.prune, r.bucketing, r.amp, r.sdpa)
        todo = {tkey(r): r for r in rungs if tkey(r) not in self._cache}
        sample = {b: self._epoch_sample(b) for b in {r.bucketing for r in todo.values()}}
        steps = {k: self._steps(r, sample[r.bucketing][0]) for k, r in todo.items()}
        for step in steps.values():
            step()
        rounds = max((len(b) for b, _ in sample.values()), default=0)
        due = {k: {i * rounds // len(sample[r.bucketing][0])
                   for i in range(len(sample[r.bucketing][0]))} for k, r in todo.items()}
        times: dict[tuple, list[float]] = {k: [] for k in todo}
        for j in range(rounds):
            now = {k: step for k, step in steps.items() if j in due[k]}
            for k, v in bench.compare(now, warmup=0, repeats=1, device=self.device).items():
                times[k].append(v["timing"].median)
        for k, r in todo.items():
            self._cache[k] = statistics.fmean(times[k]) * sample[r.bucketing][1]
        return {r.key: self._cache[tkey(r)] for r in rungs}

    def _epoch_sample(self, bucketing: bool) -> tuple[list[dict], int]:
        n, s = self.corpus.train.lengths, self.s
        if bucketing:
            plan = list(BucketBatchSampler(n, batch_size=s.train_batch, seed=self.seed))
            k, cost = s.bucket_train_batches, lambda b: max(n[i] for i in b)
        else:
            perm = torch.randperm(len(n), generator=torch.Generator().manual_seed(self.seed))
            plan = [perm[i:i + s.train_batch].tolist() for i in range(0, len(n), s.train_batch)]
            k, cost = s.fixed_train_batches, len
        k, by_cost = min(k, len(plan)), sorted(plan, key=cost)
        collate = Collate(max_length=None if bucketing else s.fixed_length)
        return [collate([self.corpus.train[i] for i in by_cost[(2 * j + 1) * len(plan) // (2 * k)]])
                for j in range(k)], len(plan)

    def _steps(self, rung: Rung, batches: list[dict]):
        """One training step per call, cycling over ``batches``, on a copy of the float model
        (it may be the teacher, which ``distill`` froze: the copy trains again)."""
        model = copy.deepcopy(self.model(replace(rung, int8=False))).requires_grad_(True)
        name = choose_precision(self.device).name if rung.amp else "fp32"
        steps = itertools.cycle([make_step_fn(model, b, precision_name=name, device=self.device)
                                 for b in batches])

        def step():
            with applied(replace(rung, amp=False), device_type=self.device.type, dtype=None):
                next(steps)()
        return step

    def peak_mib(self, rung: Rung) -> float:
        """Peak memory of serving a batch of 32: the weights (``size_bytes``) plus the forward
        pass's own peak, CUDA's allocator peak or the peak RSS in a fresh process on a CPU
        (``bench.peak_rss``). With ``measure_memory=False``: the weights only."""
        def run():
            weights = self.size_bytes(rung)
            ids, mask = self._batch(rung, len(self.typical))
            if not self.s.measure_memory:
                return weights / MiB
            if ids.device.type == "cuda":
                return (weights + bench.cuda_peak_memory(self._forward(rung, ids, mask),
                                                         ids.device)) / MiB
            src = self.model(replace(rung, int8=False))
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "probe.pt"
                torch.save({"config": src.cfg.to_dict(), "state": src.state_dict(),
                            "ids": ids.cpu(), "mask": mask.cpu()}, path)
                extra = bench.peak_rss("course_lib.ladder:serve_probe",
                                       {"path": str(path), "int8": rung.int8, "amp": rung.amp,
                                        "sdpa": rung.sdpa}, prepare=True).extra_bytes
            return (weights + extra) / MiB
        return self._memo(("peak",) + rung.key, run)


def serve_probe(*, path: str, int8: bool, amp: bool, sdpa: bool, prepare: bool = False):
    """A CPU forward pass of a saved model on a saved batch, for ``bench.peak_rss``
    (``prepare=True`` returns it, built before the memory baseline is read)."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = EncoderClassifier(EncoderConfig(**saved["config"]))
    model.load_state_dict(saved["state"])
    model = quant.quantize_dynamic_int8(model) if int8 else model.eval()

    def run():
        with torch.inference_mode(), applied(Rung("probe", amp=amp, sdpa=sdpa), device_type="cpu",
                                             dtype=choose_precision("cpu").dtype):
            model(saved["ids"], saved["mask"])
    return run if prepare else run()


def measure(pipe: Pipeline, rungs: Sequence[Rung], *, others: Sequence[Rung] = (),
            progress: bool = True) -> tuple[list[dict], dict[tuple, dict]]:
    """Measure ``rungs`` fully and ``others`` (e.g. ``combinations()``) for accuracy, latency
    and size, and the training time of every point that trains the teacher. Returns the rows
    of ``rungs`` and every point by ``Rung.key`` (None where a metric was not measured)."""
    points = list({r.key: r for r in [*others, *rungs]}.values())
    for r in tqdm(points, desc="accuracy", disable=not progress, leave=False):
        pipe.accuracy(r)
    b1, b32, full = {}, {}, {r.key for r in rungs}
    for group, repeats in ((rungs, None), ([r for r in points if r.key not in full], 1)):
        if group:
            b1.update(pipe.latencies(group, batch_size=1, repeats=repeats))
            b32.update(pipe.latencies(group, batch_size=len(pipe.typical), repeats=repeats))
    test_s = pipe.test_set_seconds(rungs)
    trained = [r for r in points if r.key in full or not (r.distill or r.prune)]
    train_s = pipe.train_epoch_seconds(trained)
    table = {r.key: {"name": r.name, "key": r.key, "techniques": r.techniques,
                     # where it ran: int8 models stay on the CPU even on a GPU machine
                     "device": _device(pipe.model(r)).type,
                     "test_accuracy": pipe.accuracy(r), "test_set_s": test_s.get(r.key),
                     "latency_b1_ms": b1[r.key], "latency_b32_ms": b32[r.key],
                     "train_epoch_s": train_s.get(r.key),
                     "size_bytes": pipe.size_bytes(r),
                     "peak_mib": pipe.peak_mib(r) if r.key in full else None} for r in points}
    return [{**table[r.key], "name": r.name} for r in rungs], table


def record(rows: Sequence[dict], rec) -> None:
    """``<rung>_<metric>`` for every rung and metric (units in ``METRICS``), each with the
    device the rung ran on."""
    for row in rows:
        for metric, unit in METRICS.items():
            rec.record(f"{row['name']}_{metric}", row[metric], unit, device=row["device"])


def summary(rows: Sequence[dict], points: dict[tuple, dict], *,
            max_drop_points: float = 2.0) -> dict:
    """The best inference rung (fastest test set within ``max_drop_points`` of the baseline's
    accuracy) and the best training configuration among those that train the teacher (a
    smaller model training faster is not a training technique), against the baseline."""
    if max_drop_points < 0:
        raise ValueError(f"max_drop_points must be >= 0, got {max_drop_points}")
    base = rows[0]
    drop = {r["name"]: 100 * (base["test_accuracy"] - r["test_accuracy"]) for r in rows}
    inf = min((r for r in rows if drop[r["name"]] <= max_drop_points),
              key=lambda r: r["test_set_s"])
    trn = min((p for p in points.values() if p["train_epoch_s"] is not None
               and not {"distill", "prune"} & set(p["techniques"])),
              key=lambda p: p["train_epoch_s"])
    return {"best_inference": inf["name"],
            "best_inference_speedup": base["test_set_s"] / inf["test_set_s"],
            "best_inference_accuracy_drop_points": drop[inf["name"]],
            "best_training": trn["name"],
            "best_training_speedup": base["train_epoch_s"] / trn["train_epoch_s"]}


def bound_checks(rows: Sequence[dict]) -> list[dict]:
    """Each rung against the rung below it: the accuracy change in points, the bound
    (``BOUNDS``) of the technique it adds, and whether the loss stays within it. A rung that
    adds only ``ACCURACY_NEUTRAL`` techniques gets ``bound_points`` and ``ok`` None: its
    accuracy is the rung below's by construction, so there is nothing to check."""
    out = []
    for below, row in zip(rows, rows[1:]):
        added = [t for t in row["techniques"] if t not in below["techniques"]]
        change = 100 * (row["test_accuracy"] - below["test_accuracy"])
        bounded = [BOUNDS[t] for t in added if t not in ACCURACY_NEUTRAL]
        bound = min(bounded) if bounded else None
        out.append({"rung": row["name"], "added": added, "change_points": change,
                    "bound_points": bound,
                    "ok": None if bound is None else -change <= bound + 1e-9})
    return out


def pareto_front(points: Sequence[dict], *, x: str = "latency_b32_ms") -> list[dict]:
    """The points no other point beats on both ``x`` (lower is better) and accuracy."""
    front, best = [], -math.inf
    for p in sorted(points, key=lambda p: (p[x], -p["test_accuracy"])):
        if p["test_accuracy"] > best:
            front.append(p)
            best = p["test_accuracy"]
    return front


def effect(points: dict[tuple, dict], technique: str, *, metric: str) -> dict | None:
    """What switching ``technique`` on does to ``metric``: a factor before / after (> 1: it
    helps a time or size); for accuracy, the change in points. ``alone``: on the baseline;
    ``on_top``: with the most other techniques on; ``median``: over every measured pair of
    points that differ only in it. None when no pair was measured."""
    if technique not in TECHNIQUES:
        raise ValueError(f"technique must be one of {TECHNIQUES}, got {technique!r}")
    i, pairs = TECHNIQUES.index(technique), {}
    for key, row in points.items():
        on = points.get(key[:i] + (True,) + key[i + 1:])
        if not key[i] and on and row[metric] is not None and on[metric] is not None:
            a, b = row[metric], on[metric]
            pairs[key] = 100 * (b - a) if metric == "test_accuracy" else a / b
    if not pairs:
        return None
    top = max(pairs, key=sum)
    return {"alone": pairs.get((False,) * len(TECHNIQUES)), "on_top": pairs[top],
            "on_top_of": tuple(t for t, on in zip(TECHNIQUES, top) if on),
            "median": statistics.median(pairs.values()), "pairs": len(pairs)}

