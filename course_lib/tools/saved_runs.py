"""Reference runs: a complete ``make report`` result set kept as data, beside the learner's own.

``python -m course_lib.tools.report --save-run`` writes ``data/runs/<machine>.json``: the hardware
record, every lesson's results and verdicts, and how long each lesson ran. Committed runs (this
course's CPU run, GPU runs as they come) are what a learner's numbers are compared with: the
report's tables, the lessons' closing tables and the site put each reference value beside the
learner's, labelled with the device it was measured on.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from course_lib.measure.results import load_results

ROOT = Path(__file__).resolve().parents[2]


def data_dir(name: str) -> Path:
    """``data/<name>`` of the repository (a clone, an editable install), or, in an installed
    wheel (Colab's set-up installs one), the copy that ships as package data: ``course_lib/_data``
    is a link to ``../data``, so the wheel carries the committed evidence and reference runs."""
    here = ROOT / "data" / name
    return here if here.is_dir() else Path(__file__).resolve().parents[1] / "_data" / name


RUNS_DIR = data_dir("runs")

__all__ = ["RUNS_DIR", "data_dir", "run_name", "save_run", "load_runs", "reference_values", "label"]


def run_name(hardware: dict) -> str:
    """A file name for a machine: the GPU's name, or the CPU's with its thread count."""
    name = hardware.get("device_name") or hardware.get("device") or "unknown"
    if hardware.get("device") != "cuda":
        name = f"cpu {name} {hardware.get('threads', '?')} threads"
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def label(run: dict) -> str:
    """How a reference run is named in a table: its device and hardware, and its torch."""
    hw = run["hardware"]
    kind = "GPU" if hw.get("device") == "cuda" else f"CPU, {hw.get('threads', '?')} threads"
    return f"{hw.get('device_name', '?')} ({kind}, torch {hw.get('torch_version', '?')})"


def _machine(hardware: dict) -> dict:
    """What identifies a machine in a hardware record: everything but the torch thread count,
    which a lesson may set for itself."""
    return {k: v for k, v in hardware.items() if k != "threads"}


def save_run(results_dir: Path, *, seconds: dict[str, float] | None = None,
             directory: Path = RUNS_DIR) -> Path:
    """Store the results in ``results_dir`` as one reference run named after the machine;
    ``seconds`` of lessons not run this time are kept from the stored run of that machine.
    Refuses an empty folder, results of lessons that no longer exist (a renumbering left them
    behind), smoke-mode results (their numbers mean little) and results from more than one
    machine."""
    results = load_results(results_dir)
    if not results:
        raise ValueError(f"no results in {results_dir}: run the lessons first")
    lessons = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    stale = sorted(set(results) - lessons) if lessons else []
    if stale:   # a lesson renamed or removed since these results were written
        raise ValueError(f"results of lessons that no longer exist in {results_dir}: "
                         f"{', '.join(stale)}; remove their .json files and save again")
    smoke = sorted(stem for stem, r in results.items() if r.get("smoke"))
    if smoke:
        raise ValueError(f"smoke-mode results cannot be a reference run: {', '.join(smoke)}")
    machines = {json.dumps(_machine(r["hardware"]), sort_keys=True) for r in results.values()}
    if len(machines) != 1:
        names = sorted({run_name(r["hardware"]) for r in results.values()})
        raise ValueError(f"results from several machines in {results_dir}: {names}")
    # A lesson may time on fewer torch threads than the machine has (09 uses one); it is the
    # same machine, its own count stays in its hardware record, and the run takes the largest.
    hardware = max((r["hardware"] for r in results.values()), key=lambda h: h.get("threads") or 0)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{run_name(hardware)}.json"
    # A run of some lessons (report --only) keeps the stored seconds of the others it still holds.
    kept = json.loads(path.read_text()).get("seconds", {}) if path.exists() else {}
    timed = {**kept, **{k: round(v, 1) for k, v in (seconds or {}).items()}}
    payload = {"hardware": hardware, "lessons": results,
               "seconds": {k: v for k, v in sorted(timed.items()) if k in results}}
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    return path


def load_runs(directory: Path = RUNS_DIR) -> dict[str, dict]:
    """``{label: run}`` of every stored reference run, in file-name order."""
    if not directory.is_dir():
        return {}
    runs = {}
    for p in sorted(directory.glob("*.json")):
        run = json.loads(p.read_text())
        if not {"hardware", "lessons"} <= set(run):
            raise ValueError(f"{p} is not a reference run (needs 'hardware' and 'lessons')")
        runs[label(run)] = run
    return runs


def reference_values(runs: dict[str, dict], stem: str) -> dict[str, dict[str, dict]]:
    """``{run label: {result name: result}}`` for one lesson, over every reference run."""
    return {name: {r["name"]: r for r in run["lessons"].get(stem, {}).get("results", [])}
            for name, run in runs.items()}
