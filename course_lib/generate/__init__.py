"""Generating text (issue 47's lesson, in progress): ``decoder`` (a small decoder-only model of
the course's own, its key/value cache, grouped-query attention), ``greedy`` (generation with and
without the cache), ``speculative`` (a draft model proposes, the target checks), ``speed``
(tokens per second, both ways interleaved). Weight-only int8 for decoding is
``quant.weight_only``."""
