"""Lesson 09: when training does not fit: memory anatomy, checkpointing, accumulation, sharding."""
