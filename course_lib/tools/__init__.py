"""Command-line tools, apart from what the lessons import: ``report`` (run every lesson, the
summary page), ``site`` (the website), ``saved_runs`` (reference runs), ``notebook_runner``
(papermill with a guard against lost kernel replies), ``colab`` (the repository URL and every
lesson's Colab cells) and ``headroom`` (re-checks that the task leaves room for accuracy
effects). Run them as ``python -m course_lib.tools.<name>``.
"""
