"""Lesson 11: optimizers on one budget, the optimizer race, ``torch.compile`` and its timing.
"""
