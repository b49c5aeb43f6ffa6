"""Lesson 06: distillation losses, the students and their recipes, soft targets against hard
labels over the transfer set (``transfer``) and its tables, and the stored teacher logits and
student.
"""
