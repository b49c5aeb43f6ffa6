"""Run lesson 06's reference experiment (every student and arm, several seeds) and store it
beside the package (``course_lib/distill/student_ladder.json``); over an hour on a 2-core CPU.

    python -m course_lib.tools.student_ladder --sweep
    python -m course_lib.tools.student_ladder --seeds 0 --steps 50 --out /tmp/ladder.json
"""
from __future__ import annotations

import argparse

from course_lib.core.batching import make_loader
from course_lib.core.checkpoints import load_baseline
from course_lib.core.data import load_corpus
from course_lib.core.device import pick_device
from course_lib.core.train import evaluate
from course_lib.distill.ladder import REFERENCE, run_grid, run_sweep, save, summary, sweep_summary
from course_lib.distill.losses import DistillSet, teacher_logits
from course_lib.distill.students import StudentRecipe


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=StudentRecipe().steps)
    ap.add_argument("--out", default=str(REFERENCE))
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the best available)")
    ap.add_argument("--sweep", action="store_true", help="also the temperature / alpha grid")
    ap.add_argument("--sweep-only", action="store_true", help="the temperature / alpha grid only")
    args = ap.parse_args(argv)
    device = pick_device(args.device)
    recipe = StudentRecipe(steps=args.steps)
    corpus = load_corpus()
    teacher, _ = load_baseline(corpus)
    teacher = teacher.to(device).eval()
    cached = teacher_logits(teacher, DistillSet(corpus.train, corpus.transfer), device=device)
    t_acc = evaluate(teacher, make_loader(corpus.test, batch_size=64, shuffle=False),
                     device=device)["accuracy"]
    runs = ([] if args.sweep_only else
            run_grid(corpus, teacher, cached, seeds=args.seeds, recipe=recipe, device=device))
    sweep = (run_sweep(corpus, teacher, cached, seeds=args.seeds, recipe=recipe, device=device)
             if args.sweep or args.sweep_only else [])
    out = save(args.out, runs, recipe=recipe, device=device, teacher_accuracy=t_acc, sweep=sweep)
    for (s, a), e in summary(runs).items():
        print(f"{s:18s} {a:24s} {e:5.1f}")
    for (t, a), e in sweep_summary(sweep).items():
        print(f"sweep T = {t:g}, alpha = {a:g}: {e:5.1f}")
    print(f"teacher {100 * t_acc:.1f}; written to {out}")


if __name__ == "__main__":
    main()
