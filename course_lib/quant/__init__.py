"""Lesson 07: int8 from first principles and PyTorch's paths (dynamic, static, GPU), scored and
swept over width and batch; ``weight_only``: int8 weights with float activations, for decoding
(lesson 16).
"""
