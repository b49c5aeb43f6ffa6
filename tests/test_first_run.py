"""The first five minutes of a new learner: `make lab` serves JupyterLab (also as root), and an
installed (non-editable) copy of the package carries the checksummed baseline."""
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _make_lab(*extra: str) -> list[str]:
    # -o: never (re)install from inside a test; the venv running this test is the one to use.
    return ["make", "--no-print-directory", "-o", ".venv/.installed", f"BIN={VENV_BIN}",
            "lab", *extra]


def test_make_lab_passes_allow_root_only_for_root():
    out = subprocess.run([*_make_lab("PORT=8765"), "-n"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    cmd = next(line for line in out.splitlines() if "jupyter lab" in line)
    assert "--port=8765" in cmd
    assert ("--allow-root" in cmd) == (os.geteuid() == 0), cmd


@pytest.mark.timeout(120)
def test_make_lab_serves_jupyterlab(tmp_path):
    port, token = _free_port(), secrets.token_hex(8)
    env = {**os.environ, "JUPYTER_TOKEN": token, "BROWSER": "true",
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    env.pop("MAKEFLAGS", None)
    log = tmp_path / "lab.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(_make_lab(f"PORT={port}"), cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        body, url, deadline = None, "", time.monotonic() + 90
        while body is None and time.monotonic() < deadline:
            assert proc.poll() is None, f"make lab exited early:\n{log.read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}",
                                            timeout=5) as r:
                    body, url = r.read().decode(), r.geturl()
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        assert body is not None, f"no answer on port {port}:\n{log.read_text()}"
        assert "JupyterLab" in body and "/login" not in url   # the lab itself, not a login page
        text = log.read_text()
        assert f"http://localhost:{port}/lab" in text  # the URL a browserless machine needs
        assert "Running as root is not recommended" not in text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_installed_package_loads_the_checksummed_baseline(tmp_path):
    """`pip install .` (not editable) into a fresh venv, run from another folder: the baseline
    comes from the installed package and verifies, so nothing is trained."""
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    py = fresh / "bin" / "python"
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # torch and friends come from the test's own venv, appended after the fresh site-packages
    # (a plain path: that venv's editable-install hook is not loaded).
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # Build from a copy of the sources only: an egg-info left in the checkout by the editable
    # install lists the weights and would hide a missing package-data declaration.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "course_lib", src / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                    str(src)], check=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import course_lib, json; from course_lib.core import checkpoints\n"
             "m, info = checkpoints.load_baseline(train_if_missing=False, progress=False)\n"
             "print(json.dumps({'file': course_lib.__file__, 'source': info['source'],\n"
             "                  'sha': info['sha256']}))\n")
    out = subprocess.run([py, "-c", probe], cwd=elsewhere, capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(site), got["file"]  # the installed copy, not the checkout
    assert got["source"] == "checkpoint"
    manifest = (ROOT / "course_lib" / "core" / "weights" / "baseline.json").read_text()
    assert re.search(rf'"sha256": "{got["sha"]}"', manifest)
