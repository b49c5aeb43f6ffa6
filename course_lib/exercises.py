"""Exercises with automatic checks that never break "Run All".

A learner's stub raises ``NotImplementedError`` (or returns ``None``): ``check`` then prints
what is missing and returns False instead of raising. The collapsed solution cell calls
``check(..., strict=True)``, so CI fails if a solution is wrong.
"""
from __future__ import annotations

from collections.abc import Callable


class ExerciseNotDone(Exception):
    pass


def check(name: str, test: Callable[[], None], *, strict: bool = False) -> bool:
    """Run ``test`` (which asserts); report the outcome in one line.

    Unfinished work (NotImplementedError, or an AssertionError with ``strict=False``) prints a
    hint and returns False. With ``strict=True`` any failure raises.
    """
    try:
        test()
    except NotImplementedError:
        if strict:
            raise
        print(f"[ ] {name}: not attempted yet; fill in the cell above, then run this one again.")
        return False
    except AssertionError as err:
        if strict:
            raise
        print(f"[x] {name}: not quite. {err}")
        return False
    print(f"[✓] {name}: correct.")
    return True
