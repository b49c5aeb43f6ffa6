"""Lesson 05: pruning by masks, structured pruning into smaller dense models, 2:4 sparsity.
"""
