"""How a lesson is running (live, or executed without a front end), and progress bars that
follow it.

``make report`` and the site execute every lesson with ``COURSE_STATIC=1``: no widget front end
is there to draw anything. Widgets then show their default result as a plain output
(``ui.widgets``), and progress bars draw nothing: a saved notebook would keep only what a bar's
text said when it was displayed, ``0%|          | 0/80``, which reads as work that never ran. In
JupyterLab the bars are ``tqdm.auto``'s, unchanged.
"""
from __future__ import annotations

import os

__all__ = ["static_mode", "tqdm"]


def static_mode() -> bool:
    """Whether the lesson runs without a widget front end (``COURSE_STATIC=1``)."""
    return os.environ.get("COURSE_STATIC") == "1"


def tqdm(iterable=None, *args, disable: bool = False, **kwargs):
    """``tqdm.auto.tqdm(iterable, ...)``, disabled in static mode as well as by ``disable``."""
    from tqdm.auto import tqdm as auto

    return auto(iterable, *args, disable=disable or static_mode(), **kwargs)
