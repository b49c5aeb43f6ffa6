"""Evidence runs: the measurements a live lesson cannot afford, committed with their command.

A lesson on a 2-core CPU can train a model for a minute or two. Some claims need more than that
to be decided (several seeds, training to convergence), so the course runs them once, by a
command, and commits what they measured as ``data/evidence/<name>.json``: the command, the
hardware, the torch version, the seeds, the budget and every curve. A lesson then shows its
live run as one replicate beside the evidence's band, and says which evidence its verdict
rests on.

    python -m course_lib.tools.evidence --list
    python -m course_lib.tools.evidence teacher_convergence   # ~35 min on a 2-core CPU
    python -m course_lib.tools.evidence student_ceiling       # ~15 min, after the baseline
    python -m course_lib.tools.evidence fp16_regression --seeds 0 1 2 3 4 5   # ~35 min
    python -m course_lib.tools.evidence sorted_batching --seeds 0 1 2 3 4 5 6 7   # ~25 min
    python -m course_lib.tools.evidence pruning_budget --seeds 0 1 2 3            # ~40 min
    python -m course_lib.tools.evidence distillation_transfer --seeds 0 1 2 3     # ~60 min
    python -m course_lib.tools.evidence ddp_stability --seeds $(seq 0 15)         # ~25 min
    python -m course_lib.tools.evidence ddp_speed --rounds 10                     # ~6 min
    python -m course_lib.tools.evidence optimizer_race --seeds 0 1 2 3            # ~35 min
    python -m course_lib.tools.evidence int8_topic_task --seeds 0 1 2             # ~5 min
    python -m course_lib.tools.evidence ladder_multiply --rounds 20               # ~5 min
    python -m course_lib.tools.evidence gqa_uptrain --seeds 1 2 3                 # ~8 min
    python -m course_lib.tools.evidence int8_throughput --rounds 5                # ~2 min
    python -m course_lib.tools.evidence sparse_over_length --rounds 5             # ~2 min
    python -m course_lib.tools.evidence lowrank_over_length --rounds 5            # ~1 min

``teacher_convergence`` trains the baseline's recipe (``core.checkpoints.BaselineRecipe``) from
several seeds with the validation accuracy after every epoch: the evidence that its budget is
where validation accuracy stops improving. ``--ship`` also writes the seed-0 model as the
course's baseline (the same file ``python -m course_lib.tools.checkpoints`` trains).

``student_ceiling`` trains lesson 06's students from random weights on the 4,000 labelled
reviews alone (no teacher, no extra data) until their validation accuracy stops improving:
the best a student reaches without distillation, which is where distillation can add anything.

``fp16_regression`` trains lesson 04's regression check (``precision.regression``) in FP32, BF16
and FP16 autocast at each target offset of ``REGRESSION_OFFSETS``, several seeds each: the
seeds resolve a 10% change of the test error, which one live run cannot.

``sorted_batching`` trains lesson 02's student with the article's sorted, never-shuffled
batches and with shuffled buckets (``packing.order``), paired by seed, for each budget of
``SORTED_BUDGETS`` epochs, and scores each on the test split: whether the sawtooth costs
accuracy once the model has learned the task, which a two-epoch live run cannot show.

``pruning_budget`` fine-tunes lesson 05's pruned models (``pruning.budget``) for each budget of
steps from several seeds: whether a pruned model keeps the dense model's accuracy depends on
how long it is fine-tuned, which the lesson's few dozen live steps cannot show.

``distillation_transfer`` trains lesson 06's random-initialised student to convergence with
scratch labels, the teacher's top class and its soft targets, over the transfer set's size
(``distill.transfer``), paired by seed, and the teacher-initialised student with and without
distillation: what soft targets add, and what initialisation adds, each on its own.

``ddp_stability`` trains lesson 08's encoder at one device's batch and at 2, 4 and 8 times it
(what that many DDP ranks train, ``distributed.stability``) from several seeds: how much
steadier the loss gets, and whether accuracy changes, as the global batch grows.

``ddp_speed`` times lesson 08's step three ways (one process on one thread, one process on every
core, DDP on 2 ranks of a core each) at batches per rank from 2 to 64, in interleaved rounds
(``distributed.timing``): where a rank added pays, which the lesson's three live rounds cannot
decide. A timing: it holds for the machine it ran on.

``optimizer_race`` runs lesson 12's race (``optim.race_budget``) at budgets of 64 and 256
steps, every optimizer over a learning-rate grid wide enough to hold its best, without gradient
clipping, from several seeds: whether Adam-type optimizers converge faster, budget by budget.

``int8_topic_task`` embeds every labelled sentence of lesson 15's task (``real_model.task``: the
standard library's docstrings by topic, about 8,900 on Python 3.11) with all-MiniLM-L6-v2 in
FP32, BF16 weights and four int8 recipes, and scores a topic head by 5-fold cross-validation over
docstrings (one fold assignment per seed): every sentence tested once, enough to resolve a
1-point accuracy change, which the lesson's live sample cannot.

``ladder_multiply`` times lesson 14's "speed-ups multiply" check (``capstone.ladder_evidence``):
the baseline, each technique alone and the stacks, at batch 32 in many interleaved rounds and
in training on more steps, so that measured / predicted can be told from the band the check
needs. A timing: it holds for the machine it ran on.

``gqa_uptrain`` uptrains lesson 16's pretrained decoder with 4, 2 and 1 key/value heads from
several seeds and for several budgets of steps (``generate.stored.gqa_uptrain_evidence``) and
scores each on every test review: how many steps grouped- and multi-query attention need to
come close to multi-head perplexity, with the seeds' spread, which the lesson's one stored
replicate cannot show.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import torch

from course_lib.core.batching import make_loader
from course_lib.core.checkpoints import BaselineRecipe, load_baseline, save, train_baseline
from course_lib.core.data import Corpus, load_corpus
from course_lib.core.device import capabilities
from course_lib.core.train import TrainConfig, train
from course_lib.core.evaluate import evaluate
from course_lib.distill.students import build_student

from course_lib.tools.saved_runs import data_dir

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE_DIR = data_dir("evidence")   # data/evidence, or the installed wheel's copy
EVIDENCE = ("teacher_convergence", "student_ceiling", "fp16_regression", "sorted_batching",
            "pruning_budget", "distillation_transfer", "ddp_stability", "ddp_speed",
            "optimizer_race", "int8_topic_task", "ladder_multiply", "gqa_uptrain",
            "int8_throughput", "sparse_over_length", "lowrank_over_length")
SORTED_BUDGETS = (2, 6, 12)   # training epochs of lesson 02's convergence check
REGRESSION_OFFSETS = (0, 64, 256, 1024, 4096)   # stars added to every rating (lesson 04)

__all__ = ["EVIDENCE", "EVIDENCE_DIR", "REGRESSION_OFFSETS", "teacher_convergence",
           "student_ceiling", "fp16_regression", "sorted_batching", "load_evidence",
           "write_evidence", "summary"]


def teacher_convergence(corpus: Corpus, *, seeds: tuple[int, ...] = (0, 1),
                        recipe: BaselineRecipe = BaselineRecipe(), progress: bool = True,
                        ship_dir: Path | None = None) -> dict:
    """The baseline's recipe from each seed (model initialisation and data order), with its
    validation curve and test accuracy. ``ship_dir``: also save the recipe's own seed there."""
    runs = []
    for seed in seeds:
        r = replace(recipe, model_seed=seed, train=replace(recipe.train, seed=seed))
        model, info = train_baseline(corpus, recipe=r, progress=progress)
        runs.append({"seed": seed, "test_accuracy": info["test_accuracy"],
                     "seconds": info["train_seconds"], "steps": info["steps"],
                     "val_curve": info["val_curve"]})
        print(f"teacher seed {seed}: test {info['test_accuracy']:.4f}, "
              f"{info['train_seconds']:.0f} s", flush=True)
        if ship_dir is not None and r == recipe:
            print(f"wrote {save(model, info, directory=ship_dir)}", flush=True)
    return {"recipe": {"preset": recipe.preset, "batch_size": recipe.batch_size,
                       "epochs": recipe.train.epochs, "lr": recipe.train.lr,
                       "weight_decay": recipe.train.weight_decay,
                       "training_reviews": len(corpus.train) + corpus.config.n_teacher_extra},
            "runs": runs}


def student_ceiling(corpus: Corpus, teacher, *, students: tuple[str, ...] = ("half", "small"),
                    seeds: tuple[int, ...] = (0, 1), steps: int = 3000, lr: float = 1e-3,
                    batch_size: int = 32, progress: bool = True) -> dict:
    """Each student from random weights, trained on the labelled split alone (lesson 06's
    ``scratch`` arm) for ``steps``, with its validation curve and test accuracy."""
    runs = []
    train_loader = None
    for student in students:
        for seed in seeds:
            model = build_student(student, vocab_size=len(corpus.vocab), teacher=teacher,
                                  seed=seed)
            train_loader = make_loader(corpus.train, batch_size=batch_size, seed=seed)
            cfg = TrainConfig(epochs=-(-steps // len(train_loader)), lr=lr, seed=seed)
            val = make_loader(corpus.val, batch_size=64, shuffle=False)
            hist = train(model, train_loader, cfg=cfg, val_loader=val, max_steps=steps,
                         autocast_dtype=None, progress=progress)
            acc = evaluate(model, make_loader(corpus.test, batch_size=64, shuffle=False))
            curve = [{"epoch": e["epoch"], "step": min(steps, e["epoch"] * len(train_loader)),
                      "train_loss": e["loss"], "val_accuracy": e["val_accuracy"]}
                     for e in hist.epochs]
            runs.append({"student": student, "seed": seed, "test_accuracy": acc["accuracy"],
                         "seconds": hist.seconds, "steps": len(hist.step_loss),
                         "val_curve": curve})
            print(f"{student} seed {seed}: test {acc['accuracy']:.4f}, {hist.seconds:.0f} s",
                  flush=True)
    return {"recipe": {"steps": steps, "lr": lr, "batch_size": batch_size,
                       "training_reviews": len(corpus.train), "data": "labelled split only"},
            "runs": runs}


def fp16_regression(*, seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5),
                    offsets: tuple[float, ...] = REGRESSION_OFFSETS, steps: int = 300,
                    length: int = 64, scale: float = 0.25) -> dict:
    """Lesson 04's regression check (``precision.regression.sweep``, its recipes FP32, BF16 and
    FP16 autocast) at each offset and seed, on the order-free corpus at the lesson's scale."""
    from course_lib.core.data import CorpusConfig
    from course_lib.precision import regression as pr
    easy = load_corpus(CorpusConfig(p_negate=0.0, p_opener=0.0, p_contrast=0.0), scale=scale)
    recipes = ("fp32", "bf16", "fp16")
    runs = []
    for offset in offsets:
        got = pr.run(easy, recipes=recipes, seeds=seeds, steps=steps, length=length, offset=offset)
        for recipe, rs in got.items():
            runs += [{"offset": r.offset, "recipe": r.recipe, "seed": r.seed, "mae": r.mae,
                      "skipped_steps": r.skipped_steps, "diverged_at": r.diverged_at} for r in rs]
        print(f"offset {offset:g}: " + ", ".join(
            f"{k} ÷ fp32 {pr.ratio_to_fp32(got, k):.3f×}" for k in recipes[1:]), flush=True)
    return {"recipe": {"steps": steps, "length": length, "scale": scale, "offsets": list(offsets),
                       "recipes": list(recipes), "training_reviews": len(easy.train),
                       "test_reviews": len(easy.test),
                       "predict_mean_mae": pr.predict_mean_mae(easy)[1]},
            "runs": runs}


def sorted_batching(corpus: Corpus, *, seeds: tuple[int, ...] = tuple(range(8)),
                    budgets: tuple[int, ...] = SORTED_BUDGETS, batch_size: int = 32,
                    lr: float = 2e-3) -> dict:
    """Lesson 02's two arms (sorted never shuffled, bucketed shuffled) on the whole labelled
    training split, for each budget (epochs) and seed: test accuracy of each."""
    from course_lib.packing.order import train_arm
    arms = ("sorted, no shuffle", "bucketed, shuffled")
    test = make_loader(corpus.test, batch_size=64, shuffle=False)
    runs = []
    for epochs in budgets:
        for seed in seeds:
            for arm in arms:
                model, hist = train_arm(corpus.train, corpus.train.lengths, arm,
                                        vocab_size=len(corpus.vocab), seed=seed, epochs=epochs,
                                        batch_size=batch_size, lr=lr)
                runs.append({"epochs": epochs, "seed": seed, "arm": arm,
                             "steps": len(hist.step_loss),
                             "test_accuracy": evaluate(model, test)["accuracy"]})
            pair = runs[-2:]
            print(f"{epochs} epochs, seed {seed}: sorted {pair[0]['test_accuracy']:.4f}, "
                  f"bucketed {pair[1]['test_accuracy']:.4f}", flush=True)
    return {"recipe": {"preset": "student", "batch_size": batch_size, "lr": lr,
                       "budgets": list(budgets), "arms": list(arms),
                       "training_reviews": len(corpus.train), "test_reviews": len(corpus.test)},
            "runs": runs}


def git_commit() -> str:
    """The commit the course's code was at ("unknown" outside a git checkout), with "+dirty"
    when tracked files differ from it: evidence says which code measured it."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# The runs timed in interleaved rounds, and the fewest rounds each needs for an error.
ROUNDS_RUNS = {"ladder_multiply": 3, "int8_throughput": 2, "sparse_over_length": 2,
               "lowrank_over_length": 2, "ddp_speed": 2}


def write_evidence(name: str, body: dict, *, command: str, seconds: float | None = None,
                   directory: Path = EVIDENCE_DIR) -> Path:
    """Store ``body`` as ``<directory>/<name>.json`` with its command, hardware, date, the git
    commit, torch version and thread count that ran it, and its total ``seconds``."""
    if name not in EVIDENCE:
        raise ValueError(f"name must be one of {EVIDENCE}, got {name!r}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    record = {"name": name, "command": command, "hardware": capabilities("cpu").as_dict(),
              "date": datetime.date.today().isoformat(), "commit": git_commit(),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "seconds": None if seconds is None else round(seconds, 1), **body}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_evidence(name: str, *, directory: Path = EVIDENCE_DIR) -> dict:
    """The committed evidence ``name`` (``EVIDENCE``); a clear error if it was never run."""
    if name not in EVIDENCE:
        raise ValueError(f"name must be one of {EVIDENCE}, got {name!r}")
    path = directory / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: "
                                f"run python -m course_lib.tools.evidence {name}")
    return json.loads(path.read_text())


def summary(evidence: dict) -> list[dict]:
    """One row per model of an evidence record: its seeds' test accuracies, their mean and
    range, and the last epoch whose validation accuracy improved on every earlier one."""
    groups: dict[str, list[dict]] = {}
    for run in evidence["runs"]:
        groups.setdefault(run.get("student", "teacher"), []).append(run)
    rows = []
    for model, runs in groups.items():
        accs = [r["test_accuracy"] for r in runs]
        best_steps = []
        for r in runs:
            vals = [p["val_accuracy"] for p in r["val_curve"]]
            best_steps.append(r["val_curve"][max(range(len(vals)), key=vals.__getitem__)]["step"])
        rows.append({"model": model, "seeds": [r["seed"] for r in runs], "test_accuracy": accs,
                     "mean": statistics.fmean(accs), "spread": max(accs) - min(accs),
                     "best_val_step": best_steps, "steps": runs[0]["steps"]})
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", nargs="?", choices=EVIDENCE)
    ap.add_argument("--list", action="store_true", help="list the evidence runs and stop")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--ship", action="store_true",
                    help="teacher_convergence: also write the recipe's seed as the baseline")
    ap.add_argument("--dir", type=Path, default=EVIDENCE_DIR)
    ap.add_argument("--rounds", type=int, default=10,
                    help="ddp_speed, ladder_multiply: interleaved timing rounds (default 10)")
    ap.add_argument("--steps", type=int, default=None,
                    help="distillation_transfer: override the steps (a quick check, not evidence)")
    args = ap.parse_args(argv)
    if args.list or args.name is None:
        for name in EVIDENCE:
            have = (args.dir / f"{name}.json").exists()
            print(f"{name}: {'committed' if have else 'not run yet'}")
        return
    torch.set_num_threads(min(2, torch.get_num_threads()))   # the thread count the lessons use
    t0 = time.perf_counter()
    corpus = load_corpus()
    command = (f"python -m course_lib.tools.evidence {args.name} "
               f"--seeds {' '.join(map(str, args.seeds))}")
    log = lambda m: print(m, flush=True)   # noqa: E731
    rounds_command = f"python -m course_lib.tools.evidence {args.name} --rounds {args.rounds}"
    if args.name in ROUNDS_RUNS and args.rounds < ROUNDS_RUNS[args.name]:
        raise SystemExit(f"--rounds must be >= {ROUNDS_RUNS[args.name]}, got {args.rounds}")
    if args.name in ROUNDS_RUNS:
        command = rounds_command
    if args.name == "teacher_convergence":
        from course_lib.core.checkpoints import DEFAULT_DIR
        body = teacher_convergence(corpus, seeds=tuple(args.seeds),
                                   ship_dir=DEFAULT_DIR if args.ship else None)
    elif args.name == "sorted_batching":
        body = sorted_batching(corpus, seeds=tuple(args.seeds))
    elif args.name == "optimizer_race":
        from course_lib.optim.race_budget import run as run_race
        body = run_race(seeds=tuple(args.seeds), workers=2, log=log)
    elif args.name == "int8_topic_task":
        from course_lib.quant.dynamic import dynamic_variants
        from course_lib.real_model.task import run as run_task
        body = run_task(dynamic_variants, seeds=tuple(args.seeds), log=log)
    elif args.name == "gqa_uptrain":
        from course_lib.generate.stored import gqa_uptrain_evidence
        body = gqa_uptrain_evidence(corpus, seeds=tuple(args.seeds), log=log)
    elif args.name == "ladder_multiply":
        from course_lib.capstone.ladder_evidence import run as run_multiply
        body = run_multiply(rounds=args.rounds, log=log)
    elif args.name == "int8_throughput":    # lesson 07's sweep, at its default widths
        from course_lib.quant.sweep import evidence as run_rounds
        body = run_rounds([128, 256, 384, 512, 1024], [1, 32], rounds=args.rounds)
    elif args.name == "sparse_over_length":   # lesson 11's sweeps: one thread, as the lesson
        from course_lib.attention.sparse import evidence as run_rounds
        torch.set_num_threads(1)
        body = run_rounds([512, 1024, 2048, 4096], rounds=args.rounds, window=64,
                          block_size=128, batch=1, heads=4, head_dim=64)
    elif args.name == "lowrank_over_length":
        from course_lib.attention.lowrank import evidence as run_rounds
        torch.set_num_threads(1)
        body = run_rounds([512, 1024, 2048, 4096], rank=256, rounds=args.rounds, batch=1,
                          heads=4, head_dim=64)
    elif args.name == "ddp_speed":
        from course_lib.distributed.timing import run as run_speed
        body = run_speed(rounds=args.rounds)
    elif args.name == "ddp_stability":
        from course_lib.distributed.stability import run as run_stability
        body = run_stability(seeds=tuple(args.seeds), log=log)
    elif args.name == "pruning_budget":
        from course_lib.pruning.budget import run as run_budget
        teacher, _ = load_baseline(corpus, train_if_missing=False)
        body = run_budget(corpus, teacher, seeds=tuple(args.seeds), log=log)
    elif args.name == "distillation_transfer":
        from course_lib.distill.losses import DistillSet
        from course_lib.distill.stored import teacher_logits_stored
        from course_lib.distill.transfer import run as run_transfer
        teacher, _ = load_baseline(corpus, train_if_missing=False)
        cached, _ = teacher_logits_stored(teacher, DistillSet(corpus.train, corpus.transfer))
        body = run_transfer(corpus, teacher, cached, seeds=tuple(args.seeds), steps=args.steps,
                            log=log)
    elif args.name == "fp16_regression":
        body = fp16_regression(seeds=tuple(args.seeds))
    else:
        teacher, _ = load_baseline(corpus, train_if_missing=False)
        body = student_ceiling(corpus, teacher, seeds=tuple(args.seeds))
    path = write_evidence(args.name, body, command=command, directory=args.dir,
                          seconds=time.perf_counter() - t0)
    if args.name in ("teacher_convergence", "student_ceiling"):
        for row in summary(json.loads(path.read_text())):
            accs = ", ".join(f"{100 * a:.2f}%" for a in row["test_accuracy"])
            print(f"{row['model']}: test {accs} (mean {100 * row['mean']:.2f}%, spread "
                  f"{100 * row['spread']:.2f} points); best validation at steps "
                  f"{row['best_val_step']} of {row['steps']}")
    print(f"wrote {path}")

if __name__ == "__main__":
    main()
