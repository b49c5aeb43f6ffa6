"""Lesson 10: attention three ways with its masks, its memory, and low-rank approximations.
"""
