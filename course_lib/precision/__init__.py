"""Lesson 04: mixed precision (autocast and the gradient scaler), what it saves in memory,
where it pays in speed, and a task that needs precise values.
"""
