"""Lessons 01-02: packing sequences into rows, and the batching strategies compared by name.
"""
