"""Greedy generation, the two ways: recompute the whole sequence for every new token, or keep
each layer's keys and values in a ``KVCache`` and compute only the new token. Both pick the
largest logit, so they must produce the same tokens (the tests check it)."""
from __future__ import annotations

import torch

from course_lib.generate.decoder import DecoderLM, KVCache


@torch.inference_mode()
def generate_uncached(model: DecoderLM, prompt: torch.Tensor, *, new_tokens: int) -> torch.Tensor:
    """``prompt`` (batch, length) followed by ``new_tokens`` greedy tokens, each step reading
    the whole sequence so far: step t costs a forward pass over ``length + t`` positions."""
    _check(model, prompt, new_tokens)
    ids = prompt
    for _ in range(new_tokens):
        nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


@torch.inference_mode()
def generate_cached(model: DecoderLM, prompt: torch.Tensor, *, new_tokens: int,
                    cache: KVCache | None = None) -> torch.Tensor:
    """The same tokens as ``generate_uncached``: the prompt once (the prefill), then one
    position per step, its keys and values appended to ``cache`` (a fresh one sized for the
    result when None)."""
    _check(model, prompt, new_tokens)
    if cache is None:
        cache = KVCache(model.cfg, batch=prompt.shape[0], max_len=prompt.shape[1] + new_tokens,
                        dtype=next(model.parameters()).dtype, device=prompt.device)
    logits = model(prompt, cache=cache)
    out = [prompt]
    for step in range(new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
        if step + 1 < new_tokens:
            logits = model(nxt, cache=cache)
    return torch.cat(out, dim=1)


def _check(model: DecoderLM, prompt: torch.Tensor, new_tokens: int) -> None:
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (batch, length) token ids with length >= 1, got shape "
                         f"{tuple(prompt.shape)}")
    if not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
    if prompt.shape[1] + new_tokens > model.cfg.max_len:
        raise ValueError(f"prompt ({prompt.shape[1]}) + new_tokens ({new_tokens}) exceeds the "
                         f"model's max_len ({model.cfg.max_len})")
