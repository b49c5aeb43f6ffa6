"""The site generator's pieces, without Sphinx: the lessons table read from the README, the
notebook as the site shows it, the reference-run table and the claims page."""
import json

from course_lib.tools import site
from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS
from course_lib.measure.judging import judge_over
from course_lib.measure.verdicts import Ratio
from course_lib.tools.colab import BADGE_TAG, SETUP_TAG
from course_lib.tools.site import ROOT, WIDGET_VIEW


def test_lesson_table_comes_from_the_readme():
    table = site.lesson_table((ROOT / "README.md").read_text())
    notebooks = sorted(p.stem[:2] for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    assert sorted(table) == notebooks
    assert all(title and measures for title, measures in table.values())


def test_for_the_site_keeps_figures_drops_live_widgets_and_the_colab_setup():
    nb = {"metadata": {"widgets": {"state": {}}}, "cells": [
        {"cell_type": "markdown", "metadata": {"tags": [BADGE_TAG]},
         "source": f"[![x]({site.COLAB_BADGE})](u)"},
        {"cell_type": "code", "metadata": {"tags": [SETUP_TAG]}, "outputs": [], "source": "pip"},
        {"cell_type": "code", "metadata": {}, "source": "explore(...)", "outputs": [
            {"output_type": "display_data",
             "data": {WIDGET_VIEW: {"model_id": "m"}, "text/plain": "VBox"}},
            {"output_type": "display_data",
             "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}]}]}
    out = site.for_the_site(json.loads(json.dumps(nb)))
    assert "widgets" not in out["metadata"]
    assert ("_static/colab-badge.svg" in out["cells"][0]["source"]
            and site.COLAB_BADGE not in out["cells"][0]["source"])
    assert "remove-cell" in out["cells"][1]["metadata"]["tags"]
    outs = out["cells"][2]["outputs"]
    assert len(outs) == 1 and "image/png" in outs[0]["data"]        # the figure stays


def test_reference_cell_puts_every_run_beside_this_one():
    mine = {"results": [{"name": "step_ms", "value": 41.5, "unit": "ms", "device": "cpu"},
                        {"name": "only_here", "value": 1.0, "unit": "count"}]}
    runs = {"GPU X": {"hardware": {}, "lessons": {"04_x": {"results": [
        {"name": "step_ms", "value": 3.25, "unit": "ms", "device": "cuda"}]}}}}
    text = site.reference_cell("04_x", mine, runs)["source"]
    assert "| result | this run | GPU X |" in text and "| --- | --- | --- |" in text
    assert "| step_ms | 41.5 ms (cpu) | 3.25 ms (cuda) |" in text
    assert "| only_here | 1 | – |" in text
    assert "No reference run" in site.reference_cell("04_x", mine, {})["source"]


def test_claims_page_has_a_row_per_claim_and_a_column_per_run():
    results = {"04_x": {"hardware": {"device": "cpu"}, "verdicts": [
        {"claim": next(iter(CLAIMS)), "outcome": "holds", "value": 1.0, "se": 0.1, "dof": 2,
         "evidence": "e"}]}}
    runs = {"R1": {"hardware": {}, "lessons": results}}
    page = site.claims_page(results, runs)
    assert page.count("<tr><td>") == len(CLAIMS) + len(DEMONSTRATIONS)   # demonstrations apart
    assert page.index("<h2>Demonstrations") > page.index(CLAIMS[next(reversed(CLAIMS))].original)
    assert f"| `{next(iter(CLAIMS))}` | Holds: " in page
    swept = judge_over("uniform_length_faster",
                       {64: Ratio(0.9, 0.01, 9), 4096: Ratio(3.0, 0.01, 9)},
                       learner=64, evidence="e")
    runs = {"R1": {"hardware": {}, "lessons": {"00_x": {"verdicts": [swept.as_dict()]}}}}
    assert ("| `uniform_length_faster` | Holds from a pool of 4,096 reviews; "
            "your point at a pool of 64 reviews" in site.claims_page(results, runs))


def test_claims_page_draws_a_map_per_swept_claim_with_reference_runs_faint(tmp_path):
    swept = judge_over("uniform_length_faster",
                       {64: Ratio(0.9, 0.01, 9), 4096: Ratio(3.0, 0.01, 9)},
                       learner=64, evidence="e")
    results = {"02_x": {"verdicts": [swept.as_dict()]}}
    runs = {"R1": {"hardware": {}, "lessons": results},
            "old": {"hardware": {}, "lessons": {"00_x": {"verdicts": [
                {"claim": "params_drive_memory", "outcome": "depends", "points": []}]}}}}
    maps = site.write_maps(results, runs, tmp_path / "maps")
    assert maps == {"uniform_length_faster": "maps/uniform_length_faster.png"}
    assert (tmp_path / "maps" / "uniform_length_faster.png").stat().st_size > 1000
    page = site.claims_page(results, runs, maps)
    assert "![The verdict map of uniform_length_faster](maps/uniform_length_faster.png)" in page


def test_home_page_says_when_it_was_built_from_a_smoke_run():
    lessons = {"00_x": ("Welcome", "memory")}
    hw = {"device": "cpu", "device_name": "FakeCPU"}
    full = site.home_page(lessons, {}, {"00_x": {"smoke": False, "hardware": hw}}, {})
    smoke = site.home_page(lessons, {}, {"00_x": {"smoke": True, "hardware": hw}}, {})
    assert "smoke build" not in full and "A smoke build" in smoke
    assert "FakeCPU" in full and "[Welcome](00_x)" in full
