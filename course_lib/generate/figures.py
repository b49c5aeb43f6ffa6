"""Lesson 16's figures: decoding speed with and without the cache over the output length,
speculative decoding over the draft length, low-precision decoding over the width, and one
speculative run round by round (the widget)."""
from __future__ import annotations

from course_lib.measure.claims import CLAIMS
from course_lib.ui.plots import new_figure

__all__ = ["batch_figure", "cache_figure", "cache_picture", "work_grid", "gqa_figure",
           "rounds_figure", "speculative_figure", "width_figure"]


def _errors(estimates):
    return list(zip(*(e.errors for e in estimates)))


def _mark(ax, x: float, y: float, bar: float, *, you: str = "your default") -> None:
    """The learner's point ringed, the claim's bar dotted, and 1× (no change) as a line."""
    ax.plot([x], [y], "o", ms=14, mfc="none", mec="k", label=you)
    ax.axhline(bar, color="grey", ls=":", label=f"claim's bar ({bar:g}×)")
    ax.axhline(1, color="k", lw=0.8, label="1× (no change)")


def cache_figure(sweep: dict[int, dict[int, dict]], *, learner: tuple[int, int]):
    """Left: tokens/s with and without the cache over the tokens generated, one pair of lines
    per prompt length. Right: the cache's speed-up with its 95% interval and the claim's bar;
    the learner's default point ringed."""
    fig, (left, right) = new_figure(2, width=5.2, height=3.6)
    bar = CLAIMS["kv_cache_speeds_generation"].rule.threshold
    for i, (p, row) in enumerate(sorted(sweep.items())):
        ns = sorted(row)
        color = f"C{i}"
        left.plot(ns, [row[n]["cache"]["tokens_per_s"] for n in ns], "o-", color=color,
                  label=f"cache, prompt {p}")
        left.plot(ns, [row[n]["no cache"]["tokens_per_s"] for n in ns], "s--", color=color,
                  label=f"no cache, prompt {p}")
        est = [row[n]["speedup"] for n in ns]
        right.errorbar(ns, [e.value for e in est], yerr=_errors(est), fmt="o-", color=color,
                       capsize=3, label=f"prompt {p} tokens")
    p, n = learner
    _mark(right, n, sweep[p][n]["speedup"].value, bar)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens generated (batch 1)")
    left.set_yscale("log")
    left.set_ylabel("tokens / s (median)")
    left.set_title("Greedy decoding speed")
    right.set_ylabel("cache ÷ no cache (speed-up, 95% CI)")
    right.set_title("What the cache buys")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    return fig


def speculative_figure(spec: dict, *, draft_lens: tuple[int, ...], learner: tuple[str, int]):
    """Left: α, the chance the target accepts each draft token (after accepting the ones
    before it), over the draft length, per draft. Right: the measured speed-up over the
    target's cached greedy decoding with its interval, Leviathan et al.'s prediction from the
    measured α and cost ratio (dashed), and the claim's bar."""
    fig, (left, right) = new_figure(2, width=5.2, height=3.6)
    bar = CLAIMS["speculative_decoding_speeds_generation"].rule.threshold
    drafts = [d for d in spec if d != "greedy_tokens_per_s"]
    for i, d in enumerate(drafts):
        ks = [k for k in draft_lens if k in spec[d]]
        left.plot(ks, [spec[d][k]["alpha"] for k in ks], "o-", color=f"C{i}", label=d)
        est = [spec[d][k]["speedup"] for k in ks]
        right.errorbar(ks, [e.value for e in est], yerr=_errors(est), fmt="o-", color=f"C{i}",
                       capsize=3, label=f"{d}, measured")
        right.plot(ks, [spec[d][k]["predicted"] for k in ks], "--", color=f"C{i}", alpha=0.7,
                   label=f"{d}, Leviathan's formula")
    d, k = learner
    _mark(right, k, spec[d][k]["speedup"].value, bar)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(draft_lens), [str(k) for k in draft_lens])
        ax.set_xlabel("draft length k (tokens proposed per round)")
    left.set_ylim(-0.03, 1.03)
    left.set_ylabel("α: chance each draft token is accepted")
    left.set_title("How often the target agrees")
    right.set_ylabel("speed-up over greedy (95% CI)")
    right.set_title("Speculative ÷ greedy, both cached")
    left.legend(fontsize=7)
    right.legend(fontsize=7, loc="lower left")
    return fig


def width_figure(sweep: dict[int, dict[str, dict]], *, learner: int, judged: str):
    """Speed-up of each low-precision form over FP32 (cached decoding, batch 1) by width, with
    the claim's bar; ``judged``: the form the verdict is about (drawn thicker)."""
    fig, ax = new_figure(1, width=6.4, height=3.8)
    bar = CLAIMS["quantization_speeds_decoding"].rule.threshold
    widths = sorted(sweep)
    names = [n for n in sweep[widths[0]] if n != next(iter(sweep[widths[0]]))]
    for i, name in enumerate(names):
        est = [sweep[w][name]["speedup"] for w in widths]
        ax.errorbar(widths, [e.value for e in est], yerr=_errors(est), fmt="o-", capsize=3,
                    color=f"C{i}", lw=2.5 if name == judged else 1.2, label=name)
    _mark(ax, learner, sweep[learner][judged]["speedup"].value, bar, you="the course's width")
    _powers_of_two_axes(ax, widths, xlabel="width (d_model of a 2-layer decoder)",
                        ylabel="tokens/s ÷ FP32's (95% CI)",
                        title="Low precision for decoding one token at a time (CPU)")
    return fig


def rounds_figure(rounds: list[int], *, draft_len: int, title: str = ""):
    """One speculative run, round by round: the draft tokens the target accepted (of
    ``draft_len`` proposed) and the one token each round adds from the target itself."""
    fig, ax = new_figure(1, width=7.0, height=2.8)
    xs = list(range(1, len(rounds) + 1))
    ax.bar(xs, rounds, color="C2", label="draft tokens accepted")
    ax.bar(xs, [draft_len - a for a in rounds], bottom=rounds, color="C3", alpha=0.35,
           label="draft tokens rejected")
    ax.bar(xs, [1] * len(rounds), bottom=[draft_len] * len(rounds), color="C0", alpha=0.6,
           label="the target's own token")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round (one target pass each)")
    ax.set_ylabel("tokens")
    ax.set_ylim(0, draft_len + 1.8)
    ax.set_title(title or "Speculative decoding, round by round", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="upper center")
    return fig


def gqa_figure(sweep: dict[int, dict[int, object]], *, learner: tuple[int, int], draft_ratio=None):
    """Perplexity of the converted models ÷ multi-head's over the uptraining budget, one line per
    key/value-head count. Left: every budget, 0 (the conversion alone) included, on a log
    scale. Right: the uptrained budgets only, linear and close up, with the claim's bar and, for
    scale, the one-layer draft's ratio to the target."""
    fig, (left, right) = new_figure(2, width=5.2, height=3.7)
    bar = CLAIMS["gqa_keeps_quality"].rule.threshold
    budgets = sorted({s for row in sweep.values() for s in row})
    for i, (kv, row) in enumerate(sorted(sweep.items(), reverse=True)):
        label = f"{kv} key/value head{'s' if kv > 1 else ''} of 4"
        for ax, steps in ((left, sorted(row)), (right, [s for s in sorted(row) if s > 0])):
            est = [row[s] for s in steps]
            ax.errorbar(steps, [e.value for e in est], yerr=_errors(est), fmt="o-", capsize=3,
                        color=f"C{i}", label=label)
    kv, steps = learner
    _mark(right, steps, sweep[kv][steps].value, bar, you="the stored models' recipe")
    if draft_ratio is not None:
        right.axhline(draft_ratio, color="C3", ls="--", lw=1,
                      label=f"one-layer draft ÷ target ({draft_ratio:.3f}×)")
    left.set_xscale("symlog", linthresh=10)
    left.set_xticks(budgets, [str(s) for s in budgets])
    left.set_ylim(0.95, None)
    left.set_title("The conversion, then uptraining")
    up = [s for s in budgets if s > 0]
    right.set_xscale("log")
    right.set_xticks(up, [str(s) for s in up])
    right.set_xlim(min(up) / 1.4, max(up) * 1.4)
    right.set_title("Close up: uptrained")
    for ax in (left, right):
        ax.set_xlabel("uptraining steps (0: converted only)")
        ax.set_ylabel("test perplexity ÷ multi-head's (95% CI)")
        ax.legend(fontsize=7)
    return fig


def batch_figure(speed: dict[int, dict]):
    """Tokens/s of cached decoding over the batch: all sequences together, and per sequence."""
    fig, ax = new_figure(1, width=6.4, height=3.6)
    bs = sorted(speed)
    ax.plot(bs, [speed[b]["tokens_per_s"] for b in bs], "o-", label="all sequences together")
    ax.plot(bs, [speed[b]["per_sequence_tokens_per_s"] for b in bs], "s--", label="each sequence")
    ax.plot(bs, [speed[bs[0]]["tokens_per_s"] * b / bs[0] for b in bs], ":", color="grey",
            label="if a batch cost what one sequence costs")
    ax.set_yscale("log")
    _powers_of_two_axes(ax, bs, xlabel="sequences decoded together (batch)",
                        ylabel="tokens / s (median)",
                        title="Batching: one pass, many sequences (cached decoding, CPU)")
    return fig


def work_grid(prompt_len: int, new_tokens: int, *, cached: bool):
    """What each generation step does with each position: 0 nothing (not written yet), 1 its
    keys and values computed, 2 read from the cache. Rows: the steps (step s writes token s + 1
    after the prompt); columns: the positions a step can see. Without the cache step s computes
    all ``prompt_len + s`` positions; with it the first step (the prefill) computes the prompt
    and every later step computes one position and reads the rest."""
    import numpy as np
    if prompt_len < 1 or new_tokens < 1:
        raise ValueError(f"prompt_len and new_tokens must be >= 1, got {prompt_len}, {new_tokens}")
    grid = np.zeros((new_tokens, prompt_len + new_tokens - 1), dtype=int)
    for s in range(new_tokens):
        seen = prompt_len + s                     # positions the step reads
        if not cached or s == 0:
            grid[s, :seen] = 1
        else:
            grid[s, :seen - 1], grid[s, seen - 1] = 2, 1
    return grid


def cache_picture(prompt_len: int = 6, new_tokens: int = 6):
    """The idea of the cache in one picture: per step, the positions whose keys and values are
    computed (dark) or read from the cache (light), without and with the cache."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    fig, axes = new_figure(2, width=4.2, height=3.2)
    cmap = ListedColormap(["white", "#1f4e79", "#9ecae1"])
    for ax, cached in zip(axes, (False, True)):
        g = work_grid(prompt_len, new_tokens, cached=cached)
        ax.imshow(g, cmap=cmap, vmin=0, vmax=2, aspect="auto")
        ax.set_xticks(range(g.shape[1]),
                      [("p" if i < prompt_len else "t")
                       + str(i + 1 if i < prompt_len else i - prompt_len + 1)
                       for i in range(g.shape[1])], fontsize=7)
        ax.set_yticks(range(new_tokens), [f"writes t{s + 1}" for s in range(new_tokens)],
                      fontsize=7)
        ax.set_xticks([x - 0.5 for x in range(g.shape[1] + 1)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(new_tokens + 1)], minor=True)
        ax.grid(which="minor", color="grey", lw=0.5)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("position (p: prompt, t: generated)")
        ax.set_title(f"{'With' if cached else 'Without'} the cache: "
                     f"{int((g == 1).sum())} positions computed",
                     fontsize=9)
    axes[0].set_ylabel("generation step")
    axes[1].legend(handles=[Patch(color="#1f4e79", label="keys and values computed"),
                            Patch(color="#9ecae1", label="read from the cache")],
                   fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2)
    return fig


def _powers_of_two_axes(ax, xs, *, xlabel: str, ylabel: str, title: str) -> None:
    """A log2 x axis ticked at the swept values, the labels, the title and a small legend."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
