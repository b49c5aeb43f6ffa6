"""Train, store and verify the checkpoints that ship with the course (``course_lib/core/weights/``).

    python -m course_lib.tools.checkpoints            # trains the baseline and writes it
    python -m course_lib.tools.checkpoints --check    # verifies the stored checksums
    python -m course_lib.tools.checkpoints --logits   # stores its logits over lesson 06's data
    python -m course_lib.tools.checkpoints --student  # stores lesson 06's best student (lesson 14)
    python -m course_lib.tools.checkpoints --decoders # trains lesson 16's decoders (~5 min)
    python -m course_lib.tools.checkpoints --sentences  # freezes lesson 15's sentences
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from course_lib.core.checkpoints import DEFAULT_DIR, load_baseline, save, train_baseline, verify
from course_lib.core.data import load_corpus
from course_lib.distill.losses import DistillSet, teacher_logits
from course_lib.distill.stored import save_teacher_logits, train_student_checkpoint


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--check", action="store_true", help="verify the stored checksum only")
    ap.add_argument("--student", action="store_true",
                    help="only (re)write lesson 14's distilled student (after the baseline)")
    ap.add_argument("--logits", action="store_true",
                    help="only (re)write the stored teacher's logits over lesson 06's "
                         "distillation set")
    ap.add_argument("--decoders", action="store_true",
                    help="only (re)train lesson 16's decoders (course_lib/generate/weights/)")
    ap.add_argument("--sentences", action="store_true",
                    help="only (re)write lesson 15's frozen sentences "
                         "(course_lib/real_model/course_sentences.json)")
    args = ap.parse_args(argv)
    if args.sentences:
        from course_lib.real_model.encoder import SENTENCES_FILE, write_course_sentences
        from course_lib.tools.evidence import git_commit
        n = write_course_sentences(SENTENCES_FILE, source=f"course_lib at {git_commit()}")
        print(f"wrote {SENTENCES_FILE}: {n} sentences")
        return
    if args.decoders:
        from course_lib.generate.stored import WEIGHTS_DIR, save_decoders, train_decoders
        torch.set_num_threads(min(2, torch.get_num_threads()))   # same threads -> same weights
        trained = train_decoders(load_corpus())
        for path in save_decoders(trained, WEIGHTS_DIR if args.dir == DEFAULT_DIR else args.dir):
            print(f"wrote {path}")
        for name, (_, info) in trained.items():
            print(f"{name}: validation perplexity {info['val_perplexity']:.4f}")
        return
    if args.student:
        torch.set_num_threads(min(2, torch.get_num_threads()))
        corpus = load_corpus()
        teacher, base = load_baseline(corpus, directory=args.dir, train_if_missing=False)
        model, info = train_student_checkpoint(corpus, teacher)
        path = save(model, {**info, "teacher_sha256": base["sha256"]}, name="student",
                    directory=args.dir)
        print(f"wrote {path}: test accuracy {info['test_accuracy']:.4f}, "
              f"{info['train_seconds']:.0f} s")
        return
    if args.logits:
        corpus = load_corpus()
        teacher, _ = load_baseline(corpus, directory=args.dir, train_if_missing=False)
        path = save_teacher_logits(
            teacher_logits(teacher, DistillSet(corpus.train, corpus.transfer)), args.dir)
        print(f"wrote {path}")
        return
    if args.check:
        from course_lib.generate.stored import NAMES, WEIGHTS_DIR
        bad = [name for name in ("baseline", "student") if verify(name, args.dir) is None]
        bad += [name for name in NAMES if verify(name, WEIGHTS_DIR) is None]
        raise SystemExit(f"{', '.join(bad)} checkpoint missing or checksum mismatch" if bad else 0)
    torch.set_num_threads(min(2, torch.get_num_threads()))  # same threads -> same weights
    model, info = train_baseline(load_corpus())
    path = save(model, info, directory=args.dir)
    print(f"wrote {path}: test accuracy {info['test_accuracy']:.4f}, "
          f"{info['train_seconds']:.0f} s (now run --logits: the stored logits are the old "
          f"teacher's)")


if __name__ == "__main__":
    main()
