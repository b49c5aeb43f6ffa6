"""Measuring honestly: timing and memory (``bench``, ``memory``), what a lesson recorded
(``results``), how a number becomes a verdict (``verdicts``, ``claims``), scoring models on the
same reviews (``scoring``), and what the hardware can do (``hardware``).
"""
