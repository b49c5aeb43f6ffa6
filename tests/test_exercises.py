"""exercises.check never stops "Run All" for a learner, and always raises for a solution."""
import pytest

from course_lib.ui.exercises import check


def _raises(exc):
    def test():
        raise exc
    return test


@pytest.mark.parametrize("exc, shown", [
    (NotImplementedError(), "[ ] ex: not attempted yet"),
    (AssertionError("expected 3, got 4"), "[x] ex: not quite. expected 3, got 4"),
    (TypeError("'NoneType' object is not iterable"),
     "[x] ex: your code raised TypeError: 'NoneType' object is not iterable"),
    (AttributeError("no attribute 'x'"), "[x] ex: your code raised AttributeError"),
])
def test_unfinished_work_prints_a_hint_and_returns_nothing(capsys, exc, shown):
    assert check("ex", _raises(exc)) is None   # no stray True/False under the cell
    out = capsys.readouterr().out
    assert out.startswith(shown) and out.count("\n") == 1


def test_correct_work_and_strict_mode(capsys):
    assert check("ex", lambda: None) is None
    assert capsys.readouterr().out == "[✓] ex: correct.\n"
    for exc in (NotImplementedError(), AssertionError("no"), TypeError("bad")):
        with pytest.raises(type(exc)):
            check("ex", _raises(exc), strict=True)
