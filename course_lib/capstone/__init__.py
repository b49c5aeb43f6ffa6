"""The capstone (lesson 12): the optimization ladder, one job per module.

``ladder`` (rungs, settings, accuracy bounds), ``model_zoo`` (each model once), ``ladder_meters``
(accuracy, latency, test-set and epoch time, memory), ``ladder_speedups`` (every ratio with its
error) and ``ladder_analysis`` (summary, bounds, Pareto front, stack against product). Only
lesson 12 and the report use them; the techniques they stack live one level up.
"""
