"""Lesson 06: distillation losses, the students and their recipes, the reference run and its
tables, and the stored teacher logits and student.
"""
