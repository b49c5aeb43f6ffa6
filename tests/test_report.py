import json

from course_lib.report import ladder_html, summary_html
from course_lib.results import load_results


def test_summary_lists_hardware_every_result_and_failures():
    results = {"00_welcome": {"notebook": "00_welcome", "smoke": True, "hardware": {},
                              "results": [{"name": "baseline_test_accuracy", "value": 0.93,
                                           "unit": "fraction"}]},
               "11_capstone": {"notebook": "11_capstone", "smoke": False, "hardware": {},
                               "results": [{"name": "best_speedup", "value": 17.0,
                                            "unit": "x"}]}}
    runs = {"00_welcome": (True, 12.0, ""), "11_capstone": (True, 50.0, ""),
            "05_pruning": (False, 3.0, "RuntimeError: boom")}
    page = summary_html(results, runs)
    assert "torch threads" in page and "baseline_test_accuracy" in page and "0.93" in page
    assert page.index("11_capstone") < page.index("00_welcome")   # the ladder comes first
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
    payload = {"notebook": "11_capstone", "smoke": False, "hardware": hardware,
               "results": _rung("baseline", 0.78, 300.0, 40.0, 20.0, 600.0, 2 * 2**20, 150.0)
               + _rung("bucketing", 0.78, 20.0, 4.0, 5.0, 60.0, 2 * 2**20, 40.0)
               + [{"name": "best_inference_speedup", "value": 10.0, "unit": "x"}]}
    (tmp_path / "11_capstone.json").write_text(json.dumps(payload))
    (tmp_path / "00_welcome.json").write_text(json.dumps(
        {"notebook": "00_welcome", "smoke": False, "hardware": {},
         "results": [{"name": "baseline_test_accuracy", "value": 0.9, "unit": "fraction"}]}))
    results = load_results(tmp_path)
    page = summary_html(results, {"00_welcome": (True, 5.0, ""), "11_capstone": (True, 9.0, "")})
    ladder = page.index("The optimization ladder")
    assert ladder < page.index("FakeCPU 9000") < page.index("Hardware (this machine)")
    assert page.index("Hardware (this machine)") < page.index("00_welcome")
    table = ladder_html(results["11_capstone"])
    assert table.index("<td>baseline</td>") < table.index("<td>bucketing</td>")
    for text in ("78.0%", "300.0 (1.0×)", "20.0 (15.0×)", "4.00 (10.0×)", "60.0", "2.00", "40.0",
                 "best_inference_speedup", "cpu_avx512_bf16", "learner settings"):
        assert text in table, text


def test_summary_without_capstone_results_has_no_ladder():
    page = summary_html({}, {"05_pruning": (False, 3.0, "RuntimeError: boom")})
    assert "The optimization ladder" not in page and "Hardware (this machine)" in page
