"""Generating text (lesson 16): ``decoder`` (a small decoder-only model of the course's own, its
key/value cache, grouped-query attention), ``greedy`` (generation with and without the cache),
``speculative`` (a draft model proposes, the target checks), ``speed`` (tokens per second, both
ways interleaved; the sweeps), ``lm`` (the reviews as a language model: stream, training,
perplexity, conversion to fewer key/value heads), ``stored`` (the shipped decoders and their
recipe), ``memory`` (the cache's measured growth), ``figures``. Weight-only int8 for decoding
is ``quant.weight_only``."""
