"""Which code cells of a lesson are prose: their job is a paragraph built from measured values
(``display(Markdown(f"..."))``). A learner reads the paragraph, not the code that assembles it,
so such a cell is marked to hide its source: ``jupyter.source_hidden`` in JupyterLab (one click
shows it) and the ``hide-input`` tag on the website.

    python -m course_lib.tools.prose_cells --write   # split and mark every lesson
    python -m course_lib.tools.prose_cells --check   # exit 1 when a lesson needs it

``--write`` also splits a cell that computes something and then ends in such a paragraph into
the computing cell (shown) and the paragraph cell (hidden). ``tests/test_notebooks.py`` checks
that every lesson is marked.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HIDE_TAG = "hide-input"
SHARE = 0.5          # a cell is prose when at least this share of its lines is a paragraph
KEEP_TAGS = {"parameters", "colab-setup", "colab-badge", "solution"}
KEEP_CALLS = ("explore(", "check(", "interact")   # widgets and exercises stay visible


def _paragraph_lines(tree: ast.AST) -> set[int]:
    """Line numbers of the arguments of every ``Markdown(...)`` call."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Markdown":
            for arg in node.args:
                lines.update(range(arg.lineno, arg.end_lineno + 1))
    return lines


def prose_share(source: str) -> float:
    """The share of a code cell's non-blank lines that build a paragraph (0 when unparsable)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0.0
    total = sum(1 for line in source.splitlines() if line.strip())
    return len(_paragraph_lines(tree)) / total if total else 0.0


def _eligible(cell: dict) -> bool:
    source = "".join(cell.get("source", ""))
    tags = set(cell.get("metadata", {}).get("tags", []))
    return cell.get("cell_type") == "code" and not tags & KEEP_TAGS \
        and not any(k in source for k in KEEP_CALLS)


def is_prose(cell: dict) -> bool:
    return _eligible(cell) and prose_share("".join(cell["source"])) >= SHARE


def is_marked(cell: dict) -> bool:
    md = cell.get("metadata", {})
    return HIDE_TAG in md.get("tags", []) and md.get("jupyter", {}).get("source_hidden") is True


def _is_display_markdown(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and getattr(stmt.value.func, "id", None) == "display" \
        and any(isinstance(a, ast.Call) and getattr(a.func, "id", None) == "Markdown"
                for a in stmt.value.args)


def _prints_nothing(expr: ast.expr) -> bool:
    """Calls that show nothing when they end a cell: ``display``, ``print`` and the recorder's
    ``record`` / ``verdict`` / ``skip`` / ``save``."""
    if not isinstance(expr, ast.Call):
        return False
    f = expr.func
    return getattr(f, "id", None) in ("display", "print") or (
        isinstance(f, ast.Attribute) and f.attr in ("record", "verdict", "skip", "save"))


def split_point(source: str) -> int | None:
    """The line (0-based) where a cell's closing paragraphs start, when the cell computes
    something first and its trailing ``display(Markdown(...))`` statements span 3+ lines."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    k = len(body)
    while k > 0 and _is_display_markdown(body[k - 1]):
        k -= 1
    if k == 0 or k == len(body):
        return None
    last = body[k - 1]   # a bare expression left last would print its value: keep it covered
    if isinstance(last, ast.Expr) and not _prints_nothing(last.value):
        return None
    first = body[k].lineno - 1
    if body[-1].end_lineno - first < 3:
        return None
    return first


def _mark(cell: dict) -> None:
    md = cell.setdefault("metadata", {})
    tags = md.setdefault("tags", [])
    if HIDE_TAG not in tags:
        tags.append(HIDE_TAG)
    md.setdefault("jupyter", {})["source_hidden"] = True


def tidy_notebook(nb: dict) -> int:
    """Split and mark ``nb``'s prose cells in place; returns how many cells changed."""
    out, changed = [], 0
    for cell in nb["cells"]:
        source = "".join(cell.get("source", ""))
        at = split_point(source) if _eligible(cell) and not is_marked(cell) else None
        if at is not None:
            lines = source.splitlines(keepends=True)
            head, tail = "".join(lines[:at]).rstrip() + "\n", "".join(lines[at:])
            cell["source"] = head.rstrip("\n").splitlines(keepends=True)
            prose = {"cell_type": "code", "execution_count": None, "id": f"{cell['id']}-prose",
                     "metadata": {}, "outputs": [],
                     "source": tail.rstrip("\n").splitlines(keepends=True)}
            out += [cell, prose]
            changed += 1
        else:
            out.append(cell)
    for cell in out:
        if is_prose(cell) and not is_marked(cell):
            _mark(cell)
            changed += 1
    if changed:   # nbstripout's numbering, so that a stripped lesson stays as written
        for i, cell in enumerate(out):
            cell["id"] = str(i)
    nb["cells"] = out
    return changed


def unmarked(nb: dict) -> list[int]:
    """Indices of prose cells that are not marked."""
    return [i for i, c in enumerate(nb["cells"]) if is_prose(c) and not is_marked(c)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="split and mark the lessons in place")
    ap.add_argument("--check", action="store_true", help="exit 1 when a lesson has unmarked prose")
    ap.add_argument("notebooks", nargs="*", type=Path,
                    default=sorted(Path("notebooks").glob("[0-9]*.ipynb")))
    args = ap.parse_args(argv)
    bad = 0
    for path in args.notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.write:
            n = tidy_notebook(nb)
            if n:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                                encoding="utf-8")
                print(f"{path}: {n} cells split or marked")
        elif unmarked(nb):
            bad += 1
            print(f"{path}: unmarked prose cells {unmarked(nb)}")
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
