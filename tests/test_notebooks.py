"""Execute every lesson with papermill in smoke mode and check what it recorded.

Fails on an error in any cell, on an exception inside a widget callback (papermill does not
see those), on a notebook that recorded no results, and on results outside sane bounds.
Per-cell and per-test timeouts make a stalled kernel fail instead of hanging CI.
"""
from __future__ import annotations

import json
import math
import os

import papermill as pm
import pytest

from nbutil import NOTEBOOKS, cell_errors, read, widget_errors

pytestmark = pytest.mark.notebooks
CELL_TIMEOUT = int(os.environ.get("NB_CELL_TIMEOUT", 300))

# Sane bounds by unit: a fraction is in [0, 1], times and sizes are positive.
BOUNDS = {"fraction": (0.0, 1.0), "s": (0.0, 3600.0), "ms": (0.0, 3.6e6), "x": (0.0, 1e4),
          "bytes": (0.0, 1e12), "MiB": (0.0, 1e6), "count": (0.0, 1e12),
          "tokens/s": (0.0, 1e12), "params": (1.0, 1e12), "GFLOP/s": (0.0, 1e7),
          "GiB/s": (0.0, 1e5)}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_smoke_mode(nb_path, tmp_path, monkeypatch):
    results_dir = tmp_path / "results"
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(results_dir))
    out = tmp_path / nb_path.name
    pm.execute_notebook(str(nb_path), str(out), parameters={"SMOKE": True},
                        kernel_name="python3", cwd=str(nb_path.parent), progress_bar=False,
                        execution_timeout=CELL_TIMEOUT)
    nb = read(out)
    assert not cell_errors(nb)
    errs = widget_errors(nb)
    assert not errs, f"exception inside a widget callback: {errs}"

    path = results_dir / f"{nb_path.stem}.json"
    assert path.exists(), f"{nb_path.name} recorded no results (Recorder.save not called?)"
    payload = json.loads(path.read_text())
    assert payload["notebook"] == nb_path.stem and payload["smoke"] is True
    assert payload["results"], "results list is empty"
    for r in payload["results"]:
        assert math.isfinite(r["value"]), r
        lo, hi = BOUNDS.get(r["unit"], (-math.inf, math.inf))
        assert lo <= r["value"] <= hi, f"{r['name']} = {r['value']} {r['unit']} out of bounds"


def test_every_notebook_has_parameters_cell_and_no_outputs():
    for path in NOTEBOOKS:
        nb = read(path)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        assert "SMOKE" in tagged[0].source, f"{path.name}: parameters cell lacks SMOKE"
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name
