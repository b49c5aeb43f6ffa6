"""``make report``: run every lesson at learner settings and summarise what they measured.

    python -m course_lib.tools.report --out build [--only 00_welcome] [--smoke]
    python -m course_lib.tools.report --out build --save-run    # keep this machine's run as a
                                                                # reference


Writes ``build/notebooks/<lesson>.ipynb`` and ``.html`` (executed copies; build products,
never committed), ``build/results/<lesson>.json`` and ``build/index.html``: at the top, the
capstone's optimization ladder (lesson 14) with the hardware it was measured on, when its
results exist; then this machine's hardware and every recorded result per lesson. Widgets run
in static mode (``COURSE_STATIC=1``) so the HTML holds every figure.

Also ``build/runs.json``: how long each lesson ran, and whether it failed (the site reads it).
A run's results are kept as data: ``--save-run`` writes ``data/runs/<machine>.json``
(``course_lib.tools.saved_runs``), which is committed. Each lesson's table then shows, beside this
machine's value, the value of the same result in every reference run, labelled with its device.
"""
from __future__ import annotations

import argparse
import html
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from course_lib.measure.claims import CLAIMS, DEMONSTRATIONS
from course_lib.ui.verdicts import recorded_sentence
from course_lib.core.device import report as hardware_rows
from course_lib.capstone.ladder import METRICS
from course_lib.measure.results import load_results
from course_lib.measure.verdicts import Estimate, Ratio
from course_lib.tools.saved_runs import load_runs, reference_values, save_run

ROOT = Path(__file__).resolve().parents[2]
LADDER = "14_capstone"
# How the ladder table shows each metric recorded per rung: header, scale, format.
_COLUMNS = {"test_accuracy": ("accuracy", 100, "{:.1f}%"),
            "train_epoch_s": ("train epoch (s)", 1, "{:,.1f}"),
            "test_set_s": ("test set (s)", 1, "{:,.2f}"),
            "latency_b1_ms": ("batch 1 (ms)", 1, "{:,.2f}"),
            "latency_b32_ms": ("batch 32 (ms)", 1, "{:,.1f}"),
            "size_bytes": ("size (MiB)", 1 / 2**20, "{:,.2f}"),
            "peak_mib": ("peak memory (MiB)", 1, "{:,.1f}")}
_SPEEDUP = ("train_epoch_s", "test_set_s")   # times shown with their speed-up over the first rung


def execute(nb: Path, out_dir: Path, *, smoke: bool, timeout: int) -> tuple[bool, float, str]:
    """Execute one notebook with papermill in a subprocess; returns (ok, seconds, error)."""
    from course_lib.tools.notebook_runner import execute_notebook

    out = out_dir / "notebooks" / nb.name
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:   # a lost kernel reply reruns the lesson once, saying so, instead of hanging
        execute_notebook(nb, out, parameters={"SMOKE": smoke} if smoke else {}, cwd=nb.parent,
                         cell_timeout=timeout, log=lambda s: print("  " + s, flush=True))
        error = ""
    except Exception as exc:  # report and continue with the next lesson
        error = f"{type(exc).__name__}: {str(exc)[-500:]}"
    seconds = time.perf_counter() - t0
    if not error:   # what a learner should never see (course_lib.tools.hygiene)
        from course_lib.tools.hygiene import output_problems
        problems = output_problems(json.loads(out.read_text(encoding="utf-8")))
        if problems:
            error = "output hygiene: " + "; ".join(problems)
            print("  " + error, flush=True)
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(out)],
                   capture_output=True, check=False)
    return not error, seconds, error


def _rows(pairs) -> str:
    return "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>"
                   for k, v in pairs)


def ladder_html(data: dict) -> str:
    """The capstone's ladder (one row per rung, from its ``<rung>_<metric>`` results), its
    headline results, and the hardware it was measured on (the results file's own record)."""
    values = {r["name"]: r["value"] for r in data["results"]}
    metrics = [m for m in METRICS if m in _COLUMNS]
    rungs = [r["name"][:-len("_test_accuracy")] for r in data["results"]
             if r["name"].endswith("_test_accuracy")]
    settings = "smoke settings (numbers not meaningful)" if data["smoke"] else "learner settings"
    parts = ["<h2>The optimization ladder (lesson 14)</h2>",
             f"<p>{settings}; speed-ups against the first rung.</p>",
             "<table class='ladder'><tr><th>rung</th>"
             + "".join(f"<th>{_COLUMNS[m][0]}</th>" for m in metrics) + "</tr>"]
    for rung in rungs:
        cells = []
        for m in metrics:
            v = values.get(f"{rung}_{m}")
            _, scale, fmt = _COLUMNS[m]
            text = "–" if v is None else fmt.format(v * scale)
            first = values.get(f"{rungs[0]}_{m}")
            if m in _SPEEDUP and v and first:
                text += f" ({first / v:.1f}×)"
            cells.append(f"<td>{text}</td>")
        parts.append(f"<tr><td>{html.escape(rung)}</td>{''.join(cells)}</tr>")
    parts.append("</table>")
    headline = [(k, f"{v:.4g}") for k, v in values.items() if k.startswith("best_")]
    if headline:
        parts.append(f"<table>{_rows(headline)}</table>")
    parts.append(f"<h3>Measured on</h3><table>{_rows(data.get('hardware', {}).items())}</table>")
    return "\n".join(parts)


def fmt_value(value: float | None, unit: str = "") -> str:
    """A value as a reader wants it: bytes in MiB, no "-0", small numbers in e-notation,
    thousands separated."""
    if value is None or not math.isfinite(value):
        return "–" if value is None else str(value)
    if unit == "bytes":
        return f"{value / 2**20:,.2f} MiB"
    if unit == "fraction":
        return f"{value:.1%}"
    if value != 0 and abs(value) < 1e-3:
        text = f"{value:.2e}"
    elif abs(value) >= 1e4:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.4g}"
    text = "0" if text in ("-0", "-0.0") else text
    return (f"{text} {unit}" if unit and unit not in ("count", "x")
            else text + ("×" if unit == "x" else ""))


def _value(r: dict) -> str:
    return (fmt_value(r["value"], r.get("unit", ""))
            + (f" ({r['device']})" if r.get("device") else ""))


def _measured(v: dict, c) -> str:
    """``value ± half-width`` of the verdict's 95% interval (Student's t for its dof), or for a
    ratio claim the interval itself, ``value (low–high)`` (``verdicts.Ratio``)."""
    if v.get("value") is None:
        return "–"
    se, dof = v.get("se") or 0.0, v.get("dof") or math.inf
    e = (Ratio if c.rule.log else Estimate)(float(v["value"]), se, dof)
    if se == 0 or not math.isfinite(e.value):
        return fmt_value(e.value)
    if not math.isfinite(se):
        return fmt_value(e.value) + " ± ∞"
    if e.log:
        lo, hi = e.interval
        return f"{fmt_value(e.value)} ({fmt_value(lo)}–{fmt_value(hi)})"
    return f"{fmt_value(e.value)} ± {fmt_value(e.half_width)}"


def claims_html(results: dict[str, dict]) -> str:
    """The "Claims checked" table: every verdict the lessons recorded, in registry order, and
    every registered claim that no lesson judged in this run; then the demonstrations, apart.
    A claim judged over a sweep shows its condition and where it holds, fails or stays
    inconclusive, with the learner's point marked."""
    found = {v["claim"]: (stem, v, data.get("hardware", {}))
             for stem, data in results.items() for v in data.get("verdicts", [])}
    unjudged = {s["claim"]: s for data in results.values() for s in data.get("skipped", [])
                if s.get("claim")}
    rows = []
    for cid, c in CLAIMS.items():
        stem, v, hw = found.get(cid, (c.lesson, None, {}))
        skip = unjudged.get(cid) if v is None else None
        verdict = (v["outcome"] if v else f"not judged here: needs {skip['needs']}" if skip
                   else "not run")
        where = f"{hw.get('device', '?')} ({hw.get('device_name', '?')})" if v else "–"
        evidence = v["evidence"] if v else skip["reason"] if skip else "–"
        rule = f"{c.rule.quantity} {'≥' if c.rule.direction == '>=' else '≤'} {c.rule.threshold:g}"
        condition = c.condition.name if c.condition else "one point"
        regions = recorded_sentence(v) if v else "–"
        source = v.get("source", "live") if v else "–"
        rows.append(f"<tr><td>{html.escape(c.original)}<br><i>{html.escape(c.english)}</i></td>"
                    f"<td>{c.article}</td><td>{html.escape(stem)}</td>"
                    f"<td>{html.escape(rule)}</td><td>{html.escape(condition)}</td>"
                    f"<td>{_measured(v, c) if v else '–'}</td>"
                    f"<td>{html.escape(evidence)}</td><td>{html.escape(source)}</td>"
                    f"<td class='{verdict.replace(' ', '_')}'><b>{verdict}</b></td>"
                    f"<td>{html.escape(regions)}</td>"
                    f"<td>{html.escape(where)}</td></tr>")
    return ("<h2>Claims checked</h2><p>What the two source articles claim, judged by the rule "
            "written beside each claim (<code>course_lib.measure.claims</code>) from numbers "
            "measured in this run (value ± the half-width of its 95% interval; over a sweep, the "
            "value at your point). Over a sweep of its condition the word says where it holds: "
            "<i>holds</i> (at every point measured), <i>holds from / up to / between</i> (the "
            "boundary in the next column), <i>holds in part</i>, <i>holds nowhere</i>, or "
            "<i>unresolved</i> (every point's interval straddles the bar); points that agree "
            "within noise are pooled.</p><table><tr>"
            "<th>claim (original, English)</th><th>article</th><th>lesson</th><th>rule</th>"
            "<th>condition</th><th>value</th><th>evidence</th><th>rests on</th><th>verdict</th>"
            "<th>where it holds, fails or stays inconclusive</th><th>hardware</th></tr>"
            + "".join(rows) + "</table>" + demonstrations_html(results))


def demonstrations_html(results: dict[str, dict]) -> str:
    """The facts the lessons showed exactly: listed apart, not counted as verdicts."""
    found = {d["demonstration"]: (stem, d) for stem, data in results.items()
             for d in data.get("demonstrations", [])}
    rows = []
    for did, d in DEMONSTRATIONS.items():
        stem, shown = found.get(did, (d.lesson, None))
        result = ("shown" if shown["ok"] else "did not come out (a bug)") if shown else "not run"
        rows.append(f"<tr><td>{html.escape(d.original)}<br><i>{html.escape(d.english)}</i></td>"
                    f"<td>{d.article}</td><td>{html.escape(stem)}</td><td>{html.escape(d.check)}</td>"
                    f"<td>{html.escape(shown['numbers']) if shown else '–'}</td>"
                    f"<td><b>{result}</b></td></tr>")
    return ("<h2>Demonstrations</h2><p>Facts the lessons show exactly (a bit layout, an "
            "equivalence): short of a bug they cannot come out otherwise, so they are not "
            "verdicts.</p><table><tr><th>statement (original, English)</th><th>article</th>"
            "<th>lesson</th><th>exact check</th><th>numbers</th><th>result</th></tr>"
            + "".join(rows) + "</table>")


def skipped_html(results: dict[str, dict]) -> str:
    """Every section a lesson skipped on this machine, with what it needs and why."""
    rows = [(stem, s) for stem, data in sorted(results.items()) for s in data.get("skipped", [])]
    if not rows:
        return "<h2>Skipped sections</h2><p>None: every section ran on this machine.</p>"
    return ("<h2>Skipped sections</h2><p>Sections that need other hardware (a CUDA GPU, several "
            "GPUs, torchao, a compiler) and did not run here.</p><table><tr><th>lesson</th>"
            "<th>section</th><th>needs</th><th>why</th></tr>"
            + "".join(f"<tr><td>{html.escape(stem)}</td><td>{html.escape(s['section'])}</td>"
                      f"<td>{html.escape(s['needs'])}</td><td>{html.escape(s['reason'])}</td></tr>"
                      for stem, s in rows) + "</table>")


def summary_html(results: dict[str, dict], runs: dict[str, tuple[bool, float, str]],
                 reference: dict[str, dict] | None = None) -> str:
    parts = ["<html><head><meta charset='utf-8'><title>Course report</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}"
             "td:nth-child(2){text-align:right}table.ladder td{text-align:right}"
             "table.ladder td:first-child{text-align:left}td.holds{color:#2a7d2a}"
             "td[class^=not_judged]{color:#555}"
             "td.fails{color:#b22}td.inconclusive{color:#a60}</style></head><body>",
             "<h1>Efficient Transformers, Hands-On: measured on this machine</h1>",
             claims_html(results)]
    if LADDER in results:
        parts.append(ladder_html(results[LADDER]))
    parts.append(f"<h2>Hardware (this machine)</h2><table>{_rows(hardware_rows())}</table>")
    parts.append(skipped_html(results))
    for name, run in (reference or {}).items():
        parts.append(f"<h2>Reference run: {html.escape(name)}</h2><p>Its results appear beside "
                     f"this machine's in every table below (data/runs/).</p>"
                     f"<table>{_rows(run['hardware'].items())}</table>")
    order = sorted(results, key=lambda k: (k != LADDER, k))
    for stem in order:
        data = results[stem]
        ok, seconds, error = runs.get(stem, (True, float("nan"), ""))
        link = f"notebooks/{stem}.html"
        parts.append(f"<h2><a href='{link}'>{html.escape(stem)}</a></h2><p>"
                     f"{'smoke settings' if data['smoke'] else 'learner settings'}; "
                     f"ran in {seconds:.0f} s{'' if ok else '; FAILED: ' + html.escape(error)}</p>")
        others = reference_values(reference or {}, stem)
        parts.append("<table><tr><th>result</th><th>this machine</th>"
                     + "".join(f"<th>{html.escape(g)}</th>" for g in others)
                     + "</tr>")
        for r in data["results"]:
            cells = "".join(f"<td>{_value(o[r['name']]) if r['name'] in o else '–'}</td>"
                            for o in others.values())
            parts.append(f"<tr><td>{html.escape(r['name'])}</td><td>{_value(r)}</td>{cells}</tr>")
        parts.append("</table>")
    failed = [s for s, (ok, _, _) in runs.items() if not ok and s not in results]
    for stem in failed:
        parts.append(f"<h2>{html.escape(stem)}</h2><p>FAILED: {html.escape(runs[stem][2])}</p>")
    return "\n".join(parts + ["</body></html>"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Execute every lesson and summarise the results")
    ap.add_argument("--out", type=Path, default=ROOT / "build")
    ap.add_argument("--only", nargs="*", help="notebook stems to run (default: all)")
    ap.add_argument("--smoke", action="store_true", help="smoke settings (seconds per lesson)")
    ap.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds")
    ap.add_argument("--save-run", action="store_true",
                    help="after running, store this machine's results as a reference run in "
                         "data/runs/")
    args = ap.parse_args(argv)
    # Absolute: the lessons run with the notebooks folder as their working directory, so a
    # relative results folder would land under notebooks/ instead of where the summary reads.
    args.out = args.out.resolve()
    notebooks = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    if args.only:
        notebooks = [n for n in notebooks if n.stem in args.only]
    results_dir = args.out / "results"
    os.environ["COURSE_RESULTS_DIR"] = str(results_dir)
    os.environ["COURSE_STATIC"] = "1"
    runs = {}
    for nb in notebooks:
        print(f"running {nb.name} ...", flush=True)
        runs[nb.stem] = execute(nb, args.out, smoke=args.smoke, timeout=args.timeout)
        ok, seconds, error = runs[nb.stem]
        print(f"  {'ok' if ok else 'FAILED'} in {seconds:.0f} s {error}", flush=True)
    results = load_results(results_dir) if results_dir.exists() else {}
    index = args.out / "index.html"
    index.write_text(summary_html(results, runs, load_runs()), encoding="utf-8")
    times = args.out / "runs.json"   # merged: a run of --only some lessons keeps the others' times
    merged = json.loads(times.read_text()) if times.exists() else {}
    merged.update({stem: {"ok": ok, "seconds": round(sec, 1), "error": err, "smoke": args.smoke}
                   for stem, (ok, sec, err) in runs.items()})
    times.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
    print(f"wrote {index}")
    if args.save_run:
        print(f"wrote {save_run(results_dir, seconds={k: v[1] for k, v in runs.items()})}")
    return 0 if all(ok for ok, _, _ in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
