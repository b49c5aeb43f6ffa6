"""The one place that holds the repository URL, and the Colab set-up of every lesson.

Each notebook starts with an "Open in Colab" badge and a set-up cell that installs
``course_lib`` from the repository on Colab (keeping Colab's own torch) and does nothing
elsewhere. ``python -m course_lib.tools.colab --write`` regenerates both cells in every notebook
from ``REPO_URL``; ``--check`` (run by the tests) fails when a notebook, or the Repository URL
in ``pyproject.toml``, is out of date. An instructor who publishes a fork runs
``python -m course_lib.tools.colab --repo OWNER/NAME [--branch B]``: it rewrites ``REPO_URL`` and
``BRANCH`` below, the URL in ``pyproject.toml``, and every notebook's badge and set-up cell.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

REPO_URL = "https://github.com/efficient-transformers-hands-on/course"
BRANCH = "main"
BADGE_TAG, SETUP_TAG = "colab-badge", "colab-setup"
ROOT = Path(__file__).resolve().parents[2]
_REPO = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_BRANCH = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")


def badge_markdown(notebook_name: str, *, repo_url: str = REPO_URL, branch: str = BRANCH) -> str:
    colab = repo_url.replace("https://github.com/", "https://colab.research.google.com/github/")
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab}/blob/{branch}/notebooks/{notebook_name})")


def setup_source(*, repo_url: str = REPO_URL, branch: str = BRANCH) -> str:
    return (
        "# Set-up: on Colab, install the course library (Colab's own torch is kept);\n"
        "# on your machine (after `make lab`) this does nothing.\n"
        "import importlib.util, subprocess, sys\n"
        "if 'google.colab' in sys.modules and importlib.util.find_spec('course_lib') is None:\n"
        f"    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q',\n"
        f"                    'course_lib @ git+{repo_url}@{branch}'], check=True)\n")


def _cells(nb_path: Path, repo_url: str, branch: str) -> tuple[dict, dict]:
    badge = {"cell_type": "markdown", "id": BADGE_TAG, "metadata": {"tags": [BADGE_TAG]},
             "source": badge_markdown(nb_path.name, repo_url=repo_url, branch=branch)}
    setup = {"cell_type": "code", "id": SETUP_TAG, "metadata": {"tags": [SETUP_TAG]},
             "source": setup_source(repo_url=repo_url, branch=branch),
             "outputs": [], "execution_count": None}
    return badge, setup


def sync(nb_path: Path, *, write: bool, repo_url: str = REPO_URL, branch: str = BRANCH) -> bool:
    """True if the notebook's badge and set-up cells are current (after writing, if asked)."""
    nb = json.loads(nb_path.read_text())
    badge, setup = _cells(nb_path, repo_url, branch)
    cells = nb["cells"]

    def find(tag):
        return next((i for i, c in enumerate(cells)
                     if tag in c.get("metadata", {}).get("tags", [])), None)

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


def pyproject_url(root: Path = ROOT) -> str | None:
    """The ``Repository`` URL in ``pyproject.toml`` (None if it has none)."""
    m = re.search(r'^Repository\s*=\s*"([^"]*)"', (root / "pyproject.toml").read_text(), re.M)
    return m.group(1) if m else None


def set_repository(owner_name: str, *, branch: str = "main", root: Path = ROOT) -> str:
    """Point the course at ``https://github.com/OWNER/NAME`` on ``branch``: rewrites ``REPO_URL``
    and ``BRANCH`` in this file and the URL in ``pyproject.toml``. Returns the new URL; the
    caller then syncs the notebooks with it (``main`` does)."""
    if not _REPO.match(owner_name):
        raise ValueError(f"--repo must look like OWNER/NAME (GitHub names), got {owner_name!r}")
    if not _BRANCH.match(branch) or ".." in branch:
        raise ValueError(f"--branch must be a git branch name, got {branch!r}")
    url = f"https://github.com/{owner_name}"
    source = root / "course_lib" / "tools" / "colab.py"
    text = source.read_text()
    text = re.sub(r'^REPO_URL = ".*"$', f'REPO_URL = "{url}"', text, count=1, flags=re.M)
    text = re.sub(r'^BRANCH = ".*"$', f'BRANCH = "{branch}"', text, count=1, flags=re.M)
    source.write_text(text)
    project = root / "pyproject.toml"
    project.write_text(re.sub(r'^Repository\s*=\s*".*"$', f'Repository = "{url}"',
                              project.read_text(), count=1, flags=re.M))
    return url


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Keep every lesson's Colab cells in sync")
    ap.add_argument("--write", action="store_true", help="regenerate stale badge and set-up cells")
    ap.add_argument("--check", action="store_true", help="fail if anything is out of date")
    ap.add_argument("--repo", metavar="OWNER/NAME", help="point the course at this GitHub fork")
    ap.add_argument("--branch", default=None, help="with --repo: the branch Colab installs from")
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    repo_url, branch = REPO_URL, BRANCH
    if args.repo:
        branch = args.branch or "main"
        repo_url = set_repository(args.repo, branch=branch, root=args.root)
        print(f"repository set to {repo_url} (branch {branch}) in course_lib/tools/colab.py "
              "and pyproject.toml")
    elif args.branch:
        raise SystemExit("--branch goes with --repo")
    write = args.write or bool(args.repo)
    stale = [p.name for p in sorted((args.root / "notebooks").glob("[0-9]*.ipynb"))
             if not sync(p, write=write, repo_url=repo_url, branch=branch)]
    if stale and not write:
        raise SystemExit(f"Colab cells out of date in: {', '.join(stale)} "
                         f"(run python -m course_lib.tools.colab --write)")
    url = pyproject_url(args.root)
    if url != repo_url:
        raise SystemExit(f"pyproject.toml's Repository is {url!r}, "
                         "course_lib/tools/colab.py's REPO_URL "
                         f"{repo_url!r}: run python -m course_lib.tools.colab --repo OWNER/NAME")
    print("updated: " + ", ".join(stale) if stale else "all notebooks up to date")


if __name__ == "__main__":
    main()
