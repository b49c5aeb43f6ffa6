from course_lib.report import summary_html


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
