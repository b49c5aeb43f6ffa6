"""What a `pip install` of the course carries (Colab's set-up installs a wheel built from the
repository, not a clone): the checkpoints, and the committed evidence and reference runs that
the lessons read (``course_lib/_data``, a link to ``../data``; ``saved_runs.data_dir``)."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import course_lib
import course_lib.tools.saved_runs as saved_runs
from course_lib.tools.evidence import EVIDENCE

PKG = Path(course_lib.__file__).resolve().parent
ROOT = PKG.parent


def test_data_link_points_at_the_repository_data():
    link = ROOT / "course_lib" / "_data"
    assert link.is_symlink() and os.readlink(link) == "../data"
    assert {p.stem for p in (link / "evidence").glob("*.json")} >= set(EVIDENCE)


def test_data_dir_falls_back_to_the_package_copy(monkeypatch, tmp_path):
    assert saved_runs.data_dir("evidence") == ROOT / "data" / "evidence"       # a clone
    monkeypatch.setattr(saved_runs, "ROOT", tmp_path)                           # a wheel: no data/
    copy = saved_runs.data_dir("evidence")
    assert copy == PKG / "_data" / "evidence" and copy.is_dir()


@pytest.mark.timeout(300)
def test_the_wheel_carries_weights_evidence_and_runs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "data", src / "data")
    shutil.copytree(ROOT / "course_lib", src / "course_lib", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    names = set(zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).namelist())
    for name in EVIDENCE:
        assert f"course_lib/_data/evidence/{name}.json" in names, f"the wheel lacks evidence {name}"
    assert any(n.startswith("course_lib/_data/runs/") for n in names), (
        "the wheel lacks the reference runs")
    for weights in ("core/weights/baseline.pt", "generate/weights/decoder_kv4.pt",
                    "generate/weights/draft.pt", "real_model/course_sentences.json"):
        assert f"course_lib/{weights}" in names, f"the wheel lacks {weights}"
