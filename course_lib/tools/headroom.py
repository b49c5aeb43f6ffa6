"""Does the course's task leave room for accuracy effects to show? Six figures, one command.

Lessons 04-07, 12 and 14 judge accuracy claims on the course's model. A claim such as "2-bit
weights lose accuracy" or "distillation beats training the student from scratch" can only be
seen if the task is hard enough for a small or damaged model to do visibly worse than the
teacher. This module measures that headroom, with the lessons' own recipes:

    python -m course_lib.tools.headroom          # about four minutes on a 2-core CPU

prints (1) the order-free bag of words (``course_lib.core.bow``), (2) the stored teacher against
the bar the converged students set (``data/evidence/student_ceiling.json``: every seed of the
half-depth student trained from labels alone), (3) the
1-layer student from scratch and (4) distilled, trained to convergence (lesson 06's committed
``distillation_transfer`` evidence, which its live run replicates), (5) 8-bit vs
2-bit per-channel weights (lesson 07), (6) lesson 00's one-epoch training run, and the
regression model's error against predicting the mean (lesson 04). ``accuracy_by_rule`` is the
breakdown lesson 00 shows: accuracy on reviews that exercise each rule of the corpus.
"""
from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import dataclass

import torch

from course_lib.core.batching import make_loader
from course_lib.core.data import RULES, CorpusConfig, load_corpus
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import evaluate, predict

LENGTH_BINS = ((0, 40, "under 40 tokens"), (40, 100, "40-99 tokens"), (100, 10**9, "100+ tokens"))


def accuracy_by_rule(model: torch.nn.Module, dataset, *, device: torch.device | str = "cpu",
                     batch_size: int = 64) -> dict[str, dict[str, float]]:
    """Accuracy of ``model`` on the reviews of ``dataset`` that contain each rule, and by length.

    A review counts under every rule it contains (``Review.rules``), so the groups overlap;
    "all" is the whole split. Each entry: ``{"accuracy", "n"}``.
    """
    out, index = predict(model, make_loader(dataset, batch_size=batch_size, shuffle=False),
                         device=device)
    correct = defaultdict(int)
    total = defaultdict(int)
    for i, ok in zip(index.tolist(), out.argmax(-1).tolist()):
        review = dataset.reviews[i]
        hit = int(ok == review.label)
        n_tokens = len(review.text.split())
        groups = ["all", *review.rules]
        groups += [name for lo, hi, name in LENGTH_BINS if lo <= n_tokens < hi]
        for g in groups:
            correct[g] += hit
            total[g] += 1
    order = ["all", *RULES, *(name for _, _, name in LENGTH_BINS)]
    return {g: {"accuracy": correct[g] / total[g], "n": total[g]} for g in order if total[g]}


def rule_table(breakdowns: dict[str, dict[str, dict[str, float]]]) -> str:
    """A Markdown table: one row per group, one column per model (``{name: accuracy_by_rule}``)."""
    names = list(breakdowns)
    groups = list(next(iter(breakdowns.values())))
    head = "| reviews | n | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names) + "\n"
    rows = []
    for g in groups:
        n = next(iter(breakdowns.values()))[g]["n"]
        cells = " | ".join(f"{100 * breakdowns[m][g]['accuracy']:.1f}%" for m in names)
        rows.append(f"| {g} | {n:,} | {cells} |")
    return head + "\n".join(rows)


@dataclass(frozen=True)
class LessonRecipes:
    """The lessons' default knobs that the six figures depend on (kept equal to the notebooks'
    parameters cells by ``tests/test_bow_headroom.py``)."""

    distill_steps: int = 3000         # lesson 06 STEPS (full): distill.transfer.RECIPE's steps
    distill_batch: int = 32           # lesson 06 BATCH
    temperature: float = 2.0          # lesson 06 TEMPERATURE
    alpha: float = 0.5                # lesson 06 ALPHA
    first_run_preset: str = "student"  # lesson 00 TRAIN_PRESET
    first_run_epochs: int = 3         # lesson 00 TRAIN_EPOCHS
    first_run_lr: float = 2e-3        # lesson 00 TRAIN_LR
    reg_steps: int = 300              # lesson 04 REG_STEPS (full)
    reg_length: int = 64              # lesson 04 REG_LENGTH (full)
    reg_scale: float = 0.25           # lesson 04 CORPUS_SCALE (full)


def student_runs(*, recipes: LessonRecipes) -> dict[str, list[float]]:
    """The 1-layer student from scratch (labels alone) and distilled (soft targets on the whole
    transfer set), per seed, from lesson 06's committed ``distillation_transfer`` evidence;
    ValueError if that evidence was trained with another recipe than the lesson's."""
    from course_lib.distill import transfer
    from course_lib.tools.evidence import load_evidence

    ev = load_evidence("distillation_transfer")
    r = ev["recipe"]
    if (r["steps"], r["batch_size"], r["temperature"], r["alpha"]) != (
            recipes.distill_steps, recipes.distill_batch, recipes.temperature, recipes.alpha):
        raise ValueError("the distillation_transfer evidence was trained with "
                         f"steps {r['steps']}, batch {r['batch_size']}, T {r['temperature']}, "
                         f"alpha {r['alpha']}: not lesson 06's recipe")
    acc = transfer.from_evidence(ev)["accuracy"]
    return {"scratch": list(acc["scratch", 0].values()),
            "distilled": list(acc["soft", max(n for _, n in acc)].values())}


def regression_ratio(*, recipes: LessonRecipes, seeds=(0, 1, 2)) -> tuple[float, float]:
    """Lesson 04's regression check in FP32, with the lesson's own call
    (``precision.regression.run``): mean MAE over seeds, and its ratio to the MAE of
    predicting the training mean (below 1: the model learned something)."""
    from course_lib.precision import regression as pr

    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0),
                       scale=recipes.reg_scale)
    runs = pr.run(easy, recipes=["fp32"], seeds=seeds, steps=recipes.reg_steps,
                  length=recipes.reg_length)["fp32"]
    mae = pr.mean_mae(runs)
    return mae, mae / pr.predict_mean_mae(easy)[1]


def student_ceiling_bar() -> dict | None:
    """What a converged teacher must beat, from the committed ``student_ceiling`` evidence: every
    seed of the half-depth student trained to convergence from labels alone (its best seed; the
    spread says how much a seed decides). None if never run."""
    from course_lib.tools.evidence import load_evidence, summary
    try:
        rows = {r["model"]: r for r in summary(load_evidence("student_ceiling"))}
    except FileNotFoundError:
        return None
    half = rows["half"]
    best = max(half["test_accuracy"])
    return {"best": best, "spread": half["spread"], "bar": best, "seeds": len(half["seeds"]),
            "small_mean": rows["small"]["mean"] if "small" in rows else None}


def main(argv: list[str] | None = None) -> None:
    from course_lib.quant import int8 as quant
    from course_lib.core.bow import train_bag_of_words
    from course_lib.core.checkpoints import load_baseline
    from course_lib.core.model import build_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    recipes = LessonRecipes()
    corpus = load_corpus()
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    teacher, info = load_baseline(corpus)
    teacher_acc = evaluate(teacher, test)["accuracy"]
    bow_model, bow = train_bag_of_words(corpus)
    print(f"1. bag of words (order-free)          {bow['test']:.1%}   (target <= 70%)")
    ceiling = student_ceiling_bar()
    bar = (f"target > every converged half-depth student from labels alone: best of "
           f"{ceiling['seeds']} seeds "
           f"{ceiling['best']:.2%}, their spread {100 * ceiling['spread']:.2f} pts" if ceiling else
           "target: above the converged students "
           "(python -m course_lib.tools.evidence student_ceiling)")
    print(f"2. teacher ({info['source']})        {teacher_acc:.2%}   ({bar}; "
          f"trained in {info.get('train_seconds', float('nan')):.0f} s)")
    runs = student_runs(recipes=recipes)
    sm, ss = statistics.mean(runs["scratch"]), statistics.stdev(runs["scratch"])
    dm, ds = statistics.mean(runs["distilled"]), statistics.stdev(runs["distilled"])
    gap = teacher_acc - sm
    recovered = (dm - sm) / gap if gap > 0 else float("nan")
    print(f"3. student from scratch               {sm:.1%}, seed sd {100 * ss:.1f} pts  "
          f"({100 * gap:+.1f} pts below the teacher; target >= 5)")
    print(f"4. student distilled                  {dm:.1%}, seed sd {100 * ds:.1f} pts  "
          f"(recovers {recovered:.0%} of the gap; target >= 50%)")
    q8 = evaluate(quant.fake_quantize_model(teacher, bits=8, granularity="per_channel"), test)
    q2 = evaluate(quant.fake_quantize_model(teacher, bits=2, granularity="per_channel"), test)
    print(f"5. per-channel 8-bit / 2-bit weights  {q8['accuracy']:.1%} / {q2['accuracy']:.1%}  "
          f"({100 * (q8['accuracy'] - q2['accuracy']):+.1f} pts; target >= 5)")
    mine = build_model(len(corpus.vocab), preset=recipes.first_run_preset, seed=0)
    hist = train(mine, make_loader(corpus.train, batch_size=32, seed=0),
                 cfg=TrainConfig(epochs=recipes.first_run_epochs, lr=recipes.first_run_lr),
                 progress=False)
    print(f"6. lesson 00's own run                {evaluate(mine, test)['accuracy']:.1%}   "
          f"in {hist.seconds:.0f} s (target >= 80% within 60 s)")
    mae, ratio = regression_ratio(recipes=recipes)
    print(f"7. lesson 04's regression MAE         {mae:.3f} = {ratio:.2f} x predicting the mean "
          f"(target <= 0.6)")
    print("\nThe teacher by rule (test split):")
    print(rule_table({"bag of words": accuracy_by_rule(bow_model, corpus.test),
                      "teacher": accuracy_by_rule(teacher, corpus.test)}))


if __name__ == "__main__":
    main()
