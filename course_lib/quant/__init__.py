"""Lesson 07: int8 from first principles (``int8``: the quantizer), PyTorch's paths (``dynamic``,
``static``, ``gpu``) and what the int8 kernel computes (``kernel``), scored and swept over width
and batch; ``weight_only``: int8 weights with float activations, for decoding (lesson 16).
"""
