"""What the key/value cache costs in memory, measured: the peak resident memory of a fresh
process that generates with the cache (``measure.bench.peak_rss``), against the formula
``batch × length × 2 × layers × kv_heads × head_dim × bytes``. The model and the prompt are
built before the baseline is read. What the cache adds per token is the growth of that peak
between two lengths (the slope): the fixed costs of the first calls cancel in it.

The child runs with ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 KiB. By default glibc raises that
threshold each time a large buffer is freed, after which buffers come from its heap and are
not returned: generation allocates slightly larger attention buffers at every step, so the
peak can count memory already freed."""
from __future__ import annotations

import torch

from course_lib.generate.decoder import DecoderConfig, DecoderLM, KVCache
from course_lib.generate.greedy import generate_cached
from course_lib.measure.bench import peak_rss


def _cache_work(*, config: dict, batch: int, length: int, prompt_len: int, prepare: bool = False):
    """In the child: build the model and prompt, then (the measured work) allocate a cache of
    ``length`` positions and generate up to it."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(**config)).eval()
    prompt = torch.randint(0, model.cfg.vocab_size, (batch, prompt_len))

    def work():
        cache = KVCache(model.cfg, batch=batch, max_len=length)
        generate_cached(model, prompt, new_tokens=length - prompt_len, cache=cache)
    return work if prepare else work()


def measured_cache_bytes(cfg: DecoderConfig, *, batch: int, lengths: tuple[int, ...],
                         prompt_len: int = 16) -> dict[int, dict]:
    """For each total length: the predicted cache bytes (``KVCache.nbytes``) and the peak RSS
    growth of a fresh process generating to that length with ``cfg``'s shape (batch ``batch``);
    from the second length on also ``measured_per_token`` and ``predicted_per_token``: the
    growth from the previous length, per token of one sequence."""
    if not lengths or min(lengths) <= prompt_len:
        raise ValueError(f"lengths must all exceed prompt_len ({prompt_len}), got {lengths}")
    out = {}
    for n in lengths:
        predicted = KVCache(cfg, batch=batch, max_len=n).nbytes
        peak = peak_rss("course_lib.generate.memory:_cache_work",
                        {"config": cfg.to_dict(), "batch": batch, "length": n,
                         "prompt_len": prompt_len}, prepare=True,
                        env={"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)})
        out[n] = {"predicted_bytes": predicted, "measured_bytes": peak.extra_bytes}
    ns = sorted(out)
    for a, b in zip(ns, ns[1:]):
        tokens = (b - a) * batch
        out[b]["measured_per_token"] = ((out[b]["measured_bytes"] - out[a]["measured_bytes"])
                                        / tokens)
        out[b]["predicted_per_token"] = ((out[b]["predicted_bytes"] - out[a]["predicted_bytes"])
                                         / tokens)
    return out
