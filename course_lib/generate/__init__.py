"""Generating text (issue 47's lesson, in progress): a small decoder-only model of the course's
own, its key/value cache, grouped-query attention, and greedy generation with and without the
cache. ``decoder`` holds the model and the cache, ``greedy`` the generation loops."""
