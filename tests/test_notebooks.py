"""Execute every lesson with papermill in smoke mode and check what it recorded.

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

pytestmark = pytest.mark.notebooks
CELL_TIMEOUT = int(os.environ.get("NB_CELL_TIMEOUT", 300))


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
        assert len(names) == 1 and names <= knobs, f"{path.name}: {sorted(names)} set after the parameters cell"
        (name,) = names
        assert text.endswith(f"if {name} is None else {name}"), f"{path.name}: {text}"
    for c in cells[i + 2:]:
        again = _assigned(c.source) & knobs
        assert not again, f"{path.name}: a later cell reassigns {sorted(again)}"
