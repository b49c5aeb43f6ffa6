"""Execute every lesson with papermill in smoke mode and check what it recorded.

Fails on an error in any cell, on an exception inside a widget callback (papermill does not
see those), on a notebook that recorded no results, on results outside sane bounds and on a
time recorded without its device (``nbutil.run_smoke``; ``tests/test_gpu.py`` runs the same on a
GPU and also fails on a GPU section that skipped).
Per-cell and per-test timeouts make a stalled kernel fail instead of hanging CI.
"""
from __future__ import annotations

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
