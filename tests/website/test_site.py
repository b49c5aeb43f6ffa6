"""The course website in a real browser: every page loads without console errors, every figure
of a lesson is on its page, the claims page has one row per registered claim, internal links
resolve, and the search finds a word from a lesson."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from course_lib.measure.claims import CLAIMS

from .conftest import SOURCE

pytestmark = pytest.mark.site


def pages(site: Path) -> list[str]:
    skip = {"genindex.html", "search.html"}
    return sorted(str(p.relative_to(site)) for p in site.glob("*.html") if p.name not in skip)


def visit(page, url: str) -> list[str]:
    """Open ``url``; the console errors and page errors it raised."""
    errors = []
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"failed request: {r.url}"))
    page.goto(url, wait_until="networkidle")
    return errors


@pytest.fixture(scope="module")
def visited(site, base_url, browser) -> dict[str, dict]:
    """Each page opened once (the tests below share the visit): its errors, title, links and
    images (drawn or not)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    out = {}
    for name in pages(site):
        pg = ctx.new_page()
        pg.set_default_timeout(20_000)
        errors = visit(pg, f"{base_url}/{name}")
        out[name] = {"errors": errors, "title": pg.title(),
                     "hrefs": pg.eval_on_selector_all(
                         "a[href]", "els => els.map(e => e.getAttribute('href'))"),
                     "imgs": pg.eval_on_selector_all(
                         "article img",
                         "els => els.map(e => [e.complete && e.naturalWidth > 0, e.src])")}
        pg.close()
    ctx.close()
    return out


def test_every_page_loads_without_errors(visited):
    names = list(visited)
    assert "index.html" in names and "claims.html" in names and "hardware.html" in names
    assert [n for n in names if re.match(r"\d\d_", n)], "no lesson pages"
    for name, seen in visited.items():
        assert not seen["errors"], f"{name}: {seen['errors']}"
        assert seen["title"], f"{name} has no title"


def test_every_figure_of_a_lesson_is_on_its_page(visited):
    sources = sorted(SOURCE.glob("[0-9]*.ipynb"))
    assert sources, f"no lesson sources in {SOURCE}"
    for src in sources:
        nb = json.loads(src.read_text())
        want = sum("image/png" in o.get("data", {})
                   for c in nb["cells"] for o in c.get("outputs", []))
        drawn = [s for ok, s in visited[f"{src.stem}.html"]["imgs"] if ok]
        assert len(drawn) >= want, (
            f"{src.stem}: {len(drawn)} figures drawn, the notebook has {want}")


def test_claims_page_has_one_row_per_registered_claim(base_url, page):
    visit(page, f"{base_url}/claims.html")
    rows = page.locator("table.claims tr").count() - 1   # the header row
    assert rows == len(CLAIMS)
    text = page.inner_text("table.claims")
    for verdict in ("holds", "fails"):
        assert verdict in text


def test_internal_links_resolve(site, visited):
    broken = []
    for name, seen in visited.items():
        for href in seen["hrefs"]:
            if urlparse(href).scheme or href.startswith(("mailto:", "#")):
                continue
            target = urldefrag(urljoin(f"/{name}", href))[0].lstrip("/")
            if target and not (site / target).exists():
                broken.append(f"{name} -> {href}")
    assert not broken, broken


def test_search_finds_a_word_from_a_lesson(site, base_url, page):
    lesson = next(p.stem for p in sorted(SOURCE.glob("[0-9]*.ipynb")))
    word = "GradScaler" if (SOURCE / "04_mixed_precision.ipynb").exists() else "bucketing"
    errors = visit(page, f"{base_url}/search.html?q={word}")
    page.wait_for_selector("#search-results li", timeout=20_000)
    found = page.eval_on_selector_all("#search-results li a",
                                      "els => els.map(e => e.getAttribute('href'))")
    assert any(re.match(r"\d\d_", h or "") for h in found), (word, found, lesson)
    assert not errors, errors
