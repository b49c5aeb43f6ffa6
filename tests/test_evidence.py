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
    # a point per epoch, to the end
    assert runs[0]["val_curve"][-1]["step"] == runs[0]["steps"]
    path = ev.write_evidence("teacher_convergence", body, command="python -m x", directory=tmp_path,
                             seconds=12.34)
    stored = json.loads(path.read_text())
    assert stored["command"] == "python -m x" and stored["hardware"]["device"] == "cpu"
    import subprocess
    import torch
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert stored["torch"] == torch.__version__ and stored["seconds"] == 12.3
    assert stored["commit"].split("+")[0] == (head or "unknown")
    row, = ev.summary(ev.load_evidence("teacher_convergence", directory=tmp_path))
    accs = [r["test_accuracy"] for r in runs]
    assert row["model"] == "teacher" and row["spread"] == pytest.approx(max(accs) - min(accs))
    assert all(s in {p["step"] for p in runs[0]["val_curve"]} for s in row["best_val_step"][:1])

    teacher = build_model(len(corpus.vocab), preset="teacher", seed=0)
    body = ev.student_ceiling(corpus, teacher, students=("small",), seeds=(0,), steps=5,
                              progress=False)
    assert body["runs"][0]["steps"] == 5 and body["recipe"]["data"] == "labelled split only"


def test_missing_or_unknown_evidence_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError,
                       match="python -m course_lib.tools.evidence student_ceiling"):
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
        assert e["hardware"] and e[{"ddp_speed": "times", "ladder_multiply": "points",
                                    "int8_throughput": "rounds", "sparse_over_length": "rounds",
                                    "lowrank_over_length": "rounds"}.get(name, "runs")]
        if name == "lowrank_over_length":
            assert len(e["rounds"]) >= 5 and e["commit"] and e["torch"] and e["seconds"] > 0
            assert all(sorted(map(int, rd)) == e["recipe"]["lengths"] for rd in e["rounds"])
            continue
        if name in ("int8_throughput", "sparse_over_length"):   # whole sweeps, every point each
            assert len(e["rounds"]) >= 5 and e["commit"] and e["torch"] and e["seconds"] > 0
            r = e["recipe"]
            if name == "int8_throughput":
                want = len(r["widths"]) * len(r["batches"]) * len(r["formats"])
                assert all(len(rows) == want for rows in e["rounds"])
            else:
                assert all(sorted(map(int, x)) == r["lengths"]
                           for rd in e["rounds"] for x in rd.values())
            continue
        if name == "ddp_speed":   # every configuration at every batch, once per round
            r = e["recipe"]
            assert sorted(map(int, e["times"])) == r["batches"] and r["cores"] >= r["nproc"]
            assert all(len(v) == r["rounds"] >= 5 for t in e["times"].values() for v in t.values())
            assert all(len(t) == 3 for t in e["times"].values())
            continue
        if name == "ladder_multiply":   # both stacks and each technique alone, every round and step
            from course_lib.capstone.ladder import TECHNIQUES, Rung
            from course_lib.capstone.ladder_evidence import cases
            got = {tuple(p["techniques"]): p["samples"] for p in e["points"]}
            avail = [t for t in TECHNIQUES if t not in e["unavailable"]]
            for (top, alone), metric in zip(cases(avail).values(),
                                            ("latency_b32_ms", "train_epoch_s")):
                for r in (Rung("baseline"), top, *alone):
                    want = (e["rounds"] if metric == "latency_b32_ms" else
                            e["bucket_batches"] if r.bucketing else e["fixed_batches"])
                    assert len(got[r.techniques][metric]) == want, (r.name, metric)
            assert e["rounds"] >= 10
            continue
        if name == "fp16_regression":   # every recipe at every offset, on the same seeds
            seeds = {(r["offset"], r["recipe"]): set() for r in e["runs"]}
            for r in e["runs"]:
                seeds[r["offset"], r["recipe"]].add(r["seed"])
            assert {o for o, _ in seeds} == set(e["recipe"]["offsets"])
            assert (len({frozenset(s) for s in seeds.values()}) == 1
                    and len(next(iter(seeds.values()))) >= 5)
        elif name == "sorted_batching":   # both arms at every budget, paired by seed
            pairs = {(r["epochs"], r["seed"]): set() for r in e["runs"]}
            for r in e["runs"]:
                pairs[r["epochs"], r["seed"]].add(r["arm"])
            assert all(a == set(e["recipe"]["arms"]) for a in pairs.values())
            assert ({b for b, _ in pairs} == set(e["recipe"]["budgets"])
                    and len(pairs) >= 5 * len(e["recipe"]["budgets"]))
        elif name == "pruning_budget":   # every variant at every budget, the same seeds
            from course_lib.pruning.budget import VARIANTS
            seeds = {(r["variant"], r["steps"]): set() for r in e["runs"]}
            for r in e["runs"]:
                seeds[r["variant"], r["steps"]].add(r["seed"])
            assert set(seeds) == {(v, b) for v in VARIANTS for b in e["recipe"]["budgets"]}
            tuned = {frozenset(s) for (_, b), s in seeds.items() if b}
            assert len(tuned) == 1 and len(next(iter(tuned))) >= 4
            assert all(s == {None} for (_, b), s in seeds.items() if not b)
        elif name == "distillation_transfer":   # every cell of distill.transfer, the same seeds
            cells = {(r["student"], r["arm"], r["transfer"]): set() for r in e["runs"]}
            for r in e["runs"]:
                cells[r["student"], r["arm"], r["transfer"]].add(r["seed"])
            sizes = e["recipe"]["sizes"]
            assert {("small", "scratch", 0), ("half_from_teacher", "scratch", 0)} <= set(cells)
            assert all(("small", a, n) in cells
                       for n in sizes for a in ("soft", "hard") if n or a == "soft")
            assert (len({frozenset(s) for s in cells.values()}) == 1
                    and len(next(iter(cells.values()))) >= 4)
        elif name == "ddp_stability":   # every multiple of the batch, the same seeds
            seeds = {}
            for r in e["runs"]:
                seeds.setdefault(r["multiple"], set()).add(r["seed"])
            assert set(seeds) == set(e["recipe"]["multiples"]) and 1 in seeds
            assert len({frozenset(s) for s in seeds.values()}) == 1 and len(seeds[1]) >= 5
        elif name == "optimizer_race":   # every budget and grid point, the same seeds
            seeds = {}
            for r in e["runs"]:
                seeds.setdefault((r["budget"], r["spec"]), set()).add(r["seed"])
            grid = e["setup"]["grid"]
            assert set(seeds) == {(b, f"{n}@{lr:g}")
                                  for b in e["budgets"] for n, lrs in grid.items() for lr in lrs}
            assert (len({frozenset(s) for s in seeds.values()}) == 1
                    and len(next(iter(seeds.values()))) >= 4)
            assert all(len(r["test"]) == len(r["val"]) == len(r["steps"]) for r in e["runs"])
        elif name == "int8_topic_task":   # every variant scored on every sentence, each fold
                                          # assignment
            from course_lib.quant.dynamic import BF16_STORED, DYNAMIC_RECIPES
            assert sum(e["topics"].values()) == e["sentences"] >= 5000
            for r in e["runs"]:
                assert set(r["scores"]) == {"FP32", BF16_STORED, *DYNAMIC_RECIPES}
                assert sum(r["folds"]) == e["sentences"]
                assert all(s["n"] == e["sentences"] for s in r["scores"].values())
            assert len({r["seed"] for r in e["runs"]}) == len(e["runs"]) >= 1
        elif name == "gqa_uptrain":   # every key/value-head count uptrained from every seed
            assert len(e["seeds"]) >= 3 and e["uptrain_steps"] in e["budgets"]
            assert sorted((r["steps"], r["seed"]) for r in e["runs"]) == sorted(
                (b, s) for b in e["budgets"] for s in e["seeds"])
            assert all("draft_ratio" in r for r in e["runs"] if r["steps"] == e["uptrain_steps"])
            for r in e["runs"]:
                assert set(r["perplexity"]) == {str(kv) for kv in e["kv_heads"]}
                assert set(r["ratio"]) == {str(kv) for kv in e["kv_heads"]
                                           if kv != max(e["kv_heads"])}
            assert set(e["converted_only"]) == {str(kv) for kv in e["kv_heads"]}
        else:
            assert all(r["val_curve"] for r in e["runs"])


def test_fp16_regression_evidence_holds_every_recipe_and_offset():
    body = ev.fp16_regression(seeds=(0,), offsets=(0, 1024), steps=2, length=16, scale=0.02)
    assert {(r["offset"], r["recipe"]) for r in body["runs"]} == {
        (o, k) for o in (0.0, 1024.0) for k in ("fp32", "bf16", "fp16")}
    assert body["recipe"]["offsets"] == [0, 1024] and body["recipe"]["predict_mean_mae"] > 0


def test_sorted_batching_evidence_pairs_the_arms_by_seed_and_budget():
    from course_lib.core.data import CorpusConfig, load_corpus
    corpus = load_corpus(CorpusConfig(n_test=64), scale=0.02)
    body = ev.sorted_batching(corpus, seeds=(0,), budgets=(1,), batch_size=16)
    assert [(r["epochs"], r["seed"], r["arm"]) for r in body["runs"]] == [
        (1, 0, "sorted, no shuffle"), (1, 0, "bucketed, shuffled")]
    assert all(0 <= r["test_accuracy"] <= 1 and r["steps"] > 0 for r in body["runs"])
