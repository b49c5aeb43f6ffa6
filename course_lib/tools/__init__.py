"""Command-line tools, apart from what the lessons import: ``report`` (run every lesson, the
summary page), ``site`` (the website), ``saved_runs`` (reference runs), ``notebook_runner``
(papermill with a guard against lost kernel replies), ``colab`` (the repository URL and every
lesson's Colab cells), ``checkpoints`` (train and verify the shipped weights), ``evidence``
(the committed evidence runs: curves with their command and hardware), ``headroom`` (re-checks that
the task leaves room for accuracy effects), ``hygiene`` (what a learner should never see in an
executed lesson) and ``prose_cells`` (hides the source of cells whose job is a paragraph). Run them
as ``python -m course_lib.tools.<name>``.
"""
