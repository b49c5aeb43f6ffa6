"""Lessons 10 and 11: attention three ways and its memory (10); masks, kernels that skip and low
rank (11).
"""
