"""Helpers shared by the notebook tests."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def read(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def widget_errors(nb) -> list[str]:
    """Errors raised inside ipywidgets callbacks.

    nbclient/papermill route an Output widget's output into the widget state
    (``nb.metadata.widgets``), not into cell outputs, and ``interact`` swallows exceptions:
    without this scan a broken callback passes silently.
    """
    state = (nb.metadata.get("widgets", {})
             .get("application/vnd.jupyter.widget-state+json", {}).get("state", {}))
    errs = []
    for mid, model in state.items():
        if model.get("model_name") == "OutputModel":
            for out in model["state"].get("outputs", []):
                if out.get("output_type") == "error":
                    errs.append(f"{out['ename']}: {out['evalue']} (widget {mid})")
    return errs


def cell_errors(nb) -> list[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


# Sane bounds by unit: a fraction is in [0, 1], times and sizes are positive.
BOUNDS = {"fraction": (0.0, 1.0), "s": (0.0, 3600.0), "ms": (0.0, 3.6e6), "x": (0.0, 1e4),
          "bytes": (0.0, 1e12), "MiB": (0.0, 1e6), "count": (0.0, 1e12),
          "tokens/s": (0.0, 1e12), "params": (1.0, 1e12), "GFLOP/s": (0.0, 1e7),
          "GiB/s": (0.0, 1e5)}


def run_smoke(nb_path: Path, tmp_path: Path, monkeypatch, *, cell_timeout: int) -> dict:
    """Execute one lesson in smoke mode with papermill, then ``check_smoke_run``. Returns the
    lesson's results payload."""
    from course_lib.tools.notebook_runner import execute_notebook

    results_dir = tmp_path / "results"
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(results_dir))
    out = tmp_path / nb_path.name
    # A lost kernel reply (nbclient issue 312) reruns the notebook once instead of hanging
    # until the cell timeout; the rerun is printed in the test's output.
    execute_notebook(nb_path, out, parameters={"SMOKE": True}, cwd=nb_path.parent,
                     cell_timeout=cell_timeout)
    return check_smoke_run(nb_path.stem, out, results_dir / f"{nb_path.stem}.json")


def keep_smoke_run(executed: Path, results: Path) -> None:
    """``COURSE_SMOKE_KEEP=DIR`` (make test): keep the executed lesson and its results in
    DIR/notebooks and DIR/results, for the smoke site."""
    keep = os.environ.get("COURSE_SMOKE_KEEP")
    if keep:
        for sub, src in (("notebooks", executed), ("results", results)):
            (Path(keep) / sub).mkdir(parents=True, exist_ok=True)
            if src.exists():
                shutil.copy(src, Path(keep) / sub / src.name)


def check_smoke_run(stem: str, executed: Path, results: Path) -> dict:
    """The checks of one lesson executed in smoke mode (by papermill, or by Run All in
    JupyterLab: ``tests/browser``): fail on an error in a cell or inside a widget callback, on
    output a learner should not see, on missing results, on results out of bounds, on a time
    recorded without its device, on a claim without its verdict or a demonstration not shown.
    Returns the lesson's results payload."""
    keep_smoke_run(executed, results)
    nb = read(executed)
    assert not cell_errors(nb)
    errs = widget_errors(nb)
    assert not errs, f"exception inside a widget callback: {errs}"
    from course_lib.tools.hygiene import output_problems
    problems = output_problems(nb)
    assert not problems, f"{stem}: output a learner should not see:\n" + "\n".join(problems)

    assert results.exists(), f"{stem} recorded no results (Recorder.save not called?)"
    payload = json.loads(results.read_text())
    assert payload["notebook"] == stem and payload["smoke"] is True
    assert payload["results"], "results list is empty"
    for r in payload["results"]:
        assert math.isfinite(r["value"]), r
        lo, hi = BOUNDS.get(r["unit"], (-math.inf, math.inf))
        assert lo <= r["value"] <= hi, f"{r['name']} = {r['value']} {r['unit']} out of bounds"
        if r["unit"] in ("s", "ms"):
            assert r.get("device"), f"{r['name']}: a time recorded without its device"
    from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS
    from course_lib.measure.judging import VERDICT_WORDS

    judged = {v["claim"]: v["outcome"] for v in payload.get("verdicts", [])}
    # a claim the hardware cannot judge (a GPU claim on a CPU) is recorded as not judged here
    judged.update({s["claim"]: "not judged here" for s in payload.get("skipped", [])
                   if "claim" in s})
    missing = [c.id for c in CLAIMS.values() if c.lesson == stem and c.id not in judged]
    assert not missing, f"claims of {stem} without a verdict: {missing}"
    assert set(judged.values()) <= {*VERDICT_WORDS, "not judged here"}, judged
    shown = {d["demonstration"]: d["ok"] for d in payload.get("demonstrations", [])}
    missing = [d.id for d in DEMONSTRATIONS.values() if d.lesson == stem and d.id not in shown]
    assert not missing, f"demonstrations of {stem} not shown: {missing}"
    assert all(shown.values()), f"a demonstration's exact check did not come out: {shown}"
    return payload
