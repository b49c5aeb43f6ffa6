"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per pytest
session, that is per xdist worker (``make test-browser`` runs two).

The server runs on 127.0.0.1 on a free port with a random token, and with its own config,
data, runtime, IPython, settings and workspace folders, so nothing of the user's set-up (or
of another test run) leaks in. It serves a temporary mirror of the repository in which
``notebooks/`` holds smoke-mode copies of the lessons (papermill injects ``SMOKE = True``
after the ``parameters`` cell, and the kernel inherits ``COURSE_SMOKE=1``); every other
top-level entry is a symlink to the real one, so relative paths in the lessons still work.
``BROWSER_FULL=1`` serves the lessons as they are instead, at learner defaults (``make
widget-times``: minutes per lesson), so that the widget response times it records are the ones
a learner meets.

Chromium is Debian's ``/usr/bin/chromium`` (``CHROMIUM`` overrides it), driven by Python
playwright; ``playwright install`` is never needed. Without either, every browser test is
skipped with the reason.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
# BROWSER_NOTEBOOKS_DIR points the suite at other lessons (e.g. while writing a new one).
NOTEBOOK_DIR = Path(os.environ.get("BROWSER_NOTEBOOKS_DIR", ROOT / "notebooks"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
SHOTS = Path(os.environ.get("BROWSER_SHOTS_DIR", ROOT / "build" / "browser"))
FULL = os.environ.get("BROWSER_FULL") == "1"   # learner defaults instead of smoke copies
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Lab settings for the isolated user-settings folder: every cell in the DOM (no windowing, so
# the page can be checked as a whole), the kernel started without a "Select Kernel" dialog, no
# news or update checks, widget state saved with the notebook (so the saved file shows errors
# inside widget outputs too).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none",
                                               "autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _smoke_copy(src: Path, dst: Path) -> None:
    """Write ``src`` to ``dst`` with smoke parameters injected (as the notebook tests do); with
    ``BROWSER_FULL=1``, unchanged."""
    if FULL:
        nb = nbformat.read(str(src), as_version=4)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, str(dst))
        return
    try:
        from papermill.iorw import load_notebook_node
        from papermill.parameterize import parameterize_notebook
    except ImportError:   # COURSE_SMOKE=1 in the kernel's environment does the same
        nb = nbformat.read(str(src), as_version=4)
    else:
        nb = parameterize_notebook(load_notebook_node(str(src)), {"SMOKE": True},
                                   kernel_name="python3", language="python")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(dst))


class Lab:
    """A running JupyterLab: ``url``, ``token``, ``root`` (served folder), ``results`` (where
    its kernels' lessons write their results), REST helpers."""

    def __init__(self, url: str, token: str, root: Path, results: Path):
        self.url, self.token, self.root, self.results = url, token, root, results

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Stop every kernel, so lessons do not pile up on a 2-core machine."""
        for s in self.api("sessions"):
            try:
                self.api(f"sessions/{s['id']}", method="DELETE")
            except OSError:
                pass

    def kernel_state(self, nb_path: Path) -> str | None:
        """Execution state of the kernel attached to this lesson (None: no session yet)."""
        for s in self.api("sessions"):
            if Path(s.get("path", "")).name == nb_path.name and s.get("kernel"):
                return s["kernel"].get("execution_state")
        return None

    def lesson(self, nb_path: Path) -> Path:
        return self.root / "notebooks" / nb_path.name


def pytest_generate_tests(metafunc):
    """``nb_path``: every lesson, discovered, so a new lesson is covered without edits."""
    if "nb_path" in metafunc.fixturenames:
        metafunc.parametrize("nb_path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])


def _die_with_parent() -> None:
    """Linux: the Lab server gets SIGTERM if pytest is killed, instead of lingering."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@pytest.fixture(scope="session")
def shots_dir() -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Lab:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} missing (apt-get install chromium); browser tests skipped")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("python playwright missing (pip install -e '.[dev]'); browser tests skipped")
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        pytest.skip("jupyterlab missing (pip install -e '.[dev]'); browser tests skipped")

    work = tmp_path_factory.mktemp("lab")
    root = work / "root"
    (root / "notebooks").mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("notebooks", ".git", ".venv", "build"):
            (root / entry.name).symlink_to(entry)
    for entry in NOTEBOOK_DIR.iterdir():
        if entry not in NOTEBOOKS:
            (root / "notebooks" / entry.name).symlink_to(entry)
    for nb in NOTEBOOKS:
        _smoke_copy(nb, root / "notebooks" / nb.name)
    settings = work / "settings"
    for plugin, values in LAB_SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))

    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_STATIC", "JUPYTER_PATH")}
    env.update(JUPYTER_CONFIG_DIR=str(work / "config"), JUPYTER_DATA_DIR=str(work / "data"),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"), IPYTHONDIR=str(work / "ipython"),
               JUPYTER_PLATFORM_DIRS="1", COURSE_SMOKE="0" if FULL else "1",
               COURSE_RESULTS_DIR=str(work / "results"), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={work / 'ws'}",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])]
    log_path = work / "lab.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    server = Lab(f"http://127.0.0.1:{port}", token, root, work / "results")
    deadline = time.monotonic() + 90
    while True:
        try:
            server.api("status")
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log.close()
                pytest.fail("jupyter lab did not start:\n" + log_path.read_text()[-4000:])
            time.sleep(0.5)
    yield server
    try:
        server.shutdown_kernels()
    except OSError:
        pass
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="session")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROME_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, lab):
    """A fresh tab (own context: no state shared between lessons); kernels stopped after."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    ctx.close()
    try:
        lab.shutdown_kernels()
    except OSError:
        pass
