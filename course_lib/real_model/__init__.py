"""Lesson 15: the course's techniques on a real pretrained Transformer, and the checks
around it.
"""
