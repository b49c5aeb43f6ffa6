"""The package layout is the course's table of contents: the core depends on nothing else, the
measurement and UI packages on the core, and each technique only on those three (the capstone
and the command-line tools stack techniques, so they may import any of them)."""
import ast
from pathlib import Path

import course_lib

ROOT = Path(course_lib.__file__).parent
ALLOWED = {"core": {"core"}, "measure": {"core", "measure"}, "ui": {"core", "measure", "ui"}}
FOUNDATION = {"core", "measure", "ui"}
STACKERS = {"capstone", "tools"}


def _course_imports(path: Path, root: Path) -> set[str]:
    """The top-level course_lib packages a module imports (at any depth of its code)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import; the course writes them in full")
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "course_lib" and len(parts) > 1 and (root / parts[1]).is_dir():
                found.add(parts[1])
    return found


def wrong_way_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        if path.parent == root:
            continue
        pkg = path.relative_to(root).parts[0]
        if pkg in STACKERS:
            continue
        allowed = ALLOWED.get(pkg, FOUNDATION | {pkg})
        for dep in sorted(_course_imports(path, root) - allowed):
            bad.append(f"{path.relative_to(root)} imports course_lib.{dep}")
    return bad


def test_imports_run_from_techniques_down_to_the_core():
    assert wrong_way_imports() == []


def test_the_check_catches_a_wrong_way_import(tmp_path):
    for pkg, text in {"core": "from course_lib.quant.int8 import calibrate\n",
                      "quant": "from course_lib.pruning import masks\n",
                      "pruning": "import course_lib.core.model\n"}.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "mod.py").write_text(text)
    assert wrong_way_imports(tmp_path) == ["core/mod.py imports course_lib.quant",
                                           "quant/mod.py imports course_lib.pruning"]


def test_the_top_level_is_a_short_table_of_contents():
    """One package per technique (a lesson's topic) plus the core, measurement, UI, capstone and
    tools: the limit grows with the lessons (18 leaves room for the generation lesson's)."""
    # _data: the link to ../data that ships the evidence and reference runs (no code)
    entries = sorted(p.name for p in ROOT.iterdir() if p.name not in ("__pycache__", "_data"))
    assert len(entries) <= 18, entries
    loose = [p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"]
    assert loose == [], f"modules outside a package: {loose}"


def _calls(path: Path) -> set[str]:
    """``backward`` and optimizer/scaler ``step`` calls in a module's code (not its prose)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value).lower()
            if node.func.attr == "backward":
                found.add("backward")
            elif node.func.attr == "step" and ("opt" in owner or "scaler" in owner):
                found.add("step")
    return found


def test_one_module_runs_backward_and_the_optimizer_step():
    """The course's one training step (core.train.train_step) is the only code that calls
    ``backward()`` or steps an optimizer; measurements take gradients with torch.autograd.grad."""
    where = {kind: sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                          if kind in _calls(p)) for kind in ("backward", "step")}
    assert where == {"backward": ["core/train.py"], "step": ["core/train.py"]}
