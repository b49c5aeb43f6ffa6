"""Every lesson opened in JupyterLab in headless Chromium, run, and its widgets moved.

For each ``notebooks/[0-9]*.ipynb`` (smoke copy, see ``conftest.py``) the test:

1. opens it, clicks *Run > Run All Cells* and waits until no cell is queued or running and
   the kernel is idle;
2. fails on what a learner would see go wrong: an error output (in a cell, or inside a
   widget's output area), "Loading widget..." that never resolves, "Error displaying widget"
   / "model not found", and cells Run All never reached; the notebook is also saved (with
   widget state) and the file checked for error outputs and, in smoke mode, given every check
   of the papermill run (``nbutil.check_smoke_run``: results, bounds, verdicts, demonstrations):
   ``make test`` executes each lesson once, here;
3. finds every ``explore()``-style widget by its DOM classes (a ``.widget-vbox`` holding a
   ``.widget-output``), fails if there is none, and for each one moves a control as a person
   does (drags the slider handle, picks another dropdown entry, types into a text box, ...),
   then asserts that the output changed, shows no error, and holds as many figures as before
   (replaced, not stacked);
4. saves screenshots in ``build/browser/`` (``<lesson>.png``, ``<lesson>_widget<i>.png``);
5. records, per widget, the seconds from the moved control to the first change of its output
   (``build/browser/widget_times.json``, with the mode: smoke copies, or learner defaults under
   ``BROWSER_FULL=1``). The course's target is 2 s at learner defaults; a time is reported,
   never asserted (a wall-clock bound in a test fails on a busy machine, not on slow code).
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:   # the fixtures skip every test; keep the module importable
    PlaywrightTimeout = TimeoutError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nbutil import cell_errors, check_smoke_run, widget_errors  # noqa: E402

pytestmark = pytest.mark.browser
RUN_TIMEOUT_S = float(os.environ.get("BROWSER_RUN_TIMEOUT", 180))
WIDGET_TIMEOUT_S = float(os.environ.get("BROWSER_WIDGET_TIMEOUT", 90))

IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
BOX = ".jp-Cell-outputArea .widget-vbox:has(> .widget-output)"
# The boxes to drive: a cell's execute_result repeating a displayed box is the same widget.
DRIVEN_BOX = (".jp-Cell-outputArea .widget-vbox:has(> .widget-output)"
              ":not(.jp-OutputArea-executeResult *)")
STDERR = "[data-mime-type='application/vnd.jupyter.stderr']"
ERROR_RE = r"Traceback \(most recent call last\)|^\s*[A-Za-z_.]*(Error|Exception)\b"
# (kind, selector of the element to act on); the first kind a widget box has is driven.
CONTROLS = [("slider", ".widget-slider .noUi-handle"),
            ("dropdown", ".widget-dropdown select"),
            ("toggle", ".widget-toggle-buttons button"),
            ("radio", ".widget-radio-box input[type=radio]"),
            ("number", ".widget-text input[type=number]"),
            ("text", ".widget-text input[type=text], .widget-textarea textarea"),
            ("checkbox", ".widget-checkbox input[type=checkbox]")]
ANY_CONTROL = ", ".join(sel for _, sel in CONTROLS)

# Everything on the page a learner would read as broken, collected in one pass.
PAGE_PROBLEMS_JS = r"""([stderr, errorRe, box]) => {
  const re = new RegExp(errorRe, 'm'), found = [];
  const text = document.querySelector('.jp-NotebookPanel').innerText;
  for (const s of ['Loading widget', 'Error displaying widget', 'model not found'])
    if (text.includes(s)) found.push(`page shows "${s}"`);
  for (const el of document.querySelectorAll(stderr))
    if (re.test(el.innerText)) found.push('error output: ' + el.innerText.slice(0, 600));
  for (const el of document.querySelectorAll('.jp-OutputArea-output'))
    if (/^<(matplotlib\.figure\.)?Figure size [\d.]+x[\d.]+ with \d+ Axes>$/
        .test(el.innerText.trim()))
      found.push('a figure is shown as the text "' + el.innerText.trim() +
                 '" instead of an image (no image/png formatter for matplotlib Figure: ' +
                 'the inline backend is not active)');
  document.querySelectorAll('.jp-CodeCell').forEach((cell, i) => {
    const boxes = [...cell.querySelectorAll(box)];
    if (boxes.length > 1 && boxes.some(b => b.closest('.jp-OutputArea-executeResult')))
      found.push(`code cell ${i}: the widget is shown twice (explore() displays it and the ` +
                 "cell's last expression, its return value, displays it again)");
  });
  return found;
}"""
# What an output widget shows: its text, a fingerprint of its images, its figure count.
OUTPUT_STATE_JS = """(out) => ({
  text: out.innerText,
  images: [...out.querySelectorAll('img')].map(i => i.src.length + ':' + i.src.slice(-160)),
  figures: out.querySelectorAll('.jp-RenderedImage, .jp-RenderedSVG').length,
  items: out.querySelectorAll('.jp-OutputArea-child').length,
})"""


def _prompts(page) -> list[str]:
    return page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()


def _cell_source(page, i: int) -> str:
    return page.locator(".jp-CodeCell .jp-InputArea-editor").nth(i).inner_text()[:120]


def open_and_run_all(page, lab, nb_path: Path) -> None:
    page.goto(f"{lab.url}/lab/tree/notebooks/{nb_path.name}?reset&token={lab.token}")
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
    deadline = time.monotonic() + 60   # kernel started and idle (accept a kernel dialog)
    while lab.kernel_state(nb_path) != "idle":
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if dialog.count():
            dialog.first.click()
        assert time.monotonic() < deadline, "the kernel did not start within 60 s"
        page.wait_for_timeout(300)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    # Done = something ran, nothing queued or running ("[*]:"), kernel idle; twice in a row.
    done = """(idle) => {
      const ps = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
        .map(e => e.textContent);
      return ps.some(p => /\\[\\d+\\]/.test(p)) && !ps.some(p => p.includes('*'))
        && document.querySelector(idle) !== null;
    }"""
    try:
        for _ in range(2):
            page.wait_for_function(done, arg=IDLE, timeout=RUN_TIMEOUT_S * 1e3, polling=250)
            page.wait_for_timeout(500)
    except PlaywrightTimeout:
        prompts = _prompts(page)
        busy = [i for i, p in enumerate(prompts) if "*" in p]
        raise AssertionError(
            f"Run All did not finish within {RUN_TIMEOUT_S:.0f} s (BROWSER_RUN_TIMEOUT); "
            f"code cells still running or queued: {busy[:3]}{'...' if len(busy) > 3 else ''} "
            f"of {len(prompts)}; running: {_cell_source(page, busy[0]) if busy else '?'!r}"
        ) from None


def settle_widgets(page) -> None:
    """Widgets render after their cell finished: give "Loading widget..." time to resolve."""
    try:
        page.wait_for_function(
            "() => !document.querySelector('.jp-NotebookPanel').innerText"
            ".includes('Loading widget')", timeout=30_000, polling=250)
    except Exception:  # noqa: BLE001 - reported by page_problems with the page's own words
        pass


def page_problems(page) -> list[str]:
    return page.evaluate(PAGE_PROBLEMS_JS, [STDERR, ERROR_RE, BOX])


def saved_notebook_problems(page, lab, nb_path: Path) -> list[str]:
    """Save from the menu (widget state included), then read what Lab wrote to disk."""
    path = lab.lesson(nb_path)
    before = path.stat().st_mtime_ns
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Save Notebook(?!\s*As)")).first.click()
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == before:
        if time.monotonic() > deadline:
            return ["saving the notebook from the File menu did not write it"]
        time.sleep(0.2)
    time.sleep(0.5)
    nb = nbformat.read(str(path), as_version=4)
    problems = [f"cell error: {e}" for e in cell_errors(nb)]
    problems += [f"widget callback error: {e}" for e in widget_errors(nb)]
    skipped = [c.source.strip().splitlines()[0][:80] for c in nb.cells if c.cell_type == "code"
               and c.source.strip() and c.get("execution_count") is None]
    if skipped:
        problems.append(f"Run All did not reach {len(skipped)} code cell(s), the first "
                        f"starting {skipped[0]!r}")
    return problems


def output_state(box) -> dict:
    return box.locator(":scope > .widget-output").evaluate(OUTPUT_STATE_JS)


def wait_output_changed(page, box, before: dict) -> tuple[dict, float]:
    """Wait until the output differs from ``before``, the kernel is idle, and it is stable;
    returns the output and the seconds until it first differed (polled every 0.1 s)."""
    t0 = time.monotonic()
    deadline, last, first = t0 + WIDGET_TIMEOUT_S, None, None
    while time.monotonic() < deadline:
        page.wait_for_timeout(100 if first is None else 400)
        now = output_state(box)
        changed = (now["text"], now["images"]) != (before["text"], before["images"])
        if changed and first is None:
            first = time.monotonic() - t0
        if changed and now == last and page.locator(IDLE).count():
            return now, first
        last = now
    raise AssertionError(f"the widget output did not change within {WIDGET_TIMEOUT_S:.0f} s "
                         f"(still: {before['text'][:200]!r})")


def drag_slider(page, box, handle) -> tuple[str, str]:
    """Drag the handle ~20% of the track, like a mouse; returns the old and new readouts."""
    slider = handle.locator("xpath=ancestor::*[contains(concat(' ', @class, ' '), "
                            "' widget-slider ')][1]")
    readout = slider.locator(".widget-readout").first
    old = readout.inner_text().strip()
    handle.scroll_into_view_if_needed()
    track = slider.locator(".noUi-target").first.bounding_box()
    hb = handle.bounding_box()
    x0, y = hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2
    step = 0.2 * track["width"]
    x1 = x0 + step if x0 + step < track["x"] + track["width"] else x0 - step
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move(x1, y, steps=4)
    page.mouse.up()
    page.wait_for_function("([el, v]) => el.textContent.trim() !== v",
                           arg=[readout.element_handle(), old], timeout=10_000)
    return old, readout.inner_text().strip()


def act(page, box, kind: str, control) -> str:
    """Change one control as a person would; returns what was done."""
    control.scroll_into_view_if_needed()
    if kind == "slider":
        old, new = drag_slider(page, box, control)
        return f"dragged slider from {old} to {new}"
    if kind == "dropdown":
        n = control.locator("option").count()
        assert n > 1, "a dropdown with a single entry cannot be changed"
        i = (control.evaluate("s => s.selectedIndex") + 1) % n
        control.select_option(index=i)
        return f"picked dropdown entry {i}"
    if kind in ("toggle", "radio"):
        unset = ":not(.mod-active)" if kind == "toggle" else ":not(:checked)"
        others = box.locator(CONTROLS[2 if kind == "toggle" else 3][1] + unset)
        assert others.count(), f"no other {kind} option to pick"
        others.first.click()
        return f"clicked another {kind} option"
    if kind == "number":
        control.click()
        control.press("ArrowUp")
        control.press("Enter")
        return f"incremented number box to {control.input_value()}"
    if kind == "text":
        control.click()
        control.press("End")
        control.press_sequentially(" good", delay=50)
        control.press("Enter")
        return f"typed into text box: {control.input_value()!r}"
    control.click()
    return "toggled checkbox"


def drive_widget(page, box) -> tuple[str, float]:
    """Move the first control of ``box``; check the output changed and did not stack. Returns
    what was done and the seconds the output took to answer."""
    before = output_state(box)
    assert before["text"].strip() or before["images"], "widget output is empty at defaults"
    for kind, sel in CONTROLS:
        controls = box.locator(f"{sel}:not(.widget-output {sel.split(',')[0]})")
        if controls.count():
            break
    else:
        raise AssertionError("widget box has no control this test knows how to move")
    done = act(page, box, kind, controls.first)
    after, seconds = wait_output_changed(page, box, before)
    assert re.search(ERROR_RE, after["text"], re.M) is None, \
        f"error in the widget output after '{done}': {after['text'][:600]}"
    assert not (after["items"] > before["items"] and before["text"].strip()
                and after["text"].startswith(before["text"])), (
        f"after '{done}' the new output was appended below the old one "
        f"({before['items']} -> {after['items']} outputs): it stacks instead of replacing")
    assert after["figures"] == before["figures"], (
        f"after '{done}' the output holds {after['figures']} figures instead of "
        f"{before['figures']}: figures stack instead of being replaced")
    if kind == "slider":   # a printed value must follow the slider
        old, new = re.fullmatch(r"dragged slider from (.*) to (.*)", done).groups()
        if re.search(rf"(?<![\w.]){re.escape(old)}(?![\w]|\.\d)", before["text"]):
            assert re.search(rf"(?<![\w.]){re.escape(new)}(?![\w]|\.\d)", after["text"]), \
                f"the output showed {old} before '{done}' but does not show {new} after"
    return f"{done}: output changed in {seconds:.1f} s, {after['figures']} figure(s)", seconds


def record_widget_times(shots_dir: Path, stem: str, rows: list[dict]) -> None:
    """Merge this lesson's widget response times into ``widget_times.json``, under a lock: two
    workers finish lessons at the same time."""
    import fcntl

    path = shots_dir / "widget_times.json"
    with open(shots_dir / "widget_times.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        data[stem] = rows
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


@pytest.mark.timeout(600)
def test_lesson_runs_and_widgets_respond(nb_path, lab, page, shots_dir):
    stem, t0 = nb_path.stem, time.monotonic()
    try:
        open_and_run_all(page, lab, nb_path)
        t_run = time.monotonic() - t0
        settle_widgets(page)
        problems = page_problems(page) + saved_notebook_problems(page, lab, nb_path)
        assert not problems, f"{nb_path.name} in JupyterLab:\n" + "\n".join(problems)
        if os.environ.get("BROWSER_FULL") != "1":   # the papermill run's checks, on Run All's
            check_smoke_run(stem, lab.lesson(nb_path), lab.results / f"{stem}.json")   # output

        boxes = page.locator(DRIVEN_BOX)
        n_controls = page.locator(f".jp-Cell-outputArea :is({ANY_CONTROL})").count()
        assert boxes.count(), (f"{nb_path.name} shows no explore() widget (controls above an "
                               f"output area; {n_controls} loose controls): every lesson "
                               "promises one")
        boxes.first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots_dir / f"{stem}.png"))
        report, times = [], []
        for i in range(boxes.count()):
            box = boxes.nth(i)
            done, seconds = drive_widget(page, box)
            report.append(f"widget {i}: {done}")
            mode = "learner defaults" if os.environ.get("BROWSER_FULL") == "1" else "smoke"
            times.append({"widget": i, "seconds": round(seconds, 2), "action": done.split(":")[0],
                          "mode": mode})
            box.screenshot(path=str(shots_dir / f"{stem}_widget{i}.png"))
        record_widget_times(shots_dir, stem, times)
        assert not page_problems(page), page_problems(page)
        print(f"{nb_path.name}: Run All {t_run:.1f} s, total {time.monotonic() - t0:.1f} s; "
              + "; ".join(report))
    except BaseException:
        page.screenshot(path=str(shots_dir / f"{stem}_FAILED.png"))
        raise
