"""Evidence runs: what they store, and the summary the lessons and headroom read from them."""
import json
from dataclasses import replace

import pytest

from course_lib.core.checkpoints import BaselineRecipe
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.tools import evidence as ev


def test_a_tiny_teacher_and_student_run_store_their_curves_command_and_hardware(tmp_path):
    corpus = load_corpus(CorpusConfig(n_teacher_extra=100), scale=0.03)
    recipe = BaselineRecipe()
    recipe = replace(recipe, train=replace(recipe.train, epochs=2))
    body = ev.teacher_convergence(corpus, seeds=(0, 1), recipe=recipe, progress=False)
    runs = body["runs"]
    assert [r["seed"] for r in runs] == [0, 1] and all(len(r["val_curve"]) == 2 for r in runs)
    assert runs[0]["val_curve"][-1]["step"] == runs[0]["steps"]        # a point per epoch, to the end
    path = ev.write_evidence("teacher_convergence", body, command="python -m x", directory=tmp_path)
    stored = json.loads(path.read_text())
    assert stored["command"] == "python -m x" and stored["hardware"]["device"] == "cpu"
    row, = ev.summary(ev.load_evidence("teacher_convergence", directory=tmp_path))
    accs = [r["test_accuracy"] for r in runs]
    assert row["model"] == "teacher" and row["spread"] == pytest.approx(max(accs) - min(accs))
    assert all(s in {p["step"] for p in runs[0]["val_curve"]} for s in row["best_val_step"][:1])

    teacher = build_model(len(corpus.vocab), preset="teacher", seed=0)
    body = ev.student_ceiling(corpus, teacher, students=("small",), seeds=(0,), steps=5, progress=False)
    assert body["runs"][0]["steps"] == 5 and body["recipe"]["data"] == "labelled split only"


def test_missing_or_unknown_evidence_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m course_lib.tools.evidence student_ceiling"):
        ev.load_evidence("student_ceiling", directory=tmp_path)
    with pytest.raises(ValueError, match="name must be one of"):
        ev.load_evidence("no_such_run", directory=tmp_path)


def test_the_committed_evidence_is_complete():
    for name in ev.EVIDENCE:
        path = ev.EVIDENCE_DIR / f"{name}.json"
        if not path.exists():
            pytest.skip(f"{name} not committed yet")
        e = ev.load_evidence(name)
        assert e["command"].startswith("python -m course_lib.tools.evidence " + name)
        assert e["hardware"] and e["runs"] and all(r["val_curve"] for r in e["runs"])
