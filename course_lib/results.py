"""What a notebook measured, written where tests and ``make report`` can read it.

When ``COURSE_RESULTS_DIR`` is set, ``Recorder.save`` writes
``$COURSE_RESULTS_DIR/<notebook>.json``::

    {"notebook": "00_welcome", "smoke": false, "hardware": {...},
     "results": [{"name": "baseline_test_accuracy", "value": 0.93, "unit": "fraction"}]}

Names are snake_case and stable across runs, so runs can be compared.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from .device import capabilities

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Recorder:
    def __init__(self, notebook: str, *, smoke: bool):
        if not notebook:
            raise ValueError("notebook must be a non-empty file stem such as '00_welcome'")
        self.notebook, self.smoke = notebook, bool(smoke)
        self.results: list[dict] = []

    def record(self, name: str, value: float, unit: str) -> float:
        """Store one measurement (replacing an earlier one of the same name); returns value."""
        if not _NAME.match(name):
            raise ValueError(f"name must be snake_case ([a-z][a-z0-9_]*), got {name!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"value of {name!r} must be finite, got {value}")
        self.results = [r for r in self.results if r["name"] != name]
        self.results.append({"name": name, "value": value, "unit": unit})
        return value

    def get(self, name: str) -> float:
        for r in self.results:
            if r["name"] == name:
                return r["value"]
        raise KeyError(name)

    def payload(self) -> dict:
        return {"notebook": self.notebook, "smoke": self.smoke,
                "hardware": capabilities().as_dict(), "results": list(self.results)}

    def save(self, directory: str | os.PathLike | None = None) -> Path | None:
        """Write the JSON file; a no-op (returns None) when no directory is configured."""
        directory = directory or os.environ.get("COURSE_RESULTS_DIR")
        if not directory:
            return None
        path = Path(directory) / f"{self.notebook}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.payload(), indent=2))
        return path


def load_results(directory: str | os.PathLike) -> dict[str, dict]:
    """Every results file in ``directory``, keyed by notebook stem."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))}
