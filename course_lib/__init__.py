"""course_lib: every implementation behind the Efficient Transformers, Hands-On lessons.

The layout is the course's table of contents. Read ``core`` first; the technique packages build
on it, and import only ``core``, ``measure`` and ``ui`` (``tests/test_layout.py`` checks it):

- ``core``: the model, the corpus, padding and batching, the one training step and loop,
  checkpoints, the device.
- ``measure``: timing, memory, recorded results, verdicts and claims, scoring, hardware.
- ``ui``: figures, widgets, exercises.
- one package per technique: ``packing`` (lessons 01-02), ``floats`` (03), ``precision`` (04),
  ``pruning`` (05), ``distill`` (06), ``quant`` (07), ``distributed`` (08), ``memory`` (09),
  ``attention`` (10-11), ``optim`` (12-13), ``capstone`` (14, stacks the others),
  ``real_model`` (15).
- ``tools``: every command, ``python -m course_lib.tools.<name>``.

Import the module you need (``from course_lib.core.data import load_corpus``). Importing the
package does no I/O and has no side effects.
"""
__version__ = "0.1.0"
