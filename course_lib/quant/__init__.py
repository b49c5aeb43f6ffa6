"""Lesson 07: int8 from first principles and PyTorch's paths (dynamic, static, GPU), scored and
swept over width and batch.
"""
