"""Helpers shared by the notebook tests."""
from __future__ import annotations

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
