"""Lesson 08: data-parallel training (the torchrun worker, its set-up, the launcher and
the cost model, interleaved timing).
"""
