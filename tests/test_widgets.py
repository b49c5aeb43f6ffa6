"""explore(): one call with the defaults, one per change, and no recomputation per drag step."""
import ipywidgets as W
import pytest

from course_lib.ui.widgets import explore


def test_explore_calls_once_then_on_each_change_and_sets_continuous_update_off(monkeypatch):
    monkeypatch.delenv("COURSE_STATIC", raising=False)
    monkeypatch.setattr("course_lib.ui.widgets.display", lambda *a, **k: None)
    calls = []
    slider = W.IntSlider(value=3, min=0, max=10)
    text = W.Text(value="a")
    menu = W.Dropdown(options=["x", "y"], value="x")
    assert slider.continuous_update and text.continuous_update
    explore(lambda n, s, m: calls.append((n, s, m)), {"n": slider, "s": text, "m": menu})
    assert calls == [(3, "a", "x")]
    assert not slider.continuous_update and not text.continuous_update
    slider.value = 5
    menu.value = "y"
    assert calls[1:] == [(5, "a", "x"), (5, "a", "y")]


def test_explore_static_mode_and_errors(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_STATIC", "1")
    explore(lambda n: f"value {n}", {"n": W.IntSlider(value=2)}, title="T")
    assert "value 2" in capsys.readouterr().out
    with pytest.raises(ValueError, match="controls"):
        explore(lambda: None, {})


def test_progress_bars_draw_nothing_in_static_mode(monkeypatch):
    from course_lib.core.progress import tqdm
    monkeypatch.delenv("COURSE_STATIC", raising=False)
    assert not tqdm(range(3)).disable and tqdm(range(3), disable=True).disable
    monkeypatch.setenv("COURSE_STATIC", "1")   # make report, the site: a saved bar would say 0%
    bar = tqdm(range(3), desc="work")
    assert bar.disable and list(bar) == [0, 1, 2]
