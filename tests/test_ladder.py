"""The ladder of lesson 14: rung configs, the model zoo and meters in smoke mode, the analysis."""
import dataclasses
import math

import pytest
import torch
from torch.utils.data import Subset

from course_lib.capstone import ladder
from course_lib.capstone import ladder_analysis as A
from course_lib.capstone import ladder_meters as M
from course_lib.capstone import ladder_inputs as LI
from course_lib.capstone import ladder_memory as LM
from course_lib.capstone import ladder_timing as LT
from course_lib.capstone.model_zoo import ModelZoo
from course_lib.core.batching import make_loader
from course_lib.core.checkpoints import load_baseline
from course_lib.core.data import CorpusConfig, load_corpus
from course_lib.core.model import build_model
from course_lib.measure.results import Recorder

SMOKE = ladder.Settings(fixed_length=128, fixed_train_batches=1, bucket_train_batches=2,
                        fixed_test_reviews=8, warmup=0, repeats=1, test_repeats=1,
                        distill_steps=2, finetune_steps=1, measure_memory=False)


@pytest.fixture(scope="module")
def smoke_run():
    """The whole ladder in smoke mode around a small untrained teacher, short reviews."""
    corpus = load_corpus(CorpusConfig(n_train=96, n_val=8, n_test=40, n_transfer=64,
                                      max_length=96))
    torch.manual_seed(0)
    teacher = build_model(len(corpus.vocab), preset="student", n_layers=2, d_ff=256)
    zoo = ModelZoo(teacher, corpus, device="cpu", settings=SMOKE, progress=False)
    inputs = LI.choose_inputs(corpus, settings=SMOKE)
    rows, points = M.measure(zoo, inputs, ladder.ladder(), progress=False)
    return zoo, inputs, rows, points


@pytest.fixture(scope="module")
def trained():
    """The course's trained teacher on 200 test reviews (half a point is one review)."""
    corpus = load_corpus(CorpusConfig(n_train=32, n_val=8, n_test=200, n_transfer=8,
                                      max_length=192))
    try:
        teacher = load_baseline(corpus, train_if_missing=False)[0]
    except FileNotFoundError:
        pytest.skip("needs the trained baseline checkpoint")
    return (ModelZoo(teacher, corpus, device="cpu", settings=SMOKE, progress=False),
            LI.choose_inputs(corpus, settings=SMOKE))


def test_ladder_adds_one_technique_per_rung_and_combinations_cover_every_subset():
    rungs = ladder.ladder()
    assert [r.name for r in rungs] == ["baseline", "bucketing", "sdpa", "mixed_precision", "int8",
                                       "pruning", "distillation"]
    for below, above in zip(rungs, rungs[1:]):
        assert set(above.techniques) - set(below.techniques) and \
            len(above.techniques) == len(below.techniques) + 1
    assert rungs[-1].techniques == ladder.TECHNIQUES
    combos = ladder.combinations()
    assert len({r.key for r in combos}) == len(combos) == 2 ** len(ladder.TECHNIQUES)
    assert len({r.name for r in combos}) == len(combos)
    assert [r.name for r in ladder.ladder(["int8", "sdpa"])] == ["baseline", "int8", "sdpa"]
    no_amp = ladder.ladder(unavailable=["amp"])
    assert "mixed_precision" not in [r.name for r in no_amp] and len(no_amp) == len(rungs) - 1
    assert not any(r.amp for r in no_amp) and no_amp[-1].techniques == tuple(
        t for t in ladder.TECHNIQUES if t != "amp")
    assert len(ladder.combinations(unavailable=["amp"])) == 2 ** (len(ladder.TECHNIQUES) - 1)


def test_mixed_precision_is_unavailable_exactly_where_the_course_keeps_fp32():
    from course_lib.core.precision import choose_precision
    here = ladder.unavailable_here("cpu")
    assert ("amp" in here) == (choose_precision("cpu").dtype is None)
    if "amp" in here:
        assert "FP32" in here["amp"]


@pytest.mark.parametrize("make, param", [
    (lambda: ladder.ladder(["bucketing", "bucketing"]), "order"),
    (lambda: ladder.ladder(["gpu"]), "order"),
    (lambda: ladder.combinations(unavailable=["gpu"]), "unavailable"),
    (lambda: ladder.Rung("Not Snake"), "name"),
    (lambda: ladder.Settings(repeats=0).validate(), "repeats"),
    (lambda: ladder.Settings(warmup=-1).validate(), "warmup"),
    (lambda: ladder.Settings(prune_amount=1.5).validate(), "prune_amount"),
    (lambda: A.effect({}, "gpu", metric="latency_b32_ms"), "technique"),
    (lambda: A.summary([], {}, max_drop_points=-1), "max_drop_points"),
])
def test_bad_input_raises_value_error_naming_the_parameter(make, param):
    with pytest.raises(ValueError, match=param):
        make()


def test_smoke_run_records_every_metric_of_every_rung(smoke_run):
    zoo, _, rows, points = smoke_run
    assert [r["name"] for r in rows] == [r.name for r in ladder.ladder()]
    for row in rows:
        for metric in ladder.METRICS:
            assert math.isfinite(row[metric]) and row[metric] > 0, (row["name"], metric)
        assert 0 <= row["test_accuracy"] <= 1
    rec = Recorder("14_capstone", smoke=True)
    A.record(rows, rec)
    assert len(rec.results) == len(rows) * len(ladder.METRICS)
    # every time carries its device; the int8 rung ran on the CPU whatever the machine
    assert all(r.get("device") for r in rec.results if r["unit"] in ("s", "ms"))
    assert {r["device"] for r in rec.results if r["name"].startswith("int8_")} == {"cpu"}
    sizes = [rec.get(f"{name}_size_bytes")
             for name in ("distillation", "pruning", "int8", "baseline")]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    # every point that trains the teacher has a training time; the others only where measured
    assert all(p["train_epoch_s"] for p in points.values())
    assert set(zoo.build_seconds) == {"int8", "prune", "prune_int8", "distill", "distill_prune",
                                      "distill_prune_int8"}


def test_padding_and_attention_kernel_change_rounding_only(trained):
    zoo, inputs = trained
    test = zoo.corpus.test
    sub = Subset(test, list(range(16)))
    fixed = make_loader(sub, batch_size=8, bucketed=False, shuffle=False, max_length=512)
    dynamic = make_loader(sub, batch_size=8, shuffle=False, lengths=test.lengths[:16])
    a, ia = LI.run_test_set(zoo, inputs, ladder.Rung("baseline"), fixed)
    b, ib = LI.run_test_set(zoo, inputs, ladder.Rung("fast", bucketing=True, sdpa=True), dynamic)
    a, b = a[torch.argsort(ia)], b[torch.argsort(ib)]
    assert (a - b).abs().max() < 1e-4
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_peak_memory_in_a_fresh_process_exceeds_the_weights(smoke_run):
    zoo, inputs, _, _ = smoke_run
    measured = ModelZoo(zoo.teacher, zoo.corpus, device="cpu", progress=False,
                        settings=dataclasses.replace(SMOKE, measure_memory=True))
    rung = ladder.Rung("student_int8", distill=True, int8=True)
    assert LM.peak_mib(measured, inputs, rung) > measured.size_bytes(rung) / 2**20
    assert LM.peak_mib(zoo, inputs, rung) == zoo.size_bytes(rung) / 2**20   # weights only


def test_the_serving_probe_measures_the_forward_pass_it_runs(smoke_run, tmp_path):
    """The fresh process's extra peak follows the forward pass: 16 times the batch, more
    activations alive at once, a clearly higher peak (the weights are the same)."""
    from course_lib.measure import bench

    zoo, inputs, _, _ = smoke_run
    rung = ladder.Rung("baseline")
    ids, mask = LI.typical_batch(zoo, inputs, rung, len(inputs.typical))
    src = zoo.model(rung)
    extra = {}
    for copies in (1, 16):
        path = tmp_path / f"probe{copies}.pt"
        torch.save({"config": src.cfg.to_dict(), "state": src.state_dict(),
                    "ids": ids.repeat(copies, 1), "mask": mask.repeat(copies, 1)}, path)
        extra[copies] = bench.peak_rss("course_lib.capstone.ladder_memory:serve_probe",
                                       {"path": str(path), "int8": False, "amp": False,
                                        "sdpa": True}, prepare=True).extra_bytes
    assert extra[16] > 4 * max(extra[1], 2**20), extra


def test_peaks_in_parallel_go_to_their_own_rungs(smoke_run):
    """Two fresh processes at a time: each rung still gets its own figure."""
    import pytest

    zoo, inputs, _, _ = smoke_run
    rungs = [ladder.Rung("baseline"), ladder.Rung("student_int8", distill=True, int8=True)]
    assert LM.peaks_mib(zoo, inputs, rungs) == {r.key: zoo.size_bytes(r) / 2**20 for r in rungs}
    measured = ModelZoo(zoo.teacher, zoo.corpus, device="cpu", progress=False,
                        settings=dataclasses.replace(SMOKE, measure_memory=True))
    peaks = LM.peaks_mib(measured, inputs, rungs)
    assert list(peaks) == [r.key for r in rungs]
    assert all(peaks[r.key] > measured.size_bytes(r) / 2**20 for r in rungs)
    with pytest.raises(ValueError, match="workers"):
        LM.peaks_mib(zoo, inputs, rungs, workers=0)


def test_accuracy_stays_within_the_bounds_of_the_numerics_only_techniques(trained):
    zoo, inputs = trained
    base = LI.accuracy(zoo, inputs, ladder.Rung("baseline"))
    for t in ("amp", "int8"):
        assert (100 * (base - LI.accuracy(zoo, inputs, ladder.Rung(t, **{t: True})))
                <= ladder.BOUNDS[t]), t


def _fake_points(speed):
    """A table where each technique divides every time by ``speed[t]`` (training: not int8,
    applied after it), accuracy is 0.8 minus one point for distill, and the students' training
    is not measured."""
    pts = {}
    for rung in ladder.combinations():
        ms = 100.0 * math.prod(1 / speed[t] for t in rung.techniques)
        pts[rung.key] = {"name": rung.name, "key": rung.key, "techniques": rung.techniques,
                         "latency_b32_ms": ms, "test_accuracy": 0.8 - 0.01 * rung.distill,
                         "train_epoch_s": None if rung.distill else ms * speed["int8"] ** rung.int8,
                         "test_set_s": ms, "latency_b1_ms": ms, "size_bytes": 1000}
        # three interleaved repeats drifting alike (paired ratios exact), training steps around the
        # mean
        pts[rung.key]["samples"] = {
            **{m: [ms * f for f in (1.0, 1.1, 0.9)]
               for m in ("test_set_s", "latency_b1_ms", "latency_b32_ms")},
            "train_epoch_s": [] if rung.distill else [pts[rung.key]["train_epoch_s"] * f
                                                      for f in (0.9, 1.1)]}
    return pts


def test_effect_summary_front_and_bounds_read_the_table():
    speed = {"bucketing": 8.0, "amp": 2.0, "distill": 4.0, "prune": 1.0, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    for t, s in speed.items():
        e = A.effect(pts, t, metric="latency_b32_ms")
        assert e["alone"] == pytest.approx(s) and e["on_top"] == pytest.approx(s)
        assert e["median"] == pytest.approx(s) and e["pairs"] == 32
    acc = A.effect(pts, "distill", metric="test_accuracy")
    assert acc["alone"] == pytest.approx(-1.0)
    assert A.effect(pts, "distill", metric="train_epoch_s") is None   # never measured
    front = A.pareto_front(list(pts.values()))
    assert [p["name"] for p in front] == ["bucketing_amp_distill_int8", "bucketing_amp_int8"]
    rows = [{**pts[r.key], "name": r.name} for r in ladder.ladder()]
    best = A.summary(rows, pts, max_drop_points=2.0)
    # chosen from every combination: all but sdpa (slower here); pruning changes nothing (a tie)
    assert best["best_inference"] in ("bucketing_amp_distill_int8",
                                      "bucketing_amp_distill_prune_int8")
    assert best["best_inference_speedup"] == pytest.approx(8 * 2 * 4 * 1.5)
    assert best["best_inference_accuracy_drop_points"] == pytest.approx(1.0)
    assert best["best_training"] in ("bucketing_amp", "bucketing_amp_int8")
    assert best["best_training_speedup"] == pytest.approx(16.0)
    assert best["best_inference_speedup_estimate"].se == pytest.approx(0.0, abs=1e-9)
    assert best["best_training_speedup_estimate"].value == best["best_training_speedup"]
    assert A.effect(pts, "int8", metric="train_epoch_s")["median"] == pytest.approx(1.0)
    assert A.summary(rows, pts, max_drop_points=0.5)["best_inference"] in ("bucketing_amp_int8",
                                                                           "bucketing_amp_prune_int8")
    untimed = {k: ({**p, "test_set_s": None} if p["techniques"] == ("bucketing", "amp", "int8")
                   else p)
               for k, p in pts.items()}
    assert (A.summary(rows, untimed, max_drop_points=0.5)["best_inference"]
            == "bucketing_amp_prune_int8")
    checks = A.bound_checks(rows)
    assert [c["rung"] for c in checks] == [r["name"] for r in rows[1:]]
    # Rungs adding only bucketing or SDPA have the rung below's accuracy by construction: no check.
    neutral = [c for c in checks if set(c["added"]) <= set(ladder.ACCURACY_NEUTRAL)]
    assert neutral and all(c["ok"] is None and c["bound_points"] is None for c in neutral)
    assert all(c["ok"] is True for c in checks if c not in neutral)
    assert checks[-1]["added"] == ["distill"] and checks[-1]["change_points"] == pytest.approx(-1.0)
    rows[-1] = {**rows[-1], "test_accuracy": 0.75}
    assert A.bound_checks(rows)[-1]["ok"] is False


def test_each_techniques_tolerance_is_shared_by_its_claim_and_the_ladder():
    from course_lib.measure.claims import ACCURACY_TOLERANCE_POINTS as tolerances, CLAIMS
    assert ladder.BOUNDS == tolerances
    for claim, tol in (("distillation_keeps_accuracy", tolerances["distill"]),
                       ("pruning_keeps_accuracy", tolerances["prune"]),
                       ("quantization_keeps_accuracy", tolerances["int8"])):
        assert CLAIMS[claim].rule.threshold == -tol and CLAIMS[claim].rule.direction == ">="


def test_the_zoo_distills_from_the_teachers_logits_computed_once(smoke_run, monkeypatch):
    zoo, _, _, _ = smoke_run
    import course_lib.capstone.model_zoo as Z
    calls = []
    real = Z.teacher_logits_stored
    monkeypatch.setattr(Z, "teacher_logits_stored",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    fresh = ModelZoo(zoo.teacher, zoo.corpus, device="cpu", settings=SMOKE, progress=False)
    data, cached = fresh.distill_set()
    fresh.model(ladder.Rung("s", distill=True))
    fresh.model(ladder.Rung("sp", distill=True, prune=True))
    assert len(calls) == 1 and cached.shape == (len(data), 2)
    assert fresh.student_source.startswith("distilled here")   # no stored student fits this teacher
    with torch.no_grad():   # the cache holds the teacher's own logits
        item = data[len(zoo.corpus.train)]
        live = zoo.teacher(item["input_ids"][None],
                           torch.ones(1, len(item["input_ids"]), dtype=torch.bool))
    assert torch.allclose(cached[len(zoo.corpus.train)], live[0], atol=1e-4)


def test_stack_versus_product_and_the_guide_read_the_table():
    speed = {"bucketing": 8.0, "amp": 2.0, "distill": 4.0, "prune": 1.0, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    base = pts[ladder.Rung("baseline").key]
    top = pts[ladder.ladder()[-1].key]
    (row,) = A.stack_versus_product(pts, base, [("all", "latency_b32_ms", top)])
    assert row["predicted"] == pytest.approx(math.prod(speed.values()))
    assert row["ratio"] == pytest.approx(1.0)          # this fake table multiplies exactly
    assert row["ratio_estimate"].se == pytest.approx(0.0) and row["call"] == "roughly true"
    train = pts[ladder.Rung("t", bucketing=True, amp=True, sdpa=True).key]
    (trow,) = A.stack_versus_product(pts, base, [("train", "train_epoch_s", train)])
    assert trow["ratio"] == pytest.approx(1.0) and trow["ratio_estimate"].se > 0   # unpaired steps
    labels = {t: t for t in ladder.TECHNIQUES}
    rows, notes = A.usage_guide(pts, labels)
    assert len(rows) == len(ladder.TECHNIQUES) and not notes   # nothing overlaps here
    assert rows[0].startswith("| bucketing | helps (median 8.00× over 16 pairs; alone 8.00×")
    assert "| hurts (0.50×)" in rows[-1]                # sdpa is slower in this table


def test_the_zoo_serves_the_stored_student_for_the_stored_teacher(trained):
    from course_lib.distill.stored import stored_student
    zoo, _ = trained
    stored = stored_student(zoo.teacher)
    if stored is None:
        pytest.skip("needs the stored student (python -m course_lib.tools.checkpoints --student)")
    fresh = ModelZoo(zoo.teacher, zoo.corpus, device="cpu", settings=SMOKE, progress=False)
    served = fresh.model(ladder.Rung("s", distill=True))
    assert "stored student" in fresh.student_source
    assert all(torch.equal(a, b) for a, b in zip(served.state_dict().values(),
                                                 stored[0].state_dict().values()))
    assert stored_student(build_model(zoo.teacher.cfg.vocab_size, preset="teacher", seed=5)) is None
    again = ModelZoo(zoo.teacher, zoo.corpus, device="cpu", progress=False,
                     settings=dataclasses.replace(SMOKE, train_student=True))
    again.model(ladder.Rung("s", distill=True))
    assert again.student_source.startswith("distilled here")


def test_the_bucketed_test_set_is_timed_in_strata_and_scored_on_all_of_it(smoke_run):
    """The costliest batches (half the padded tokens) in full, every k-th of the rest scaled by
    padded tokens: the strata cover the set's tokens exactly; accuracy still sees every review."""
    zoo, inputs, rows, points = smoke_run
    rung = ladder.Rung("b", bucketing=True)
    full = list(LI.test_loader(zoo, inputs, rung))
    strata = LT.timed_strata(zoo, inputs, rung)
    def tokens(b):
        return b["input_ids"].numel()
    assert (sum(f * sum(map(tokens, part)) for part, f in strata)
            == pytest.approx(sum(map(tokens, full))))
    top = strata[0][0]
    assert strata[0][1] == 1.0 and 2 * sum(map(tokens, top)) >= sum(map(tokens, full))
    # the costliest
    assert sorted(map(tokens, top)) == sorted(map(tokens, full))[len(full) - len(top):]
    fixed = LT.timed_strata(zoo, inputs, ladder.Rung("base"))
    assert len(fixed) == 1 and fixed[0][1] == len(zoo.corpus.test) / 8
    assert len(LI.test_loader(zoo, inputs, rung).dataset) == len(zoo.corpus.test)


def test_bucketed_training_steps_are_timed_in_width_order(smoke_run, monkeypatch):
    # ladder_speedups takes the epoch's error from successive differences: it needs the timed
    # steps in the order of their width (the warm-up takes the widest, then the rest in order)
    from dataclasses import replace
    zoo = smoke_run[0]
    monkeypatch.setattr(zoo, "settings", replace(zoo.settings, bucket_train_batches=6))
    widths = []
    monkeypatch.setattr(LT, "make_step_fn",
                        lambda model, b, **kw: lambda: widths.append(b["input_ids"].shape[1]))
    sampled, _ = LT.epoch_sample(zoo, "bucketed")
    out = LT.train_epoch_samples(zoo, [ladder.Rung("b", bucketing=True)])
    assert len(sampled) > 2 and len(out[ladder.Rung("b", bucketing=True).key]) == len(sampled)
    timed = widths[1:]
    assert widths[0] == max(widths) and timed == sorted(timed) and len(set(timed)) > 1


def test_practitioner_start_is_timed_with_dynamic_padding_beside_the_rungs(smoke_run):
    zoo, inputs, rows, _ = smoke_run
    rungs = ladder.ladder()[:2]
    test_s = LT.test_set_samples(zoo, inputs, rungs, practitioner=True)
    assert set(test_s) == {r.key for r in rungs} | {("practitioner",)}
    assert all(len(v) == zoo.settings.test_repeats for v in test_s.values())   # same passes: paired
    train_s = LT.train_epoch_samples(zoo, rungs, practitioner=True)
    assert len(train_s[("practitioner",)]) >= 1 and min(train_s[("practitioner",)]) > 0
    # dynamic padding: every batch as wide as its longest review, in the split's order
    loader = LI.test_loader(zoo, inputs, LI.PRACTITIONER, dynamic=True)
    lengths, start = zoo.corpus.test.lengths, 0
    for b in loader:
        n = b["input_ids"].shape[0]
        assert b["input_ids"].shape[1] == max(lengths[start:start + n])
        start += n
    assert start == len(lengths)
    assert LI.PRACTITIONER.techniques == ("sdpa",)


def test_dynamic_padding_test_set_is_sampled_in_width_order_and_scaled_by_tokens(smoke_run,
                                                                                 monkeypatch):
    from dataclasses import replace
    zoo, inputs, _, _ = smoke_run
    monkeypatch.setattr(zoo, "settings", replace(zoo.settings, eval_batch=4, dynamic_sample=4))
    (sample, factor), = LT.timed_strata(zoo, inputs, LI.PRACTITIONER, dynamic=True)
    every = list(LI.test_loader(zoo, inputs, LI.PRACTITIONER, dynamic=True))
    tokens = [b["input_ids"].numel() for b in every]
    assert len(sample) == len(every[2::4])                    # every 4th batch, from the 3rd
    got = [b["input_ids"].numel() for b in sample]
    assert got == sorted(tokens)[2::4]
    assert factor * sum(got) == pytest.approx(sum(tokens))


def test_measure_fills_the_practitioner_record_beside_the_rungs(smoke_run):
    zoo, inputs, _, _ = smoke_run
    start = {}
    rows, points = M.measure(zoo, inputs, ladder.ladder()[:2], progress=False, practitioner=start)
    assert start["name"] == "practitioner" and start["techniques"] == ("sdpa",)
    # the same teacher
    assert start["test_accuracy"] == points[ladder.Rung("baseline").key]["test_accuracy"]
    # paired passes
    assert len(start["samples"]["test_set_s"]) == len(rows[0]["samples"]["test_set_s"])
    assert start["train_epoch_s"] > 0 and start["train_design"]["population"]
    # bucketing / fixed
    assert rows[1]["train_design"] and rows[0]["train_design"] is None
    from course_lib.capstone.ladder_speedups import rung_speedup
    e = rung_speedup(rows[0], start, "test_set_s")      # paired with the baseline's passes
    n = len(start["samples"]["test_set_s"])
    assert math.isinf(e.se) if n == 1 else e.dof == n - 1


def test_points_carry_each_reviews_score_and_the_paired_change_reads_it(smoke_run):
    zoo, inputs, rows, points = smoke_run
    for r in ladder.ladder()[::3]:
        assert torch.equal(points[r.key]["test_correct"], LI.rung_correct(zoo, inputs, r))
        assert points[r.key]["test_accuracy"] == pytest.approx(
            float(points[r.key]["test_correct"].float().mean()))
    base, top = rows[0], rows[-1]
    e = A.accuracy_change(base, top)
    a, b = base["test_correct"].tolist(), top["test_correct"].tolist()
    assert e.value == pytest.approx(100 * (sum(b) - sum(a)) / len(a))   # a hand count
    assert A.accuracy_change(base, base).value == 0 and A.accuracy_change({}, top) is None


def test_every_repeat_goes_to_the_points_whose_speed_ups_carry_an_error():
    """The rungs, each technique alone and each combination one technique short of all are
    timed in every repeat (the guide's "alone" and "on top" pairs); the others once."""
    corpus = load_corpus(CorpusConfig(n_train=64, n_val=8, n_test=24, n_transfer=8, max_length=64))
    torch.manual_seed(0)
    teacher = build_model(len(corpus.vocab), preset="student", n_layers=2, d_ff=128)
    settings = dataclasses.replace(SMOKE, repeats=2)
    zoo = ModelZoo(teacher, corpus, device="cpu", settings=settings, progress=False)
    inputs = LI.choose_inputs(corpus, settings=settings)
    avail = ["bucketing", "sdpa", "int8"]
    combos = [r for r in ladder.combinations() if set(r.techniques) <= set(avail)]
    rungs = ladder.ladder(avail)
    _, points = M.measure(zoo, inputs, rungs, others=combos, progress=False)
    for key, p in points.items():
        many = p["name"] in {r.name for r in rungs} or len(p["techniques"]) in (1, len(avail) - 1)
        assert len(p["samples"]["latency_b32_ms"]) == (2 if many else 1), p["name"]
    e = A.effect(points, "int8", metric="latency_b32_ms")
    assert e["alone_estimate"] is not None and e["on_top_estimate"] is not None
    assert e["alone_estimate"].value == pytest.approx(
        math.exp(sum(math.log(a / b) for a, b in zip(
            points[(False,) * 6]["samples"]["latency_b32_ms"],
            points[ladder.Rung("i", int8=True).key]["samples"]["latency_b32_ms"])) / 2))


def test_the_stack_over_the_product_is_paired_round_by_round():
    speed = {"bucketing": 8.0, "amp": 2.0, "distill": 4.0, "prune": 1.0, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    base = pts[ladder.Rung("baseline").key]
    top = pts[ladder.ladder()[-1].key]
    alone = [pts[tuple(x == t for x in ladder.TECHNIQUES)] for t in top["techniques"]]
    # the stack runs 10% slow in round 0 and 10% fast in round 2: a hand computation per round
    top = {**top, "samples": {**top["samples"], "latency_b32_ms": [
        v * f for v, f in zip(top["samples"]["latency_b32_ms"], (1.1, 1.0, 0.9))]}}
    per_round = [(b / s) / math.prod(b / a["samples"]["latency_b32_ms"][j] for a in alone)
                 for j, (b, s) in enumerate(zip(base["samples"]["latency_b32_ms"],
                                                top["samples"]["latency_b32_ms"]))]
    got = A.paired_stack_ratio(base, top, alone, "latency_b32_ms")
    assert got.value == pytest.approx(math.exp(sum(map(math.log, per_round)) / 3))
    assert got.dof == 2 and got.se > 0
    (row,) = A.stack_versus_product(pts, base, [("all", "latency_b32_ms", top)])
    assert row["ratio_estimate"] == got
    assert A.paired_stack_ratio(base, top, alone, "train_epoch_s") is None   # steps do not pair
    short = {**top, "samples": {**top["samples"], "latency_b32_ms": [1.0, 2.0]}}
    assert A.paired_stack_ratio(base, short, alone, "latency_b32_ms") is None


def test_describe_names_everything_a_point_switches_on():
    labels = {t: t.upper() for t in ladder.TECHNIQUES}
    rung = ladder.ladder(unavailable=["amp"])[3]     # the "int8" rung serves bucketing and SDPA too
    assert rung.name == "int8" and A.describe(rung, labels) == "BUCKETING + INT8 + SDPA"
    assert A.describe({"techniques": ()}, labels) == "nothing (the baseline)"


def test_the_pareto_figure_keeps_its_axis_on_the_points():
    speed = {"bucketing": 8.0, "amp": 2.0, "distill": 4.0, "prune": 1.0, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    for p in pts.values():   # 0.80 or 0.79 on 100 reviews
        p["test_correct"] = torch.arange(100) < round(100 * p["test_accuracy"])
    rows = [{**pts[r.key], "name": r.name} for r in ladder.ladder()]
    fig = A.pareto_figure(list(pts.values()), rows, max_drop_points=0.5)
    ax = fig.axes[0]
    from matplotlib.collections import LineCollection
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert bars, "the front's paired error bars are drawn"
    spans = sorted(float(s[1, 1] - s[0, 1]) / 2 for s in bars[0].get_segments())
    # one review of 100 changed: about ±2; none changed: the rule of three's ±3, never 0
    assert spans[0] == pytest.approx(1.98, abs=0.01) and spans[-1] == pytest.approx(3.0)
    low, high = ax.get_ylim()
    assert low <= 79 and high >= 80                               # the bound at 79.5 is drawn
    assert any(line.get_ydata()[0] == pytest.approx(79.5) for line in ax.get_lines()
               if len(line.get_ydata()) == 2 and line.get_linestyle() == ":")
    fig = A.pareto_figure(list(pts.values()), rows, max_drop_points=5.0)
    ax = fig.axes[0]
    assert 75 < ax.get_ylim()[0] <= 79                            # not stretched down to 75
    assert any("below this axis" in t.get_text() for t in ax.texts)
    assert not any(line.get_linestyle() == ":" for line in ax.get_lines())


def test_the_multiply_evidence_is_read_like_the_live_table():
    from course_lib.capstone import ladder_evidence as LE
    speed = {"bucketing": 8.0, "amp": 2.0, "distill": 4.0, "prune": 1.0, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    (inf_top, inf_alone), (train_top, train_alone) = LE.cases(
        [t for t in ladder.TECHNIQUES if t != "amp"]).values()
    assert set(inf_top.techniques) == {"bucketing", "sdpa", "int8", "prune", "distill"}
    assert [r.techniques for r in train_alone] == [("bucketing",), ("sdpa",)]
    keep = {r.key for r in (ladder.Rung("baseline"), inf_top, *inf_alone, train_top, *train_alone)}
    evidence = {"unavailable": {"amp": "no bf16"},
                "points": [{**p, "techniques": list(p["techniques"])}
                           for k, p in pts.items() if k in keep]}
    labels = {t: t for t in ladder.TECHNIQUES}
    got = LE.stacks(evidence, labels)
    base = pts[(False,) * 6]
    want = A.stack_versus_product(pts, base, [("x", "latency_b32_ms", pts[inf_top.key]),
                                              ("y", "train_epoch_s", pts[train_top.key])])
    assert [g["ratio"] for g in got] == pytest.approx([w["ratio"] for w in want])
    assert got[0]["label"].startswith("inference, batch 32") and got[1]["metric"] == "train_epoch_s"
    # no amp in the product
    assert got[0]["predicted"] == pytest.approx(8.0 * 4.0 * 1.0 * 1.5 * 0.5)


def test_stacking_names_the_techniques_that_remove_the_same_cost():
    """SDPA saves attention's cost only on padded batches here: with bucketing on it gains
    nothing, so each of the two gains less on top of the other than alone; int8 multiplies."""
    speed = {"bucketing": 8.0, "amp": 1.0, "distill": 1.0, "prune": 1.0, "int8": 1.5, "sdpa": 2.0}
    pts = _fake_points(speed)
    for key, p in pts.items():
        if p["techniques"] and "bucketing" in p["techniques"] and "sdpa" in p["techniques"]:
            f = 2.0   # undo SDPA's gain where bucketing is on
            p["latency_b32_ms"] *= f
            p["samples"]["latency_b32_ms"] = [x * f for x in p["samples"]["latency_b32_ms"]]
    got = {(s["technique"], s["metric"]): s for s in A.stacking(pts)}
    assert got[("sdpa", "latency_b32_ms")]["kind"] == "overlaps"
    assert got[("sdpa", "latency_b32_ms")]["alone"] == pytest.approx(2.0)
    assert got[("sdpa", "latency_b32_ms")]["on_top"] == pytest.approx(1.0)
    assert got[("bucketing", "latency_b32_ms")]["kind"] == "overlaps"
    assert ("int8", "latency_b32_ms") not in got
    labels = {t: t for t in ladder.TECHNIQUES}
    _, notes = A.usage_guide(pts, labels)
    assert any(n.startswith("**sdpa** gains less for inference at batch 32") for n in notes)


def test_the_guide_words_and_the_biggest_gain_read_the_same_factors():
    speed = {"bucketing": 8.0, "amp": 1.0, "distill": 4.0, "prune": 1.05, "int8": 1.5, "sdpa": 0.5}
    pts = _fake_points(speed)
    techniques = [t for t in ladder.TECHNIQUES]
    # helps: a median of at least 1.1x (prune's 1.05 and amp's 1.0 do not; sdpa hurts)
    assert A.helping(pts, techniques, metric="latency_b32_ms") == ["bucketing", "distill", "int8"]
    assert A.helping(pts, ladder.TRAINS_THE_TEACHER, metric="train_epoch_s") == ["bucketing"]
    best, x, e = A.biggest_alone(pts, techniques, metric="latency_b32_ms")
    assert best == "bucketing" and x == pytest.approx(8.0) and e.value == pytest.approx(8.0)
    assert A.factor(None) is None and A.factor(
        A.effect(pts, "int8", metric="latency_b32_ms"), "alone") == pytest.approx(1.5)
