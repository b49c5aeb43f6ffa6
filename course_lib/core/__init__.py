"""The course's core, read first: the model (with its positions), the corpus and its vocabulary,
padding and batching, the one training step and loop, the checkpoints, the device.
"""
