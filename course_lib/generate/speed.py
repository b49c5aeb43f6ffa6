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
        fns[f"{name}, no cache"] = functools.partial(generate_uncached, m, prompt,
                                                     new_tokens=new_tokens)
        fns[f"{name}, cache"] = functools.partial(generate_cached, m, prompt, new_tokens=new_tokens)
    out = bench.compare(fns, warmup=warmup, repeats=repeats, device=device, rotate=True)
    for r in out.values():
        r["tokens_per_s"] = new_tokens * batch / r["timing"].median
    return out


def cache_speed_over(model: DecoderLM, *, prompt_lens: tuple[int, ...], new_tokens: tuple[int, ...],
                     repeats: int = 5, seed: int = 0) -> dict[int, dict[int, dict]]:
    """Greedy decoding with and without the cache at every (prompt length, new tokens) pair, all
    of them interleaved in one loop (``bench.compare``, the order rotated each repeat), so that
    the machine's drift during the sweep hits every point alike:
    ``{prompt_len: {new_tokens: {"cache": ..., "no cache": ..., "speedup": Estimate}}}``, each
    arm with its ``timing`` and ``tokens_per_s``, the speed-up the cache's over recomputation
    (paired by repeat). Each prompt length draws its own random prompt (``seed``)."""
    from course_lib.measure.verdicts import speedup
    if not prompt_lens or not new_tokens:
        raise ValueError("prompt_lens and new_tokens must each hold at least one length")
    g = torch.Generator().manual_seed(seed)
    prompts = {p: torch.randint(0, model.cfg.vocab_size, (1, p), generator=g) for p in prompt_lens}
    fns = {}
    for p in prompt_lens:
        for n in new_tokens:
            fns[(p, n, "no cache")] = functools.partial(generate_uncached, model, prompts[p],
                                                        new_tokens=n)
            fns[(p, n, "cache")] = functools.partial(generate_cached, model, prompts[p],
                                                     new_tokens=n)
    r = bench.compare(fns, warmup=1, repeats=repeats, rotate=True)
    out: dict[int, dict[int, dict]] = {}
    for p in prompt_lens:
        for n in new_tokens:
            arms = {kind: {"timing": r[(p, n, kind)]["timing"],
                           "tokens_per_s": n / r[(p, n, kind)]["timing"].median}
                    for kind in ("no cache", "cache")}
            arms["speedup"] = speedup(arms["no cache"]["timing"].samples,
                                      arms["cache"]["timing"].samples)
            out.setdefault(p, {})[n] = arms
    return out


def speculative_speed(target: DecoderLM, drafts: dict[str, DecoderLM],
                      prompts: list[torch.Tensor], *,
                      new_tokens: int, draft_lens: dict[str, tuple[int, ...]] | tuple[int, ...],
                      repeats: int = 2) -> dict:
    """Speculative decoding against the target's own cached greedy decoding (the fair baseline:
    both keep a cache), every draft at each of its draft lengths (``draft_lens``: one tuple for
    all, or one per draft) interleaved with it on each prompt (``bench.compare_over``: a
    speed-up per prompt, their geometric mean over the prompts; every arm runs once on the
    first prompt before any timing). Returns ``{"greedy_tokens_per_s": float, draft: {k:
    {"speedup", "acceptance", "alpha", "cost_ratio", "predicted", "tokens_per_target_pass",
    "identical"}}}``: acceptance is accepted ÷ proposed draft tokens over all prompts, alpha the
    per-token acceptance (``speculative.acceptance_rate``), cost_ratio the draft's time per token
    over the target's (each generating alone, interleaved with the rest), predicted Leviathan et
    al.'s speed-up from those two, ``identical`` whether every output equalled the target's
    greedy one."""
    from course_lib.generate.speculative import (acceptance_rate, generate_speculative,
                                                 predicted_speedup)
    if not prompts:
        raise ValueError("prompts must hold at least one (1, length) prompt")
    lens = draft_lens if isinstance(draft_lens, dict) else {d: tuple(draft_lens) for d in drafts}
    if set(lens) != set(drafts):
        raise ValueError(f"draft_lens must name every draft ({sorted(drafts)}), got {sorted(lens)}")
    arms = sorted((d, k) for d in drafts for k in lens[d])

    def make(prompt):
        fns = {"greedy": functools.partial(generate_cached, target, prompt, new_tokens=new_tokens)}
        for d in sorted(drafts):                             # the draft alone: its cost per pass
            fns[f"{d}|alone"] = functools.partial(generate_cached, drafts[d], prompt,
                                                  new_tokens=new_tokens)
        for d, k in arms:
            fns[f"{d}|{k}"] = functools.partial(generate_speculative, target, drafts[d], prompt,
                                                new_tokens=new_tokens, draft_len=k)
        return fns
    for fn in make(prompts[0]).values():                    # warm-up, once
        fn()
    timed = bench.compare_over(prompts, make, warmup=0, repeats=repeats, rotate=True)
    greedy = [generate_cached(target, p, new_tokens=new_tokens) for p in prompts]
    out: dict = {"greedy_tokens_per_s": new_tokens / _median(timed["greedy"]["median_s"])}
    for d, k in arms:
        proposed = accepted = passes = 0
        identical, rounds = True, []
        for prompt, want in zip(prompts, greedy):
            ids, c = generate_speculative(target, drafts[d], prompt, new_tokens=new_tokens,
                                          draft_len=k)
            identical &= torch.equal(ids, want)
            proposed, accepted, passes = (proposed + c["proposed"], accepted + c["accepted"],
                                          passes + c["target_passes"])
            rounds += c["rounds"]
        cost = 1 / timed[f"{d}|alone"]["speedup"].value      # draft time ÷ target time, per token
        alpha = acceptance_rate(rounds, k)
        out.setdefault(d, {})[k] = {"speedup": timed[f"{d}|{k}"]["speedup"],
                                    "acceptance": accepted / proposed, "alpha": alpha,
                                    "cost_ratio": cost,
                                    "predicted": predicted_speedup(alpha, k, cost),
                                    "tokens_per_target_pass": new_tokens * len(prompts) / passes,
                                    "identical": identical}
    return out


def speed_over_width(widths: tuple[int, ...], variants, *, vocab_size: int, n_layers: int = 2,
                     prompt_len: int = 32, new_tokens: int = 32, repeats: int = 5,
                     seed: int = 0) -> dict[int, dict[str, dict]]:
    """Cached greedy decoding (batch 1) of an untrained decoder of each width (``n_layers``
    layers, heads of 32, feed-forward 2 × width) in the forms ``variants(model)`` returns
    (``{name: model}``, FP32 first: the baseline), interleaved: ``{width: {name: {"timing",
    "speedup", "tokens_per_s"}}}``, the FP32 entry with ``weight_bytes`` (its parameters' bytes).
    Untrained weights time the same as trained ones."""
    from course_lib.generate.decoder import DecoderConfig
    out = {}
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab_size, (1, prompt_len), generator=g)
    for w in widths:
        torch.manual_seed(seed)
        model = DecoderLM(DecoderConfig(vocab_size=vocab_size, d_model=w, n_heads=max(1, w // 32),
                                        n_layers=n_layers, d_ff=2 * w,
                                        max_len=prompt_len + new_tokens)).eval()
        forms = variants(model)
        fns = {name: functools.partial(generate_cached, m, prompt, new_tokens=new_tokens)
               for name, m in forms.items()}
        r = bench.compare(fns, warmup=1, repeats=repeats, rotate=True)
        for v in r.values():
            v["tokens_per_s"] = new_tokens / v["timing"].median
        r[next(iter(r))]["weight_bytes"] = sum(p.numel() * p.element_size()
                                               for p in model.parameters())
        out[w] = r
    return out


def _median(xs: list[float]) -> float:
    import statistics
    return statistics.median(xs)


def batch_speed(model: DecoderLM, *, batches: tuple[int, ...], prompt_len: int, new_tokens: int,
                repeats: int = 5, seed: int = 0) -> dict[int, dict]:
    """Cached greedy decoding of ``batch`` sequences at once, for each batch size, interleaved:
    ``{batch: {"timing", "tokens_per_s" (all sequences), "per_sequence_tokens_per_s"}}``. The
    batches do different work, so no speed-up is formed between them: the throughputs are."""
    if not batches or min(batches) < 1:
        raise ValueError(f"batches must be batch sizes >= 1, got {batches}")
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (max(batches), prompt_len), generator=g)
    fns = {b: functools.partial(generate_cached, model, prompt[:b], new_tokens=new_tokens)
           for b in batches}
    r = bench.compare(fns, warmup=1, repeats=repeats, rotate=True)
    return {b: {"timing": r[b]["timing"], "tokens_per_s": new_tokens * b / r[b]["timing"].median,
                "per_sequence_tokens_per_s": new_tokens / r[b]["timing"].median} for b in batches}


@torch.inference_mode()
def pass_cost(model: DecoderLM, prompt: torch.Tensor, *, positions: int, repeats: int = 20):
    """How many times longer one cached pass over ``positions`` new tokens takes than a pass over
    one, after ``prompt`` (1, length) is in the cache: what a speculative round's checking pass
    costs against a plain decoding step (Leviathan et al.'s formula counts both as one pass).
    A ``Ratio`` from interleaved repeats (paired)."""
    from course_lib.generate.decoder import KVCache
    if not isinstance(positions, int) or positions < 1:
        raise ValueError(f"positions must be an integer >= 1, got {positions!r}")
    n = prompt.shape[1]
    cache = KVCache(model.cfg, batch=1, max_len=n + positions)
    model(prompt, cache=cache)
    new = torch.randint(0, model.cfg.vocab_size, (1, positions),
                        generator=torch.Generator().manual_seed(0))

    def step(k):
        cache.truncate(n)                       # forget the last pass's positions
        return model(new[:, :k], cache=cache)
    r = bench.compare({"many": functools.partial(step, positions),
                       "one": functools.partial(step, 1)},
                      warmup=2, repeats=repeats, rotate=True)
    return r["one"]["speedup"]                  # time(many) ÷ time(one)
