"""``make report``: run every lesson at learner settings and summarise what they measured.

    python -m course_lib.report --out build [--only 00_welcome] [--smoke]

Writes ``build/notebooks/<lesson>.ipynb`` and ``.html`` (executed copies; build products,
never committed), ``build/results/<lesson>.json`` and ``build/index.html``: the hardware
report at the top, then every recorded result per lesson (the capstone's ladder first when
it exists). Widgets run in static mode (``COURSE_STATIC=1``) so the HTML holds every figure.
"""
from __future__ import annotations

import argparse
import html
import os
import subprocess
import sys
import time
from pathlib import Path

from .device import report as hardware_rows
from .results import load_results

ROOT = Path(__file__).resolve().parent.parent


def execute(nb: Path, out_dir: Path, *, smoke: bool, timeout: int) -> tuple[bool, float, str]:
    """Execute one notebook with papermill in a subprocess; returns (ok, seconds, error)."""
    import papermill as pm

    out = out_dir / "notebooks" / nb.name
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(str(nb), str(out), parameters={"SMOKE": smoke} if smoke else {},
                            kernel_name="python3", cwd=str(nb.parent), progress_bar=False,
                            execution_timeout=timeout)
        error = ""
    except Exception as exc:  # report and continue with the next lesson
        error = f"{type(exc).__name__}: {str(exc)[-500:]}"
    seconds = time.perf_counter() - t0
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(out)],
                   capture_output=True, check=False)
    return not error, seconds, error


def summary_html(results: dict[str, dict], runs: dict[str, tuple[bool, float, str]]) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in hardware_rows())
    parts = ["<html><head><meta charset='utf-8'><title>Course report</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}"
             "td:nth-child(2){text-align:right}</style></head><body>",
             "<h1>Efficient Transformers, Hands-On: measured on this machine</h1>",
             f"<h2>Hardware</h2><table>{rows}</table>"]
    order = sorted(results, key=lambda k: (not k.startswith("11"), k))
    for stem in order:
        data = results[stem]
        ok, seconds, error = runs.get(stem, (True, float("nan"), ""))
        link = f"notebooks/{stem}.html"
        parts.append(f"<h2><a href='{link}'>{html.escape(stem)}</a></h2><p>"
                     f"{'smoke settings' if data['smoke'] else 'learner settings'}; "
                     f"ran in {seconds:.0f} s{'' if ok else '; FAILED: ' + html.escape(error)}</p>")
        parts.append("<table><tr><th>result</th><th>value</th><th>unit</th></tr>")
        for r in data["results"]:
            parts.append(f"<tr><td>{html.escape(r['name'])}</td><td>{r['value']:.4g}</td>"
                         f"<td>{html.escape(r['unit'])}</td></tr>")
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
    args = ap.parse_args(argv)
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
    index.write_text(summary_html(results, runs), encoding="utf-8")
    print(f"wrote {index}")
    return 0 if all(ok for ok, _, _ in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
