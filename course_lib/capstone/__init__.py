"""The capstone (lesson 14): the optimization ladder, one job per module.

``ladder`` (rungs, settings, accuracy bounds), ``model_zoo`` (each model once), the meters
(``ladder_inputs``: inputs and accuracy; ``ladder_timing``: latency, test-set and epoch time;
``ladder_memory``: peak memory; ``ladder_meters.measure`` runs them all), ``ladder_speedups``
(every ratio with its error), ``ladder_analysis`` (summary, bounds, Pareto front, stack against
product) and ``ladder_evidence`` (the committed timing run the "speed-ups multiply" check rests
on). Only lesson 14 and the report use them; the techniques they stack live one level up.
"""
