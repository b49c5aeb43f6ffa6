"""What a notebook measured, written where tests and ``make report`` can read it.

When ``COURSE_RESULTS_DIR`` is set, ``Recorder.save`` writes
``$COURSE_RESULTS_DIR/<notebook>.json``::

    {"notebook": "00_welcome", "smoke": false, "hardware": {...},
     "results": [{"name": "baseline_test_accuracy", "value": 0.93, "unit": "fraction"},
                 {"name": "step_ms", "value": 41.0, "unit": "ms", "device": "cpu"}],
     "skipped": [{"section": "flash_attention", "needs": "cuda", "reason": "..."}]}

Names are snake_case and stable across runs, so runs can be compared. A time (unit ``s`` or
``ms``) must say which device it ran on (``device="cpu"``, ``"cuda"``): on a GPU machine a
lesson times some things on the GPU and others (int8, DDP over gloo) on the CPU, and a number
without its device is easy to misread. Any other result may carry one too (a speed ratio).
A section that cannot run here records ``skip(section, needs=..., reason=...)``, so a run on
the hardware it needs (``make test-gpu``) can check that nothing it should run was skipped.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import re
from pathlib import Path

import torch

from course_lib.core.device import capabilities

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# The units of notebooks/README.md: a signed accuracy difference is in "points" (percentage
# points, may be negative), a signal-to-noise ratio in "dB", a difference of model outputs
# (logits, dimensionless) in "logit", a difference of two tensors (weights, activations) in
# "delta".
UNITS = frozenset({"fraction", "s", "ms", "x", "bytes", "MiB", "count", "tokens/s", "params",
                   "GFLOP/s", "GiB/s", "points", "dB", "logit", "delta"})
TIMING_UNITS = frozenset({"s", "ms"})
# What a skipped section needs: any CUDA GPU, one of compute capability >= 8.0, >= 2 GPUs, the
# torchao package (GPU int8, lesson 07) or a C++ compiler (Inductor on a CPU, lesson 13).
# ``make test-gpu`` fails when a GPU run skips for any reason the GPU does not explain.
NEEDS = ("cuda", "sm80", "multi_gpu", "torchao", "compiler", "cores")   # cores: a core per rank


class Recorded(float):
    """What ``Recorder.record`` returns: the value, a float, that shows nothing when a cell ends
    with the call. Recording is not output: a lesson says what it measured in a sentence."""

    def _ipython_display_(self) -> None:
        pass


class RecordedCount(int):
    """``Recorded`` for a whole number (a count, parameters, bytes): it prints as one (17, not
    17.0)."""

    def _ipython_display_(self) -> None:
        pass


class Recorder:
    def __init__(self, notebook: str, *, smoke: bool):
        if not notebook:
            raise ValueError("notebook must be a non-empty file stem such as '00_welcome'")
        self.notebook, self.smoke = notebook, bool(smoke)
        self.results: list[dict] = []
        self.skipped: list[dict] = []
        self.verdicts: list[dict] = []
        self.demonstrations: list[dict] = []

    def record(self, name: str, value: float, unit: str, *,
               device: torch.device | str | None = None) -> Recorded | RecordedCount:
        """Store one measurement (replacing an earlier one of the same name); returns the value
        (``Recorded``: a float that prints nothing at the end of a cell).
        ``device``: where it was measured; required for times (``s``, ``ms``)."""
        if not _NAME.match(name):
            raise ValueError(f"name must be snake_case ([a-z][a-z0-9_]*), got {name!r}")
        if unit not in UNITS:
            raise ValueError(f"unit of {name!r} must be one of {sorted(UNITS)}, got {unit!r}")
        whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"value of {name!r} must be finite, got {value}")
        if unit in TIMING_UNITS and device is None:
            raise ValueError(f"{name!r} is a time in {unit}: pass device= (the device it ran "
                             f"on, for example 'cpu' or 'cuda')")
        entry = {"name": name, "value": value, "unit": unit}
        if device is not None:
            entry["device"] = torch.device(device).type
        self.results = [r for r in self.results if r["name"] != name]
        self.results.append(entry)
        return RecordedCount(int(value)) if whole else Recorded(value)

    def verdict(self, verdict) -> None:
        """Store a ``course_lib.measure.judging.Verdict`` (one per claim; a later one replaces it).
        Returns nothing: a lesson shows it with ``ui.verdicts.show_verdict(v)``."""
        self.verdicts = [v for v in self.verdicts if v["claim"] != verdict.claim]
        self.verdicts.append(verdict.as_dict())

    def demonstration(self, shown) -> None:
        """Store a ``course_lib.measure.judging.Shown``: a fact shown exactly, kept apart from the
        verdicts (one per demonstration; a later one replaces it)."""
        self.demonstrations = [d for d in self.demonstrations
                               if d["demonstration"] != shown.demonstration]
        self.demonstrations.append(shown.as_dict())

    def skip(self, section: str, *, needs: str, reason: str, claim: str | None = None) -> None:
        """Note that ``section`` did not run here because it ``needs`` other hardware; with
        ``claim`` (a ``course_lib.measure.claims`` id), that claim is *not judged here* (a GPU claim
        is not refuted by a CPU), and the report says so instead of "not run"."""
        if not _NAME.match(section):
            raise ValueError(f"section must be snake_case ([a-z][a-z0-9_]*), got {section!r}")
        if needs not in NEEDS:
            raise ValueError(f"needs must be one of {list(NEEDS)}, got {needs!r}")
        entry = {"section": section, "needs": needs, "reason": reason}
        if claim is not None:
            from course_lib.measure.claims import CLAIMS
            if claim not in CLAIMS:
                raise ValueError(f"claim must be one of {sorted(CLAIMS)}, got {claim!r}")
            entry["claim"] = claim
        self.skipped = [s for s in self.skipped if s["section"] != section]
        self.skipped.append(entry)

    def get(self, name: str) -> float:
        for r in self.results:
            if r["name"] == name:
                return r["value"]
        raise KeyError(name)

    def payload(self) -> dict:
        return {"notebook": self.notebook, "smoke": self.smoke,
                "hardware": capabilities().as_dict(), "results": list(self.results),
                "skipped": list(self.skipped), "verdicts": list(self.verdicts),
                "demonstrations": list(self.demonstrations)}

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
