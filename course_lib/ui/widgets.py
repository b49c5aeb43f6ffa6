"""Widgets that always show a result, and degrade to a static figure.

``explore(update, controls)`` displays the controls above one output area and calls
``update(**values)`` once with the defaults, then again on every change. ``update`` returns
what to show (a matplotlib ``Figure``, text, or anything ``display`` takes); the output area
is cleared first, so moving a slider replaces the figure instead of stacking a new one. Every
control that can update continuously (sliders, text boxes) is set to ``continuous_update=False``:
a recomputation runs once, when the learner lets go of the slider or presses Enter, instead of
for every intermediate value.

With no widget front end (``COURSE_STATIC=1``, set by ``make report``), the default result is
displayed as a plain cell output, so an executed notebook still carries every figure.
An exception in the callback becomes an error output of the output area: the learner sees the
traceback. papermill cannot see it, so the notebook tests scan the saved widget state for it.
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
from IPython.display import display

from course_lib.core.progress import static_mode   # the one switch for widgets and bars




def _show(result) -> None:
    from matplotlib.figure import Figure

    if result is None:
        return
    if isinstance(result, (list, tuple)):
        for r in result:
            _show(r)
        return
    if isinstance(result, str):
        print(result)
        return
    if isinstance(result, Figure):
        from course_lib.ui.plots import register_figure_png
        register_figure_png()
    display(result)
    if isinstance(result, Figure):
        result.clear()   # free memory; the figure was rendered to an image by display


def explore(update: Callable[..., object], controls: dict[str, widgets.ValueWidget], *,
            title: str = "", columns: int = 3) -> None:
    """Show ``controls`` and the output of ``update`` (displayed here, so nothing is returned:
    a returned widget would be displayed a second time as the cell's value)."""
    if not controls:
        raise ValueError("controls must hold at least one widget")
    for w in controls.values():
        if "continuous_update" in w.trait_names():
            w.continuous_update = False   # recompute once, when the learner lets go
    values = lambda: {k: w.value for k, w in controls.items()}  # noqa: E731
    if static_mode():
        print((title + ": " if title else "") + "static figure for the default settings "
              "(run the notebook in Jupyter to move the controls)")
        _show(update(**values()))
        return
    out = widgets.Output()
    box = widgets.VBox([widgets.HTML(f"<b>{title}</b>")] if title else [])

    def refresh(_change=None):
        with out:
            out.clear_output(wait=True)
            # An exception here becomes an error output of ``out``: the learner sees the
            # traceback, and the notebook tests find it in the saved widget state.
            _show(update(**values()))

    for w in controls.values():
        w.observe(refresh, names="value")
    rows = [widgets.HBox(list(controls.values())[i:i + columns])
            for i in range(0, len(controls), columns)]
    box.children = (*box.children, *rows, out)
    display(box)
    refresh()
