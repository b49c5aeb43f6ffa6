"""Lessons 12 and 13: optimizers on one budget and the optimizer race (12), ``torch.compile``
and its timing (13).
"""
