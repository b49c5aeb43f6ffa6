import math
import html
import json

import pytest

from course_lib.tools.report import ladder_html, summary_html
from course_lib.measure.results import load_results


def test_summary_lists_hardware_every_result_and_failures():
    results = {"00_welcome": {"notebook": "00_welcome", "smoke": True, "hardware": {},
                              "results": [{"name": "baseline_test_accuracy", "value": 0.93,
                                           "unit": "fraction"}]},
               "14_capstone": {"notebook": "14_capstone", "smoke": False, "hardware": {},
                               "results": [{"name": "best_speedup", "value": 17.0,
                                            "unit": "x"}]}}
    runs = {"00_welcome": (True, 12.0, ""), "14_capstone": (True, 50.0, ""),
            "05_pruning": (False, 3.0, "RuntimeError: boom")}
    page = summary_html(results, runs)
    assert "torch threads" in page and "baseline_test_accuracy" in page and "93.0%" in page
    # the ladder's lesson comes first among the lessons
    assert (page.index("<h2><a href='notebooks/14_capstone")
            < page.index("<h2><a href='notebooks/00_welcome"))
    assert "RuntimeError: boom" in page


def _rung(name, acc, epoch, test_s, b1, b32, size, peak):
    values = {"test_accuracy": (acc, "fraction"), "test_set_s": (test_s, "s"),
              "latency_b1_ms": (b1, "ms"), "latency_b32_ms": (b32, "ms"),
              "train_epoch_s": (epoch, "s"), "size_bytes": (size, "bytes"),
              "peak_mib": (peak, "MiB")}
    return [{"name": f"{name}_{k}", "value": v, "unit": u} for k, (v, u) in values.items()]


def test_ladder_and_its_hardware_head_the_summary_page(tmp_path):
    hardware = {"device": "cpu", "device_name": "FakeCPU 9000", "torch_version": "2.99",
                "compute_capability": None, "bf16_fast": True, "fp16_fast": False,
                "cpu_avx512_bf16": True, "cpu_amx": False, "threads": 2}
    payload = {"notebook": "14_capstone", "smoke": False, "hardware": hardware,
               "results": _rung("baseline", 0.78, 300.0, 40.0, 20.0, 600.0, 2 * 2**20, 150.0)
               + _rung("bucketing", 0.78, 20.0, 4.0, 5.0, 60.0, 2 * 2**20, 40.0)
               + [{"name": "best_inference_speedup", "value": 10.0, "unit": "x"}]}
    (tmp_path / "14_capstone.json").write_text(json.dumps(payload))
    (tmp_path / "00_welcome.json").write_text(json.dumps(
        {"notebook": "00_welcome", "smoke": False, "hardware": {},
         "results": [{"name": "baseline_test_accuracy", "value": 0.9, "unit": "fraction"}]}))
    results = load_results(tmp_path)
    page = summary_html(results, {"00_welcome": (True, 5.0, ""), "14_capstone": (True, 9.0, "")})
    ladder = page.index("The optimization ladder")
    assert ladder < page.index("FakeCPU 9000") < page.index("Hardware (this machine)")
    assert page.index("Hardware (this machine)") < page.index("<h2><a href='notebooks/00_welcome")
    table = ladder_html(results["14_capstone"])
    assert table.index("<td>baseline</td>") < table.index("<td>bucketing</td>")
    for text in ("78.0%", "300.0 (1.0×)", "20.0 (15.0×)", "4.00 (10.0×)", "60.0", "2.00", "40.0",
                 "best_inference_speedup", "cpu_avx512_bf16", "learner settings"):
        assert text in table, text


def test_summary_without_capstone_results_has_no_ladder():
    page = summary_html({}, {"05_pruning": (False, 3.0, "RuntimeError: boom")})
    assert "The optimization ladder" not in page and "Hardware (this machine)" in page


def _payload(stem, device, value, name="step_ms", device_name="FakeCPU"):
    return {"notebook": stem, "smoke": False,
            "hardware": {"device": device, "device_name": device_name},
            "results": [{"name": name, "value": value, "unit": "ms", "device": device}]}


def test_reference_run_is_stored_and_shown_beside_this_machine(tmp_path):
    from course_lib.tools.saved_runs import load_runs, save_run

    gpu_dir, store = tmp_path / "gpu_results", tmp_path / "store"
    gpu_dir.mkdir()
    (gpu_dir / "04_mixed_precision.json").write_text(json.dumps(
        _payload("04_mixed_precision", "cuda", 3.25, device_name="NVIDIA Fake 100")))
    path = save_run(gpu_dir, seconds={"04_mixed_precision": 61.23, "99_other": 1.0},
                    directory=store)
    assert path.name == "NVIDIA_Fake_100.json"
    # only lessons it has
    assert json.loads(path.read_text())["seconds"] == {"04_mixed_precision": 61.2}
    (gpu_dir / "05_pruning.json").write_text(json.dumps(
        _payload("05_pruning", "cuda", 1.0, device_name="NVIDIA Fake 100")))
    path = save_run(gpu_dir, seconds={"05_pruning": 9.04}, directory=store)     # report --only 05
    assert json.loads(path.read_text())["seconds"] == {"04_mixed_precision": 61.2,
                                                       "05_pruning": 9.0}
    (gpu_dir / "05_pruning.json").unlink()
    runs = load_runs(store)
    label = "NVIDIA Fake 100 (GPU, torch ?)"
    assert list(runs) == [label]
    here = {"04_mixed_precision": _payload("04_mixed_precision", "cpu", 41.5)}
    page = summary_html(here, {}, runs)
    assert f"<th>{label}</th>" in page
    assert "<td>41.5 ms (cpu)</td><td>3.25 ms (cuda)</td>" in page
    assert f"Reference run: {label}" in page
    assert "<th>result</th><th>this machine</th></tr>" in summary_html(here, {}, {})


def test_save_run_refuses_empty_smoke_and_mixed_results(tmp_path):
    import pytest

    from course_lib.tools.saved_runs import run_name, save_run

    with pytest.raises(ValueError, match="no results"):
        save_run(tmp_path, directory=tmp_path / "store")
    (tmp_path / "11_capstone.json").write_text(json.dumps(_payload("11_capstone", "cpu", 1.0)))
    with pytest.raises(ValueError, match="no longer exist.*11_capstone"):   # renumbered since
        save_run(tmp_path, directory=tmp_path / "store")
    (tmp_path / "11_capstone.json").unlink()
    smoke = {**_payload("00_welcome", "cpu", 1.0), "smoke": True}
    (tmp_path / "00_welcome.json").write_text(json.dumps(smoke))
    with pytest.raises(ValueError, match="smoke"):
        save_run(tmp_path, directory=tmp_path / "store")
    (tmp_path / "00_welcome.json").write_text(json.dumps(_payload("00_welcome", "cpu", 1.0)))
    (tmp_path / "01_padding.json").write_text(json.dumps(_payload("01_padding", "cuda", 1.0,
                                                                  device_name="G")))
    with pytest.raises(ValueError, match="several machines"):
        save_run(tmp_path, directory=tmp_path / "store")
    assert (run_name({"device": "cpu", "device_name": "Intel(R) Xeon(R)", "threads": 2})
            == "cpu_Intel_R_Xeon_R_2_threads")


def test_save_run_counts_a_lesson_on_fewer_threads_as_the_same_machine(tmp_path):
    """Lesson 10 times on one torch thread: the same CPU, so one run, named after the most."""
    from course_lib.tools.saved_runs import save_run

    for stem, threads in (("00_welcome", 2), ("10_attention", 1)):
        payload = _payload(stem, "cpu", 1.0)
        payload["hardware"] = {**payload["hardware"], "threads": threads}
        (tmp_path / f"{stem}.json").write_text(json.dumps(payload))
    path = save_run(tmp_path, directory=tmp_path / "store")
    run = json.loads(path.read_text())
    assert path.name.endswith("_2_threads.json") and run["hardware"]["threads"] == 2
    assert run["lessons"]["10_attention"]["hardware"]["threads"] == 1


def test_relative_out_puts_results_where_the_summary_reads_them(tmp_path, monkeypatch):
    """The lessons run with notebooks/ as their working directory: a relative --out must still
    put the results where index.html is built from (seen broken on a fresh clone)."""
    import os
    from pathlib import Path

    from course_lib.tools import report

    def fake_execute(nb, out_dir, *, smoke, timeout):
        cwd = os.getcwd()
        os.chdir(nb.parent)   # what papermill does for the kernel
        try:
            results = Path(os.environ["COURSE_RESULTS_DIR"])
            results.mkdir(parents=True, exist_ok=True)
            (results / f"{nb.stem}.json").write_text(json.dumps(
                {"notebook": nb.stem, "smoke": True, "hardware": {},
                 "results": [{"name": "marker_value", "value": 7.0, "unit": "count"}]}))
        finally:
            os.chdir(cwd)
        return True, 0.1, ""

    monkeypatch.setattr(report, "execute", fake_execute)
    for var in ("COURSE_RESULTS_DIR", "COURSE_STATIC"):   # main() sets them: restore after
        monkeypatch.setenv(var, "")
    monkeypatch.chdir(tmp_path)
    assert report.main(["--out", "build", "--only", "00_welcome"]) == 0
    assert "marker_value" in (tmp_path / "build" / "index.html").read_text()


def test_report_opens_with_the_claims_table():
    from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS
    from course_lib.measure.judging import judge, judge_over, show
    from course_lib.measure.verdicts import Ratio

    v = judge("dynamic_padding_faster", 1.0, se=0.01, evidence="ran 3 batches (cpu)")
    swept = judge_over("uniform_length_faster",
                       {64: Ratio(0.9, 0.01, 9), 4096: Ratio(3.0, 0.01, 9)},
                       learner=64, evidence="timed")
    results = {"01_padding": {"notebook": "01_padding", "smoke": False,
                              "hardware": {"device": "cpu", "device_name": "FakeCPU"},
                              "results": [], "verdicts": [v.as_dict(), swept.as_dict()],
                              "demonstrations": [show("padding_must_not_affect", ok=True,
                                                      numbers="at most 3e-07").as_dict()]}}
    page = summary_html(results, {})
    assert (page.index("Claims checked") < page.index("Demonstrations")
            < page.index("Hardware (this machine)"))
    claims = page[page.index("Claims checked"):page.index("<h2>Demonstrations")]
    assert claims.count("<tr>") == len(CLAIMS) + 1              # every claim, and the header
    row = claims[claims.index(CLAIMS["dynamic_padding_faster"].original):]
    row = row[:row.index("</tr>")]
    assert "ran 3 batches" in row and "<b>fails</b>" in row and "cpu (FakeCPU)" in row
    row = claims[claims.index(CLAIMS["uniform_length_faster"].original):]
    row = row[:row.index("</tr>")]
    assert ("<b>holds from</b>" in row
            and "Holds from a pool of 4,096 reviews; your point at a pool of 64 reviews" in row)
    assert claims.count("<b>not run</b>") == len(CLAIMS) - 2
    demos = page[page.index("<h2>Demonstrations"):page.index("Hardware (this machine)")]
    assert demos.count("<tr>") == len(DEMONSTRATIONS) + 1 and "at most 3e-07" in demos
    assert "<b>shown</b>" in demos and demos.count("<b>not run</b>") == len(DEMONSTRATIONS) - 1


def test_a_gpu_claim_skipped_on_a_cpu_is_not_judged_here_not_refuted():
    from course_lib.measure.claims import CLAIMS
    from course_lib.measure.results import Recorder

    rec = Recorder("04_mixed_precision", smoke=False)
    rec.skip("fp16_training_speed", needs="cuda", claim="fp16_faster_training",
             reason="FP16 ran at 0.07x FP32 on this CPU, which has no fast FP16 arithmetic")
    with pytest.raises(ValueError, match="claim"):
        rec.skip("x", needs="cuda", claim="no_such_claim", reason="")
    page = summary_html({"04_mixed_precision": {**rec.payload(), "hardware": {"device": "cpu"}}},
                        {})
    claims = page[page.index("Claims checked"):page.index("<h2>Demonstrations")]
    row = claims[claims.index(CLAIMS["fp16_faster_training"].original):]
    row = row[:row.index("</tr>")]
    assert "<b>not judged here: needs cuda</b>" in row and "0.07x FP32" in row
    assert claims.count("<b>not run</b>") == len(CLAIMS) - 1


def test_claims_table_shows_the_rule_and_the_value_with_its_interval():
    from course_lib.measure.claims import CLAIMS
    from course_lib.measure.judging import judge
    from course_lib.measure.verdicts import t_quantile

    v = judge("quantization_raises_throughput", 1.5, se=0.1, dof=4, evidence="int8 at 1.5x (cpu)")
    page = summary_html({"07_quantization": {"notebook": "07_quantization", "smoke": False,
                                             "hardware": {"device": "cpu"}, "results": [],
                                             "verdicts": [v.as_dict()]}}, {})
    row = page[page.index(CLAIMS["quantization_raises_throughput"].original):]
    row = row[:row.index("</tr>")]
    assert ("≥ 1.2" in row
            and html.escape(CLAIMS["quantization_raises_throughput"].rule.quantity) in row)
    f = math.exp(t_quantile(0.975, 4) * 0.1 / 1.5)                   # t with 4 dof, not 2 SE
    # a ratio: its interval, on the log scale
    assert f"1.5 ({1.5 / f:.4g}–{1.5 * f:.4g})" in row
    v = judge("pruning_keeps_accuracy", -0.5, se=0.2, dof=4, evidence="constructed")
    page = summary_html({"05_pruning": {"notebook": "05_pruning", "smoke": False, "hardware": {},
                                        "results": [], "verdicts": [v.as_dict()]}}, {})
    # a difference: value ± half-width
    assert f"-0.5 ± {t_quantile(0.975, 4) * 0.2:.4g}" in page


def test_values_are_formatted_with_their_units():
    from course_lib.tools.report import fmt_value

    assert fmt_value(2_478_000, "bytes") == "2.36 MiB"
    assert fmt_value(-0.0, "points") == "0 points" and fmt_value(-1e-9) == "-1.00e-09"
    assert fmt_value(1.2345, "x") == "1.234×" and fmt_value(123456, "params") == "123,456 params"
    assert fmt_value(None) == "–" and fmt_value(0.9234, "fraction") == "92.3%"


def test_skipped_sections_are_listed_with_their_reason():
    from course_lib.measure.results import Recorder

    rec = Recorder("10_attention", smoke=False)
    rec.skip("flex_attention", needs="compiler", reason="no C compiler on this machine")
    page = summary_html({"10_attention": {**rec.payload(), "hardware": {"device": "cpu"}}}, {})
    part = page[page.index("Skipped sections"):]
    assert "flex_attention" in part and "no C compiler on this machine" in part
    assert "None: every section ran" in summary_html({}, {})


def test_stored_runs_hold_only_current_lessons():
    # a renumbering must rename the reference runs' lessons too (their results are shown beside
    # this machine's, lesson by lesson)
    from pathlib import Path

    from course_lib.tools.saved_runs import load_runs
    stems = {p.stem for p in (Path(__file__).parents[1] / "notebooks").glob("*.ipynb")}
    runs = load_runs()
    assert runs
    for name, run in runs.items():
        assert set(run["lessons"]) <= stems, (name, sorted(set(run["lessons"]) - stems))
        assert set(run.get("seconds", {})) <= set(run["lessons"]), name
