"""Timing generation: greedy decoding with and without the ``KVCache``, interleaved in one loop
(``measure.bench.compare``, the order rotated each repeat), as tokens per second and the
course's speed-up (the geometric mean of the paired ratios, with its error)."""
from __future__ import annotations

import functools

import torch

from course_lib.generate.decoder import DecoderLM
from course_lib.generate.greedy import generate_cached, generate_uncached
from course_lib.measure import bench


def decode_speed(models: dict[str, DecoderLM], *, prompt_len: int, new_tokens: int, batch: int = 1,
                 repeats: int = 5, warmup: int = 1, seed: int = 0,
                 device: torch.device | str = "cpu") -> dict[str, dict]:
    """For each ``name: model``, greedy generation of ``new_tokens`` after a random prompt of
    ``prompt_len`` tokens, without (``"<name>, no cache"``) and with (``"<name>, cache"``) the
    cache, all interleaved. Returns ``bench.compare``'s dict (the first entry is the baseline of
    every ``speedup``) with ``tokens_per_s`` (new tokens × batch ÷ median seconds) added."""
    if not models:
        raise ValueError("models must hold at least one model")
    if not isinstance(prompt_len, int) or prompt_len < 1:
        raise ValueError(f"prompt_len must be an integer >= 1, got {prompt_len!r}")
    vocab = {m.cfg.vocab_size for m in models.values()}
    if len(vocab) != 1:
        raise ValueError(f"models must share one vocab_size, got {sorted(vocab)}")
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab.pop(), (batch, prompt_len), generator=g).to(device)
    fns = {}
    for name, m in models.items():
        fns[f"{name}, no cache"] = functools.partial(generate_uncached, m, prompt, new_tokens=new_tokens)
        fns[f"{name}, cache"] = functools.partial(generate_cached, m, prompt, new_tokens=new_tokens)
    out = bench.compare(fns, warmup=warmup, repeats=repeats, device=device, rotate=True)
    for r in out.values():
        r["tokens_per_s"] = new_tokens * batch / r["timing"].median
    return out
