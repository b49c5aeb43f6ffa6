"""The output checks the notebook tests run on every executed lesson: stray reprs and figures
a reader cannot read (course_lib.tools.hygiene, course_lib.ui.plots.layout_problems)."""
import pytest

from course_lib.tools.hygiene import output_problems
from course_lib.ui.plots import LAYOUT_KEY, _figure_png, layout_problems, new_figure, tidy


def _nb(*outputs, widget_outputs=()):
    state = {"m1": {"model_name": "OutputModel", "state": {"outputs": list(widget_outputs)}}}
    return {"cells": [{"cell_type": "code", "outputs": list(outputs)}],
            "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json":
                                     {"state": state}}}}


def test_a_bare_number_or_repr_is_a_stray_output_but_a_display_is_not():
    bare = {"output_type": "execute_result", "data": {"text/plain": "0.0"}}
    shown = {"output_type": "display_data",
             "data": {"text/markdown": "**1.5×**", "text/plain": "<Markdown>"}}
    printed = {"output_type": "stream", "name": "stdout", "text": "1.5\n"}
    table = {"output_type": "execute_result", "data": {"text/html": "<table/>", "text/plain": "df"}}
    assert output_problems(_nb(shown, printed, table)) == []
    got = output_problems(_nb(bare, {"output_type": "execute_result",
                                     "data": {"text/plain":
                                              "Verdict(claim='x', outcome='holds')"}}))
    assert len(got) == 2 and "'0.0'" in got[0] and "Verdict(claim=" in got[1]


def test_layout_problems_travel_in_the_image_metadata_and_are_found_in_widgets_too():
    fig, ax = new_figure()   # two notes pinned to the panel's corner: tidy cannot move them
    ax.text(0.5, 0.5, "a note in axes coordinates", transform=ax.transAxes)
    ax.text(0.52, 0.5, "another note right on it", transform=ax.transAxes)
    png = _figure_png(fig)
    assert isinstance(png, tuple) and png[1][LAYOUT_KEY]
    out = {"output_type": "display_data", "data": {"image/png": "..."},
           "metadata": {"image/png": png[1]}}
    got = output_problems(_nb(widget_outputs=[out]))
    assert got and all(g.startswith("widget m1: figure: ") for g in got)
    assert any("texts" in g and "overlap" in g for g in got)


def test_tidy_turns_crowded_tick_labels_moves_a_legend_off_the_data_and_wraps_a_title():
    fig, ax = new_figure()
    ax.bar([f"a long category label number {i}" for i in range(8)], range(8), label="bars")
    ax.plot(range(8), range(8), label="a line")
    ax.legend(loc="center")
    ax.set_title("A title far too long for its figure, which would run over both edges of it " * 2)
    before = layout_problems(fig)
    assert any("tick labels" in p for p in before) and any("legend covers" in p for p in before)
    assert any("cut by the figure's edge" in p for p in before)
    tidy(fig)
    assert layout_problems(fig) == []
    assert ax.get_xticklabels()[0].get_rotation() in (30.0, 90.0) and "\n" in ax.get_title()


def test_a_clean_figure_has_no_problems_and_a_plain_png():
    fig, ax = new_figure()
    ax.plot(range(10), [x * x for x in range(10)], label="squares")
    ax.legend(loc="upper left")
    ax.set(title="A readable figure", xlabel="x", ylabel="x squared")
    assert layout_problems(fig) == [] and isinstance(_figure_png(fig), bytes)


@pytest.mark.parametrize("case, expect", [("legend", "legend covers the line"),
                                          ("title", "cut by the figure's edge"),
                                          ("texts", "texts")])
def test_each_kind_of_layout_problem_is_caught(case, expect):
    fig, ax = new_figure(width=3 if case == "title" else 6)
    ax.plot(range(10), range(10), label="a line")
    if case == "legend":
        ax.legend(loc="center")
    elif case == "title":
        ax.set_title("A title far too long to fit in a narrow figure, running over both of "
                     "its edges")
    else:
        ax.text(4, 4, "one label here")
        ax.text(4.2, 4, "another label")
    assert any(expect in p for p in layout_problems(fig)), layout_problems(fig)


def test_tidy_labels_log_axes_with_plain_numbers():
    fig, ax = new_figure()
    ax.plot([64, 256, 1024], [0.2, 0.5, 3])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    tidy(fig)
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "256" in labels and not any("^" in t for t in labels)
    ys = [t.get_text() for t in ax.get_yticklabels() + ax.get_yticklabels(minor=True)
          if t.get_text()]
    assert "1" in ys and "0.2" in ys and not any("^" in t for t in ys), ys   # not 10^0, 2 x 10^-1
    unlabelled = [t for t in ax.get_yticklabels(minor=True) if not t.get_text()]
    assert unlabelled, "minor ticks the default would leave bare stay bare (7, 8, 9 x 10^-1)"


def test_bar_compare_draws_an_estimates_interval_and_plain_numbers_without_one():
    from course_lib.measure.verdicts import speedup
    from course_lib.ui.plots import bar_compare, new_figure
    est = speedup([10.0, 12.0, 11.0], [5.0, 5.5, 5.2])
    fig, ax = new_figure(width=4)
    bar_compare(["a", "b"], [est, 1.0], ax=ax, ylabel="speed-up")
    lines = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(lines) == 1 and "95% interval" in ax.get_title() and ax.get_ylabel() == "speed-up"
    segs = lines[0].lines[2][0].get_segments()
    lo, hi = est.interval
    assert segs[0][0][1] == pytest.approx(lo) and segs[0][1][1] == pytest.approx(hi)
    assert [p.get_height() for p in ax.patches] == pytest.approx([est.value, 1.0])
    fig2, ax2 = new_figure(width=4)
    bar_compare(["a"], [2.0], ax=ax2, ylabel="s")
    assert ax2.get_title() == "" and not [c for c in ax2.containers
                                          if type(c).__name__ == "ErrorbarContainer"]


def test_an_unformatted_placeholder_is_found_but_code_and_latex_are_not():
    from course_lib.tools.hygiene import placeholders
    lost = {"output_type": "display_data",
            "data": {"text/markdown": "Peak memory: {memory_method}; {x:.2f} s",
                     "text/plain": "<Markdown>"}}
    got = output_problems(_nb(lost))
    assert len(got) == 2 and "{memory_method}" in got[0] and "{x:.2f}" in got[1]
    printed = {"output_type": "stream", "name": "stdout", "text": "rank {rank} done\n"}
    assert "{rank}" in output_problems(_nb(printed))[0]
    assert placeholders("```python\nprint(f'{rank}')\n```\n"
                        "and `f\"{x}\"` inline, $\\frac{a}{b}$, x^{2}, {}") == []
    assert placeholders("{d['k']} and {obj.attr!r}") == ["{d['k']}", "{obj.attr!r}"]


def test_a_speed_up_from_medians_is_found_in_code_and_none_is_left_in_the_course():
    from pathlib import Path

    from course_lib.tools.hygiene import median_ratio_findings, median_ratios

    assert median_ratios("x = a['timing'].median / b['timing'].median") == [
        "a['timing'].median / b['timing'].median"]
    assert median_ratios("sp = ms(False, 'naive', L) / ms(False, 'sdpa', L)")
    assert median_ratios("r = rows[0]['ms'] / rows[1]['ms']")
    assert median_ratios("per_token = t.median / n_tokens") == []        # a rate, not a ratio
    assert median_ratios("e = speedup(a.samples, b.samples)") == []
    root = Path(__file__).resolve().parents[1]
    found = median_ratio_findings(root)
    assert found == [], "speed-ups from medians (use verdicts.speedup):\n" + "\n".join(found)
