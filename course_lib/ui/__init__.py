"""What the learner sees: figures (``plots``), widgets (``widgets``) and checked exercises
(``exercises``).
"""
