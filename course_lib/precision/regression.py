"""Lesson 04's regression check: when does 16-bit training hurt a task that needs precise values?

The same small model learns the star rating (a regression head, MSE loss) under each recipe,
with the same steps, initialisation and batch order per seed, and is scored by its test MAE:

- ``"fp32"``: the reference;
- ``"bf16"``, ``"fp16"``: autocast (FP16 with a GradScaler): matmuls in 16 bits, the loss, the
  weights and their updates in FP32 (``amp.amp_train``);
- ``"fp16-pure"``: the whole model in FP16 (``model.half()``): weights, gradients and AdamW's
  moments in FP16, no master weights and no scaler. It fails for a reason that has nothing to
  do with regression (``half_adamw_step``: AdamW's epsilon rounds to 0), so lesson 04 shows that
  reason rather than training it.

**The condition that decides it: how large the targets are next to the error that matters.**
Under autocast the head is a matmul, so the prediction itself is a 16-bit number: FP16 keeps 11
significant bits, so a prediction near ``m`` is rounded to a multiple of ``spacing(m)``, about
``m / 1024`` (BF16: ``m / 128``). A rating of 1-5 stars is rounded to 0.002 stars, far below
the 0.4 stars a small model misses by: no effect can show. The same ratings stored as
``offset + stars`` (a target nobody standardised: a price, a timestamp, a year) are rounded to
``offset / 1024``; from some offset that rounding is the error. ``train_one(offset=...)`` adds
the offset to every target and starts the head's bias at the training targets' mean (every
recipe alike), so each recipe learns the same residual and only the precision differs.
``rounding_floor`` gives the exact MAE that the rounding alone costs a perfect prediction.

A run whose loss becomes NaN or inf is kept, not dropped: its MAE counts as infinite, so a
recipe that diverges on any seed is reported as infinitely worse than FP32 (``ratio_to_fp32``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch

from course_lib.precision.amp import amp_train, evaluate_amp
from course_lib.core.batching import make_loader
from course_lib.core.data import Corpus, ReviewDataset
from course_lib.core.model import build_model
from course_lib.core.optimizers import adamw
from course_lib.core.task import task_loss
from course_lib.core.train import train_step
from course_lib.measure.verdicts import Estimate, geometric_mean

RECIPES = ("fp32", "bf16", "fp16", "fp16-pure")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

__all__ = ["RECIPES", "RegressionRun", "train_one", "run", "sweep", "with_offset",
           "predict_mean_mae", "from_evidence", "learned", "ratio_to_fp32", "mean_mae",
           "rounding_floor", "half_adamw_step"]


@dataclass(frozen=True)
class RegressionRun:
    recipe: str
    seed: int
    mae: float              # test MAE in stars; inf when training diverged
    skipped_steps: int      # steps the GradScaler skipped (FP16 autocast only)
    diverged_at: int | None  # first step whose loss was not finite, or None
    offset: float = 0.0     # stars added to every target


def with_offset(corpus: Corpus, offset: float) -> Corpus:
    """``corpus`` with ``offset`` stars added to every rating (texts and labels unchanged)."""
    if not math.isfinite(offset) or offset < 0:
        raise ValueError(f"offset must be a finite number >= 0, got {offset}")
    if offset == 0:
        return corpus
    def shifted(ds: ReviewDataset) -> ReviewDataset:
        return ReviewDataset([replace(r, rating=r.rating + offset) for r in ds.reviews], ds.vocab)
    return replace(corpus, train=shifted(corpus.train), val=shifted(corpus.val),
                   test=shifted(corpus.test), transfer=shifted(corpus.transfer))


def train_one(corpus, recipe: str, *, seed: int, steps: int, length: int, offset: float = 0.0,
              lr: float = 2e-3, batch_size: int = 16,
              device: torch.device | str = "cpu") -> RegressionRun:
    """Train the student preset on ``corpus``'s ratings plus ``offset`` with ``recipe`` (one of
    ``RECIPES``), its head's bias started at the training targets' mean, and score it on the
    test split."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    data = with_offset(corpus, offset)
    model = build_model(len(data.vocab), preset="student", n_outputs=1, seed=seed)
    with torch.no_grad():
        model.head.bias.fill_(predict_mean_mae(data)[0])
    pure = recipe == "fp16-pure"
    if pure:
        model.half()
    autocast = "fp32" if pure else recipe
    hist = amp_train(model, make_loader(data.train, batch_size=batch_size, seed=seed,
                                        max_length=length),
                     precision_name=autocast, device=device, steps=steps, lr=lr, task="regression",
                     seed=seed)
    bad = [i for i, v in enumerate(hist.loss) if not math.isfinite(v)]
    test = make_loader(data.test, batch_size=64, shuffle=False, max_length=length)
    mae = evaluate_amp(model, test, device=device, task="regression",
                       precision_name=autocast)["mae"]
    return RegressionRun(recipe, seed, mae if math.isfinite(mae) and not bad else math.inf,
                         hist.skipped_steps, bad[0] if bad else None, float(offset))


def run(corpus, *, recipes: Iterable[str] = ("fp32", "bf16", "fp16"),
        seeds: Iterable[int] = (0, 1, 2), steps: int, length: int, offset: float = 0.0,
        device: torch.device | str = "cpu",
        progress: Callable[[Iterable], Iterable] = iter) -> dict[str, list[RegressionRun]]:
    """``train_one`` for every seed and recipe at one ``offset`` (seeds outermost, so an
    interrupted run still holds every recipe for the seeds done). ``progress`` wraps the seed
    loop (e.g. tqdm)."""
    recipes, seeds = list(recipes), list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    if "fp32" not in recipes:
        raise ValueError(f"recipes must include 'fp32' (the reference), got {recipes}")
    out: dict[str, list[RegressionRun]] = {r: [] for r in recipes}
    for seed in progress(seeds):
        for r in recipes:
            out[r].append(train_one(corpus, r, seed=seed, steps=steps, length=length,
                                    offset=offset, device=device))
    return out


def sweep(corpus, *, offsets: Iterable[float], progress: Callable[[Iterable], Iterable] = iter,
          **kwargs) -> dict[float, dict[str, list[RegressionRun]]]:
    """``run`` at each offset (the condition): {offset: {recipe: [one run per seed]}}."""
    offsets = list(offsets)
    if not offsets:
        raise ValueError("offsets must hold at least one offset")
    return {float(o): run(corpus, offset=o, **kwargs) for o in progress(offsets)}


def from_evidence(evidence: dict) -> dict[float, dict[str, list[RegressionRun]]]:
    """The committed ``fp16_regression`` evidence (``tools.evidence``) as ``sweep`` returns it."""
    out: dict[float, dict[str, list[RegressionRun]]] = {}
    for r in sorted(evidence["runs"], key=lambda r: (r["offset"], r["seed"])):
        out.setdefault(float(r["offset"]), {}).setdefault(r["recipe"], []).append(
            RegressionRun(r["recipe"], r["seed"], float(r["mae"]), r["skipped_steps"],
                          r["diverged_at"], float(r["offset"])))
    return out


def learned(runs: dict[str, list[RegressionRun]], predict_mean: float) -> bool:
    """The headroom rule: FP32's mean test MAE is at most 0.9 × predicting the training mean's
    (a model that learned nothing cannot show a precision effect)."""
    return mean_mae(runs["fp32"]) <= 0.9 * predict_mean


def predict_mean_mae(corpus) -> tuple[float, float]:
    """(the training ratings' mean, the test MAE of always predicting it): the floor a model
    that learned something must clearly beat."""
    mean = sum(r.rating for r in corpus.train.reviews) / len(corpus.train)
    return mean, sum(abs(r.rating - mean) for r in corpus.test.reviews) / len(corpus.test)


def ratio_to_fp32(runs: dict[str, list[RegressionRun]], recipe: str) -> Estimate:
    """Geometric mean over seeds of (``recipe``'s MAE ÷ FP32's MAE on the same seed), with its
    standard error and degrees of freedom (``verdicts.geometric_mean``: ratios multiply). A
    diverged run makes the ratio infinite (standard error 0: no interval reaches back from
    infinity)."""
    ratios = [a.mae / b.mae for a, b in zip(runs[recipe], runs["fp32"], strict=True)]
    if any(math.isinf(x) for x in ratios):
        return Estimate(math.inf, 0.0, len(ratios) - 1 or math.inf)
    return geometric_mean(ratios)


def mean_mae(runs: list[RegressionRun]) -> float:
    return statistics.mean(r.mae for r in runs)


def rounding_floor(targets: Iterable[float], dtype: str | torch.dtype) -> float:
    """The MAE a *perfect* prediction of ``targets`` gets from being stored in ``dtype``
    ("bf16", "fp16" or a torch dtype): exact, by rounding each target and measuring the error."""
    dtype = DTYPES.get(dtype, dtype)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or a torch dtype, got {dtype!r}")
    t = torch.tensor(list(targets), dtype=torch.float64)
    if t.numel() == 0:
        raise ValueError("targets must not be empty")
    return float((t.to(dtype).double() - t).abs().mean())


def half_adamw_step(model: torch.nn.Module, batch: dict, *, eps: float, task: str = "regression",
                    lr: float = 1e-3) -> dict[str, float]:
    """One AdamW step on a copy of ``model`` in pure FP16 (``model.half()``), with ``eps``:
    {"eps_in_fp16": eps as FP16 stores it, "nonfinite": share of parameters that are NaN/inf
    after the step}. With AdamW's default eps = 1e-8, which FP16 rounds to 0, a weight whose
    gradient is exactly 0 (an embedding row no review used) gets the update 0 / (0 + 0) = NaN."""
    import copy
    m = copy.deepcopy(model).half().train()
    opt = adamw(m, lr=lr)
    for g in opt.param_groups:
        g["eps"] = eps
    train_step(m, batch, opt, device=next(m.parameters()).device, dtype=None,
               loss_fn=task_loss(task))
    n = sum(p.numel() for p in m.parameters())
    bad = sum(int((~torch.isfinite(p)).sum()) for p in m.parameters())
    return {"eps_in_fp16": float(torch.tensor(eps, dtype=torch.float16)), "nonfinite": bad / n}
