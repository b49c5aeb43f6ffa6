"""The one place that holds the repository URL, and the Colab set-up of every lesson.

Each notebook starts with an "Open in Colab" badge and a set-up cell that installs
``course_lib`` from the repository on Colab (keeping Colab's own torch) and does nothing
elsewhere. ``python -m course_lib.colab --write`` regenerates both cells in every notebook
from ``REPO_URL``; ``--check`` (run by the tests) fails when a notebook is out of date.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO_URL = "https://github.com/efficient-transformers-hands-on/course"
BRANCH = "main"
BADGE_TAG, SETUP_TAG = "colab-badge", "colab-setup"


def badge_markdown(notebook_name: str) -> str:
    colab = REPO_URL.replace("https://github.com/", "https://colab.research.google.com/github/")
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab}/blob/{BRANCH}/notebooks/{notebook_name})")


def setup_source() -> str:
    return (
        "# Set-up: on Colab, install the course library (Colab's own torch is kept);\n"
        "# on your machine (after `make lab`) this does nothing.\n"
        "import importlib.util, subprocess, sys\n"
        "if 'google.colab' in sys.modules and importlib.util.find_spec('course_lib') is None:\n"
        f"    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q',\n"
        f"                    'course_lib @ git+{REPO_URL}@{BRANCH}'], check=True)\n")


def _cells(nb_path: Path) -> tuple[dict, dict]:
    badge = {"cell_type": "markdown", "id": BADGE_TAG, "metadata": {"tags": [BADGE_TAG]},
             "source": badge_markdown(nb_path.name)}
    setup = {"cell_type": "code", "id": SETUP_TAG, "metadata": {"tags": [SETUP_TAG]},
             "source": setup_source(),
             "outputs": [], "execution_count": None}
    return badge, setup


def sync(nb_path: Path, *, write: bool) -> bool:
    """True if the notebook's badge and set-up cells are current (after writing, if asked)."""
    nb = json.loads(nb_path.read_text())
    badge, setup = _cells(nb_path)
    cells = nb["cells"]

    def find(tag):
        return next((i for i, c in enumerate(cells) if tag in c.get("metadata", {}).get("tags", [])), None)

    ok = True
    for pos, (tag, cell) in enumerate(((BADGE_TAG, badge), (SETUP_TAG, setup))):
        i = find(tag)
        if i is not None and "".join(cells[i]["source"]) == cell["source"]:
            continue
        ok = False
        if write:
            if i is not None:
                cells[i]["source"] = cell["source"]
            else:
                cells.insert(pos, cell)
    if write and not ok:
        nb_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return ok


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Keep every lesson's Colab cells in sync")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--notebooks", type=Path,
                    default=Path(__file__).resolve().parent.parent / "notebooks")
    args = ap.parse_args(argv)
    stale = [p.name for p in sorted(args.notebooks.glob("[0-9]*.ipynb"))
             if not sync(p, write=args.write)]
    if stale and not args.write:
        raise SystemExit(f"Colab cells out of date in: {', '.join(stale)} "
                         f"(run python -m course_lib.colab --write)")
    print("updated: " + ", ".join(stale) if stale else "all notebooks up to date")


if __name__ == "__main__":
    main()
