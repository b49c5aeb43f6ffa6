"""The reading-time estimate (``tools.reading_time``) against a hand count."""
import json

import pytest

from course_lib.tools import reading_time as R


def _nb(tmp_path, cells, name="07_x.ipynb"):
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": [text]}


def code(text, outputs=(), hidden=False):
    meta = {"jupyter": {"source_hidden": True}} if hidden else {}
    return {"cell_type": "code", "metadata": meta, "source": [text], "outputs": list(outputs),
            "execution_count": None}


def test_words_code_lines_and_figures_are_counted_up_to_the_fine_print(tmp_path):
    printed = {"output_type": "display_data",
               "data": {"text/markdown": ["three printed words"], "text/plain": ["x"]}}
    figure = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": ["F"]}}
    path = _nb(tmp_path, [
        md("# The question\n" + "word " * 196),          # "#" is not a word: 2 + 196
        code("x = 1\n\n# a comment\ny = x", [printed, figure]),
        code("hidden = 'paragraph'", [printed], hidden=True),
        md("## Evidence and fine print\nmore words here"),
        code("z = 3\n" * 40, [figure]),
    ])
    r = R.reading(path)
    assert r.has_fine_print and r.lesson == "07_x"
    assert r.words == 2 + 196 + 3 + 3            # markdown, printed, hidden cell's printed words
    assert r.code_lines == 3                      # the hidden cell's source is not shown
    assert r.figures == 1
    assert r.minutes == pytest.approx(204 / 200 + 3 / 20 + 30 / 60)
    whole = r.minutes + 7 / 200 + 40 / 20 + 30 / 60
    assert r.total_minutes == pytest.approx(whole)


def test_a_lesson_without_fine_print_is_all_core_path_and_bad_folders_are_named(tmp_path):
    r = R.reading(_nb(tmp_path, [md("one two"), code("a = 1")]))
    assert not r.has_fine_print and r.minutes == pytest.approx(r.total_minutes)
    with pytest.raises(FileNotFoundError, match="no lesson notebooks"):
        R.lesson_paths(tmp_path / "empty")


def test_every_lesson_is_read_and_printed(capsys):
    R.main([])
    out = capsys.readouterr().out
    assert out.count("core path") == len(R.lesson_paths(R.Path("notebooks")))
