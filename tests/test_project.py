"""Project-level checks: environment.yml agrees with pyproject, Colab cells, checkpoints."""
import json
import re
import tomllib
from pathlib import Path

import pytest
import torch
import yaml

from course_lib.core import checkpoints
from course_lib.tools import colab

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_lists_every_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = {_name(r) for r in project["dependencies"] + extras["dev"] + extras["real"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    have = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    have |= {_name(d) for d in env["dependencies"] if isinstance(d, dict) for d in d.get("pip", [])}
    have |= {"torch"} if "pytorch" in have else set()
    assert not wanted - have, f"missing from environment.yml: {sorted(wanted - have)}"


def test_colab_cells_are_generated_from_one_url(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Title"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "05_x.ipynb"
    path.write_text(json.dumps(nb))
    assert not colab.sync(path, write=False)
    assert not colab.sync(path, write=True)
    assert colab.sync(path, write=False)
    cells = json.loads(path.read_text())["cells"]
    assert colab.REPO_URL.split("github.com/")[1] in cells[0]["source"]
    assert "05_x.ipynb" in cells[0]["source"] and colab.REPO_URL in cells[1]["source"]


def test_every_notebook_has_current_colab_cells():
    for p in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        assert colab.sync(p, write=False), f"{p.name}: run python -m course_lib.tools.colab --write"


def test_stored_baseline_loads_and_verifies():
    info = checkpoints.verify()
    assert info is not None, "course_lib/core/weights/baseline.* missing or checksum mismatch"
    model, meta = checkpoints.load_baseline(train_if_missing=False)
    assert meta["source"] == "checkpoint"
    assert sum(p.numel() for p in model.parameters()) == info["parameters"]


def test_stored_student_belongs_to_the_stored_baseline():
    info = checkpoints.verify("student")
    assert info is not None, "course_lib/core/weights/student.* missing or checksum mismatch"
    assert info["teacher_sha256"] == checkpoints.verify()["sha256"]
    teacher, _ = checkpoints.load_baseline(train_if_missing=False)
    from course_lib.distill.stored import stored_student
    student, meta = stored_student(teacher)
    assert meta["source"] == "checkpoint" and student.cfg.n_layers == teacher.cfg.n_layers // 2
    assert sum(p.numel() for p in student.parameters()) == info["parameters"]


def test_corrupted_checkpoint_is_detected(tmp_path):
    src = checkpoints.DEFAULT_DIR
    for suffix in (".pt", ".json"):
        (tmp_path / f"baseline{suffix}").write_bytes((src / f"baseline{suffix}").read_bytes())
    assert checkpoints.verify(directory=tmp_path) is not None
    state = torch.load(tmp_path / "baseline.pt", weights_only=True)
    next(iter(state.values())).add_(1.0)
    torch.save(state, tmp_path / "baseline.pt")
    assert checkpoints.verify(directory=tmp_path) is None
    with pytest.raises(FileNotFoundError):
        checkpoints.load_baseline(directory=tmp_path, train_if_missing=False)


def test_colab_repo_rewrites_one_place_and_every_notebook(tmp_path):
    import importlib.util
    import shutil
    (tmp_path / "course_lib" / "tools").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "course_lib" / "tools" / "colab.py",
                tmp_path / "course_lib" / "tools" / "colab.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name in ("00_welcome.ipynb", "07_quantization.ipynb"):
        shutil.copy(ROOT / "notebooks" / name, tmp_path / "notebooks" / name)
    colab.main(["--repo", "alice/course-fork", "--branch", "spring", "--root", str(tmp_path)])
    spec = importlib.util.spec_from_file_location("forked_colab",
                                                  tmp_path / "course_lib" / "tools" / "colab.py")
    forked = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(forked)
    assert forked.REPO_URL == "https://github.com/alice/course-fork" and forked.BRANCH == "spring"
    assert colab.pyproject_url(tmp_path) == forked.REPO_URL
    forked.main(["--check", "--root", str(tmp_path)])            # everything agrees with the fork
    cells = json.loads((tmp_path / "notebooks" / "07_quantization.ipynb").read_text())["cells"]
    assert ("colab.research.google.com/github/alice/course-fork/blob/spring/notebooks/"
            "07_quantization.ipynb" in "".join(cells[0]["source"]))
    assert "git+https://github.com/alice/course-fork@spring" in "".join(cells[1]["source"])
    with pytest.raises(SystemExit, match="out of date"):          # the original URL no longer
                                                                  # matches
        colab.main(["--check", "--root", str(tmp_path)])
    with pytest.raises(ValueError, match="OWNER/NAME"):
        colab.set_repository("not a repo", root=tmp_path)
    with pytest.raises(ValueError, match="branch"):
        colab.set_repository("alice/x", branch="a..b", root=tmp_path)


def test_pyproject_names_the_same_repository_as_colab():
    assert colab.pyproject_url() == colab.REPO_URL
