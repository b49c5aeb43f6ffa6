"""Lesson 03: floating-point formats bit by bit, and as torch stores and computes them.
"""
