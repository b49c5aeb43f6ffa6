"""Exercises with automatic checks that never break "Run All".

A learner's stub raises ``NotImplementedError`` (or returns ``None``): ``check`` then prints
what is missing and returns None instead of raising; any other exception from unfinished code
(a ``TypeError``, an ``AttributeError``...) is reported the same way, with its type and message,
so "Run All" always reaches the end. The collapsed solution cell calls
``check(..., strict=True)``, so CI fails if a solution is wrong. ``check`` returns None, so a
check cell shows only its one line, never a stray ``True``/``False``.
"""
from __future__ import annotations

from collections.abc import Callable


def check(name: str, test: Callable[[], None], *, strict: bool = False) -> None:
    """Run ``test`` (which asserts); print the outcome in one line.

    With ``strict=False`` (the learner's check cell) nothing raises: not attempted
    (NotImplementedError), wrong (AssertionError) and broken (any other exception) each print
    a hint. With ``strict=True`` (the solution cell, run by CI) any failure raises.
    """
    try:
        test()
    except NotImplementedError:
        if strict:
            raise
        print(f"[ ] {name}: not attempted yet; fill in the cell above, then run this one again.")
        return
    except AssertionError as err:
        if strict:
            raise
        print(f"[x] {name}: not quite. {err}")
        return
    except Exception as err:  # the learner's unfinished code may raise anything
        if strict:
            raise
        print(f"[x] {name}: your code raised {type(err).__name__}: {err}")
        return
    print(f"[✓] {name}: correct.")
