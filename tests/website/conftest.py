"""Fixtures for the site tests: the built site (``make site`` writes ``build/site``; ``SITE_DIR``
overrides it) served over HTTP on a free local port, and one headless Chromium (Debian's
``/usr/bin/chromium``, ``CHROMIUM`` overrides it) driven by playwright."""
from __future__ import annotations

import functools
import http.server
import os
import socketserver
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("SITE_DIR", ROOT / "build" / "site"))
SOURCE = SITE.parent / (SITE.name + "-src")
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.fail(f"no site in {SITE}: run make site first (make test-site does)")
    return SITE


@pytest.fixture(scope="session")
def base_url(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}"
        server.shutdown()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"no chromium at {CHROMIUM}")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(20_000)
    yield pg
    ctx.close()
