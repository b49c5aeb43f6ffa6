"""How long a lesson takes to read, and how much of it is the core path.

    python -m course_lib.tools.reading_time                  # every lesson, from notebooks/
    python -m course_lib.tools.reading_time build/notebooks  # executed: printed prose counts too
    python -m course_lib.tools.reading_time --markdown       # the same as a Markdown table

A lesson's *core path* is every cell before its "Evidence and fine print" heading (the whole
lesson where it has none); the course asks that it reads in at most 30 minutes. The estimate,
stated so that it can be argued with:

* prose at 200 words a minute: the markdown cells, and in an executed notebook the Markdown and
  plain text the code cells print (a sentence printed from a variable is read like one written);
  code shown in fences or backticks counts as words too;
* code at 20 lines a minute (3 seconds a line: most cells are short calls into the library):
  every non-blank line of a code cell, comments included (a cell a learner only runs is still
  read once);
* figures at 30 seconds each (an executed notebook's images; a widget's figure lives in the
  widget's state, not in the cell's outputs, and is not counted).

Hidden prose cells (``jupyter.source_hidden``, the cells that print a paragraph) count only
through their printed words: their source is not shown.
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 20
SECONDS_PER_FIGURE = 30
FINE_PRINT = re.compile(r"^#{1,3}\s.*evidence and fine print", re.I | re.M)
CORE_BUDGET_MINUTES = 30

__all__ = ["Reading", "reading", "lesson_paths", "main"]


@dataclass(frozen=True)
class Reading:
    lesson: str
    words: int            # prose words, markdown and printed, in the core path
    code_lines: int       # code lines shown in the core path
    figures: int          # figures in the core path (executed notebooks only)
    total_minutes: float  # the whole lesson, fine print included
    has_fine_print: bool  # whether the lesson has an "Evidence and fine print" section

    @property
    def minutes(self) -> float:
        """The core path's reading time."""
        return (self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE
                + self.figures * SECONDS_PER_FIGURE / 60)


def _words(text: str) -> int:
    return len(re.findall(r"[\w'’.,%×±-]+", text))


def _cell_counts(cell: dict) -> tuple[int, int, int]:
    """(prose words, code lines, figures) of one cell."""
    source = "".join(cell.get("source", []))
    if cell["cell_type"] == "markdown":
        return _words(source), 0, 0
    if cell["cell_type"] != "code":
        return 0, 0, 0
    hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False)
    lines = 0 if hidden else sum(1 for line in source.splitlines() if line.strip())
    words = figures = 0
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data or "image/svg+xml" in data:
            figures += 1
        if "text/markdown" in data:
            words += _words("".join(data["text/markdown"]))
        elif out.get("output_type") == "stream" and out.get("name") == "stdout":
            words += _words("".join(out.get("text", [])))
        elif "text/plain" in data and "image/png" not in data and \
                "application/vnd.jupyter.widget-view+json" not in data:
            words += _words("".join(data["text/plain"]))
    return words, lines, figures


def reading(path: Path) -> Reading:
    """The reading time of one lesson notebook (executed or not)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    core = [0, 0, 0]
    total = [0, 0, 0]
    in_core, fine_print = True, False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and FINE_PRINT.search("".join(cell["source"])):
            in_core, fine_print = False, True
        counts = _cell_counts(cell)
        for i, c in enumerate(counts):
            total[i] += c
            if in_core:
                core[i] += c
    minutes = (total[0] / WORDS_PER_MINUTE + total[1] / CODE_LINES_PER_MINUTE
               + total[2] * SECONDS_PER_FIGURE / 60)
    return Reading(Path(path).stem, core[0], core[1], core[2], minutes, fine_print)


def lesson_paths(folder: Path) -> list[Path]:
    """The lessons (``NN_name.ipynb``) in ``folder``."""
    paths = sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no lesson notebooks (NN_name.ipynb) in {folder}")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", type=Path, default=Path("notebooks"),
                    help="lessons to read: notebooks/ (sources) or an executed copy (build/...)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args(argv)
    rows = [reading(p) for p in lesson_paths(args.folder)]
    if args.markdown:
        print("| lesson | core path (min) | whole lesson (min) | fine print apart |")
        print("|---|---|---|---|")
        for r in rows:
            print(f"| {r.lesson} | {r.minutes:.0f} | {r.total_minutes:.0f} | "
                  f"{'yes' if r.has_fine_print else 'no'} |")
        return
    for r in rows:
        flag = "" if r.minutes <= CORE_BUDGET_MINUTES else f"  (over {CORE_BUDGET_MINUTES})"
        print(f"{r.lesson}: core path {r.minutes:.0f} min ({r.words:,} words, {r.code_lines} "
              f"code lines, {r.figures} figures), whole lesson {r.total_minutes:.0f} min{flag}")


if __name__ == "__main__":
    main()
