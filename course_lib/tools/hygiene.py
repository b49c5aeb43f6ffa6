"""What a learner should never see in an executed lesson, found in its saved outputs.

- A stray output: a cell whose last expression printed a bare number or the repr of an object
  (``Verdict(claim=...)``, a whole ``nn.Module``) instead of a sentence, a table or a figure.
  Outputs a lesson means to show come through ``display`` (Markdown, figures) or ``print``.
- A placeholder left unformatted: ``{name}`` or ``{value:.2f}`` in a sentence or table means
  an f-string lost its ``f`` (code shown in a fenced block or in backticks is not checked).
- An unreadable figure: ``course_lib.ui.plots.layout_problems`` measures every figure the
  lessons draw (text cut by the edge, tick labels or texts over each other, a legend over the
  data) and the PNG formatter stores what it found in the image's metadata, where this looks.

The notebook tests fail on either (``tests/nbutil.run_smoke``) and ``make report`` lists them.
"""
from __future__ import annotations

import re
from pathlib import Path

from course_lib.ui.plots import LAYOUT_KEY

# ``{name}``, ``{obj.attr}``, ``{d['k']}``, ``{x:.1f}`` not preceded by a backslash, ^, _ or $
# (LaTeX), after fenced code blocks and inline code are taken out
_PLACEHOLDER = re.compile(r"(?<![\\^_$}\w])\{[A-Za-z_]\w*(?:\[[^\]{}]*\])?(?:\.[A-Za-z_]\w*)*"
                          r"(?:[:!][^{}\s]*)?\}")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def placeholders(text: str) -> list[str]:
    """Unformatted f-string placeholders in ``text`` (see the module's docstring)."""
    return _PLACEHOLDER.findall(_CODE.sub("", text))

RICH = ("text/html", "text/markdown", "image/png", "image/svg+xml", "text/latex",
        "application/vnd.jupyter.widget-view+json")


def _outputs(nb: dict):
    """(where, output) for every cell output and every output kept in a widget's state."""
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            for out in cell.get("outputs", []):
                yield f"cell {i}", out
    state = (nb.get("metadata", {}).get("widgets", {})
             .get("application/vnd.jupyter.widget-state+json", {}).get("state", {}))
    for mid, model in state.items():
        if model.get("model_name") == "OutputModel":
            for out in model.get("state", {}).get("outputs", []):
                yield f"widget {mid[:8]}", out


def output_problems(nb: dict) -> list[str]:
    """Every stray output and every figure layout problem of an executed notebook."""
    problems = []
    for where, out in _outputs(nb):
        kind = out.get("output_type")
        data = out.get("data", {})
        if kind == "execute_result" and not any(k in data for k in RICH):
            text = "".join(data.get("text/plain", ""))
            problems.append(f"{where}: stray output {text[:60]!r} (a trailing expression; end the "
                            f"cell with a statement or display it as a sentence)")
        text = "".join(data.get("text/markdown", "")) + ("".join(out.get("text", ""))
                                                           if kind == "stream" else "")
        for ph in placeholders(text):
            problems.append(f"{where}: unformatted placeholder {ph!r} (an f-string without its f?)")
        meta = out.get("metadata", {})   # IPython files it under the image's mime type
        for issue in meta.get("image/png", {}).get(LAYOUT_KEY, []) + meta.get(LAYOUT_KEY, []):
            problems.append(f"{where}: figure: {issue}")
    return problems


# What reads as one timing's median: a ``Timing``'s ``.median``, a median helper's result, a
# row's median milliseconds. A ratio of two of them is a speed-up without pairing or interval.
_MEDIAN = re.compile(r"\.median\b|\bmedian\(|\bms_at\(|\[['\"]ms['\"]\]|\bms\(")


def median_ratios(source: str) -> list[str]:
    """Every division of one median timing by another in ``source`` (Python code): the course's
    one speed-up statistic is the geometric mean of paired ratios (``verdicts.speedup``,
    ``bench.compare``), with its interval; a ratio of medians has neither."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = ast.unparse(node.left), ast.unparse(node.right)
            if _MEDIAN.search(left) and _MEDIAN.search(right):
                found.append(ast.unparse(node))
    return found


def median_ratio_findings(root: Path) -> list[str]:
    """``median_ratios`` over every lesson's code cells and every module of ``course_lib``
    under ``root`` (a checkout): where each one is."""
    import json

    found = []
    for nb in sorted((root / "notebooks").glob("[0-9]*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                found += [f"{nb.stem} cell {i}: {r}"
                          for r in median_ratios("".join(cell["source"]))]
    for py in sorted((root / "course_lib").rglob("*.py")):
        found += [f"{py.relative_to(root)}: {r}"
                  for r in median_ratios(py.read_text(encoding="utf-8"))]
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m course_lib.tools.hygiene [ROOT]``: the speed-ups computed from medians in
    a checkout (exit status 1 if any), the check the unit tests run."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", type=Path, default=Path.cwd())
    found = median_ratio_findings(ap.parse_args(argv).root)
    print("\n".join(found) if found else "no speed-up computed from medians")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
