"""Execute every lesson with papermill in smoke mode and check what it recorded (marked
``notebooks``; ``make test`` runs the same checks on the browser suite's Run All instead, and
this run only where Chromium is missing); the other tests here check the lessons' files.

Fails on an error in any cell, on an exception inside a widget callback (papermill does not
see those), on a notebook that recorded no results, on results outside sane bounds and on a
time recorded without its device (``nbutil.run_smoke``; ``tests/test_gpu.py`` runs the same on a
GPU and also fails on a GPU section that skipped).
Per-cell and per-test timeouts make a stalled kernel fail instead of hanging CI.
"""
from __future__ import annotations

import ast
import os

import pytest

from nbutil import NOTEBOOKS, read, run_smoke

CELL_TIMEOUT = int(os.environ.get("NB_CELL_TIMEOUT", 300))


@pytest.mark.notebooks
@pytest.mark.timeout(900)
@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_smoke_mode(nb_path, tmp_path, monkeypatch):
    run_smoke(nb_path, tmp_path, monkeypatch, cell_timeout=CELL_TIMEOUT)


def test_every_notebook_has_parameters_cell_and_no_outputs():
    for path in NOTEBOOKS:
        nb = read(path)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        assert "SMOKE" in tagged[0].source, f"{path.name}: parameters cell lacks SMOKE"
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


def _names(target) -> set[str]:
    """Upper-case names bound by an assignment target (x = / x, y = ...), not the names read
    inside a subscript target such as d[f"{KNOB}"] = ..."""
    if isinstance(target, ast.Name):
        return {target.id} if target.id.isupper() else set()
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_names(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return set()


def _assigned(source: str) -> set[str]:
    return {n for node in ast.parse(source).body if isinstance(node, ast.Assign)
            for t in node.targets for n in _names(t)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_knobs_live_in_the_parameters_cell_only(path):
    """papermill -p NAME VALUE must win: the cell after the parameters cell may only fill in the
    knobs left at None (or compute lines marked '# derived'), and no later cell reassigns one."""
    cells = [c for c in read(path).cells if c.cell_type == "code"]
    i = next(k for k, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
    knobs, nxt = _assigned(cells[i].source), cells[i + 1].source
    lines = nxt.splitlines()
    for node in ast.walk(ast.parse(nxt)):
        if not isinstance(node, ast.Assign):
            continue
        names = _assigned(ast.get_source_segment(nxt, node))
        if not names or "# derived" in lines[node.lineno - 1]:
            continue
        text = " ".join(ast.get_source_segment(nxt, node).split())
        assert len(names) == 1 and names <= knobs, (
            f"{path.name}: {sorted(names)} set after the parameters cell")
        (name,) = names
        assert text.endswith(f"if {name} is None else {name}"), f"{path.name}: {text}"
    for c in cells[i + 2:]:
        again = _assigned(c.source) & knobs
        assert not again, f"{path.name}: a later cell reassigns {sorted(again)}"


def test_prose_cells_hide_their_source():
    """A code cell whose job is a paragraph (display(Markdown(f"..."))) hides its source in
    JupyterLab and on the site: python -m course_lib.tools.prose_cells --write marks them."""
    import json

    from course_lib.tools.prose_cells import unmarked
    bad = {p.name: unmarked(json.loads(p.read_text())) for p in NOTEBOOKS}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_the_prose_check_catches_an_unmarked_paragraph_cell():
    from course_lib.tools.prose_cells import tidy_notebook, unmarked
    cell = {"cell_type": "code", "id": "a", "metadata": {}, "outputs": [], "source": [
        "x = 2\n", "y = x * 3\n", "z = x + y\n", "w = z - 1\n",
        "display(Markdown(f\"x is {x}, \"\n", "    f\"and y is {y}, \"\n",
        "    \"which is more.\"))\n"]}
    nb = {"cells": [cell, {"cell_type": "code", "id": "b", "metadata": {}, "outputs": [],
                            "source": ["display(Markdown(f\"only {x}\"\n", "  \"prose\"))\n"]}]}
    assert unmarked(nb) == [1]
    assert tidy_notebook(nb) == 3 and unmarked(nb) == []        # one split, two marked
    assert [c["id"] for c in nb["cells"]] == ["0", "1", "2"]
    assert "".join(nb["cells"][0]["source"]) == "x = 2\ny = x * 3\nz = x + y\nw = z - 1"
    assert nb["cells"][1]["metadata"]["tags"] == ["hide-input"]


def test_solutions_are_tagged_and_hidden_under_their_exercises():
    """A cell that opens with "# Solution" is collapsed in JupyterLab (jupyter.source_hidden)
    and tagged ``solution`` (kept by the prose tidier, hidden on the site): a learner sees the
    exercise first, not its answer right under it."""
    import json

    shown = [f"{p.name} cell {i}" for p in NOTEBOOKS
             for i, c in enumerate(json.loads(p.read_text())["cells"])
             if c["cell_type"] == "code" and "".join(c["source"]).lstrip().startswith("# Solution")
             and not (c["metadata"].get("jupyter", {}).get("source_hidden")
                      and "solution" in c["metadata"].get("tags", []))]
    assert shown == [], f"visible or untagged solutions: {shown}"
