"""Speculative decoding (Leviathan et al., 2023; Chen et al., 2023): a small draft model
proposes ``draft_len`` tokens one by one, the target model checks all of them in one forward
pass, keeps the ones it accepts and adds a token of its own.

* Greedy (``temperature=None``): the target accepts the longest prefix it agrees with and adds
  its own next token: the output is exactly the target's greedy output (the tests check it).
* Sampling (``temperature=T``): the draft samples token ``x`` from its distribution ``q``; the
  target keeps it with probability ``min(1, p(x) / q(x))``, and at the first rejection samples
  its own token from the leftover ``max(0, p − q)``, normalised (after a fully accepted round,
  from ``p`` of the next position). Every output token then follows the target's own
  distribution ``p`` exactly, whatever the draft (Leviathan et al., section 2.3; a test checks
  the frequencies).

What changes is how many target passes it takes, which the returned counts say.

Both models keep a ``KVCache``. The loop's invariant: the caches hold every token but the last,
which is fed first in the next round, so no pass is ever spent on a token alone."""
from __future__ import annotations

import math

import torch

from course_lib.generate.decoder import DecoderLM, KVCache
from course_lib.generate.greedy import _check


@torch.inference_mode()
def generate_speculative(target: DecoderLM, draft: DecoderLM, prompt: torch.Tensor, *,
                         new_tokens: int, draft_len: int, temperature: float | None = None,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """``prompt`` (1, length) followed by ``new_tokens`` tokens and the counts: draft tokens
    ``proposed`` and ``accepted``, ``target_passes`` and ``draft_passes``, and ``rounds``: the
    draft tokens each round accepted, in order. Greedy (``temperature=None``): the tokens are
    identical to ``generate_uncached(target, ...)``. With a ``temperature``: each token follows
    the target's ``softmax(logits / temperature)`` (the rule of the module's docstring), drawn
    with ``generator``."""
    _check(target, prompt, new_tokens)
    if prompt.shape[0] != 1:
        raise ValueError(f"prompt must hold one sequence (batch 1: each sequence accepts its own "
                         f"number of draft tokens), got batch {prompt.shape[0]}")
    if not isinstance(draft_len, int) or draft_len < 1:
        raise ValueError(f"draft_len must be an integer >= 1, got {draft_len!r}")
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0 (or None: greedy), got {temperature!r}")
    if target.cfg.vocab_size != draft.cfg.vocab_size:
        raise ValueError(f"draft's vocab_size ({draft.cfg.vocab_size}) must equal the target's "
                         f"({target.cfg.vocab_size})")
    room = prompt.shape[1] + new_tokens + draft_len + 1   # a round may look past the end
    if room > min(target.cfg.max_len, draft.cfg.max_len):
        raise ValueError(f"prompt + new_tokens + draft_len + 1 ({room}) must fit both models' "
                         "max_len")
    dtype = next(target.parameters()).dtype
    tc = KVCache(target.cfg, batch=1, max_len=room, dtype=dtype, device=prompt.device)
    dc = KVCache(draft.cfg, batch=1, max_len=room, dtype=dtype, device=prompt.device)
    counts = {"proposed": 0, "accepted": 0, "target_passes": 0, "draft_passes": 0, "rounds": []}
    if prompt.shape[1] > 1:                                 # prefill all but the last token
        target(prompt[:, :-1], cache=tc)
        draft(prompt[:, :-1], cache=dc)
        counts["target_passes"] += 1
        counts["draft_passes"] += 1
    ids = prompt
    while ids.shape[1] < prompt.shape[1] + new_tokens:
        last, n = ids[:, -1:], ids.shape[1]
        proposal, qs, nxt = [], [], last
        for _ in range(draft_len):                          # the draft, one token at a time
            logits = draft(nxt, cache=dc)[:, -1]
            if temperature is None:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                qs.append(torch.softmax(logits[0].float() / temperature, -1))
                nxt = torch.multinomial(qs[-1], 1, generator=generator)[None]
            proposal.append(nxt)
            counts["draft_passes"] += 1
        proposal = torch.cat(proposal, dim=1)               # (1, draft_len)
        logits = target(torch.cat([last, proposal], dim=1), cache=tc)[0]   # (draft_len + 1, vocab)
        counts["target_passes"] += 1
        if temperature is None:
            check = logits.argmax(-1)
            # longest agreeing prefix
            accepted = int((proposal[0] == check[:-1]).long().cumprod(0).sum())
            own = check[accepted:accepted + 1]
        else:
            accepted, own = _accept_sampled(torch.softmax(logits.float() / temperature, -1), qs,
                                            proposal[0], generator)
        counts["proposed"] += draft_len
        counts["accepted"] += accepted
        counts["rounds"].append(accepted)
        ids = torch.cat([ids, proposal[:, :accepted], own[None]], dim=1)
        tc.truncate(n + accepted)                           # keep: the old tokens and those
                                                            # accepted
        if accepted == draft_len:                           # the draft never read its last proposal
            draft(proposal[:, -1:], cache=dc)
            counts["draft_passes"] += 1
        dc.truncate(n + accepted)
    return ids[:, :prompt.shape[1] + new_tokens], counts


def _accept_sampled(p: torch.Tensor, qs: list[torch.Tensor], proposal: torch.Tensor,
                    generator: torch.Generator | None) -> tuple[int, torch.Tensor]:
    """Leviathan et al.'s rule for one round: ``p`` (draft_len + 1, vocab) the target's
    distributions, ``qs`` the draft's, ``proposal`` (draft_len,) its tokens. Returns how many
    were accepted and the target's own token (1,)."""
    for i, x in enumerate(proposal.tolist()):
        keep = min(1.0, float(p[i, x]) / float(qs[i][x]))
        if float(torch.rand(1, generator=generator)) >= keep:          # rejected: resample
            leftover = (p[i] - qs[i]).clamp(min=0)
            dist = leftover / leftover.sum() if float(leftover.sum()) > 0 else p[i]
            return i, torch.multinomial(dist, 1, generator=generator)
    return len(qs), torch.multinomial(p[len(qs)], 1, generator=generator)   # all kept: one more


def acceptance_rate(rounds: list[int], draft_len: int) -> float:
    """Leviathan et al.'s α, estimated from the rounds of a run: the chance that the target
    accepts a draft token given that it accepted the ones before it. Every accepted token is
    a success; a round that stopped short of ``draft_len`` adds one failure (tokens after the
    first rejection were never tested)."""
    if not rounds:
        raise ValueError("rounds must hold at least one round")
    accepted = sum(rounds)
    failures = sum(1 for a in rounds if a < draft_len)
    return accepted / (accepted + failures) if accepted + failures else 0.0


def predicted_speedup(alpha: float, draft_len: int, cost_ratio: float) -> float:
    """Leviathan et al.'s expected walltime improvement (their Theorem 3.8):
    ``(1 − α^(k+1)) / ((1 − α)(k·c + 1))`` for draft length ``k`` and ``c``, the time of a draft
    pass over the time of a target pass: expected tokens per round over the round's cost in
    target passes (assuming a target pass over k + 1 positions costs one pass over one)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not isinstance(draft_len, int) or draft_len < 1:
        raise ValueError(f"draft_len must be an integer >= 1, got {draft_len!r}")
    if not cost_ratio >= 0:
        raise ValueError(f"cost_ratio must be >= 0, got {cost_ratio}")
    tokens = draft_len + 1 if alpha == 1 else (1 - alpha ** (draft_len + 1)) / (1 - alpha)
    return tokens / (draft_len * cost_ratio + 1)


@torch.inference_mode()
def sampled_next_token(target: DecoderLM, draft: DecoderLM, context: torch.Tensor, *, samples: int,
                       draft_len: int, temperature: float = 1.0, seed: int = 0,
                       progress: bool = False) -> dict:
    """The check that speculative sampling keeps the target's distribution: the next token after
    ``context`` (1, length) drawn ``samples`` times by ``generate_speculative`` with ``draft``
    proposing, against the target's and the draft's own probabilities there. Returns ``target``
    and ``draft`` (probabilities), ``frequencies``, the total variation distances
    ``tv_sampled`` (frequencies to target) and ``tv_draft`` (draft to target), and
    ``tv_expected``: what ``samples`` draws from the target itself would show by chance (the
    normal approximation, ``Σ sqrt(p(1 − p) / n) · sqrt(2 / π) / 2``)."""
    from course_lib.core.progress import tqdm
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    p = torch.softmax(target(context)[0, -1].float() / temperature, -1)
    q = torch.softmax(draft(context)[0, -1].float() / temperature, -1)
    g = torch.Generator().manual_seed(seed)
    seen = torch.zeros_like(p)
    for _ in tqdm(range(samples), desc="speculative samples", disable=not progress):
        ids, _ = generate_speculative(target, draft, context, new_tokens=1, draft_len=draft_len,
                                      temperature=temperature, generator=g)
        seen[ids[0, -1]] += 1
    freq = seen / samples
    tv = lambda a, b: float((a - b).abs().sum() / 2)   # noqa: E731
    return {"target": p, "draft": q, "frequencies": freq, "tv_sampled": tv(freq, p),
            "tv_draft": tv(q, p),
            "tv_expected": float((p * (1 - p) / samples).sqrt().sum()) * math.sqrt(2 / math.pi) / 2}
