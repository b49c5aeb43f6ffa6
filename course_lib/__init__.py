"""course_lib: every implementation behind the Efficient Transformers, Hands-On lessons.

One idea per module; import the module you need (``from course_lib.data import load_corpus``).
Importing the package does no I/O and has no side effects.
"""
__version__ = "0.1.0"
