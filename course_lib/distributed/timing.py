"""Step times of one process and of DDP, interleaved in rounds (lesson 08).

A DDP job is a separate set of processes, so it cannot share a timing loop with the notebook's
own process. The next best thing: rounds, each running every configuration once (the order
rotated from round to round), so that a slow spell of the machine hits all of them alike; a
speed-up is then the geometric mean over rounds of the per-round ratio, with its standard error
(``rounds - 1`` degrees of freedom). All configurations train the same model on the same global
batch for the same steps; only how the work is spread differs.

Whether a rank added pays depends on the work per step: each rank computes on its own batch
while what a step costs beyond that (the all-reduce of the whole gradient, the processes' own
overheads) does not shrink with it, so ``step_times_over_batch``
repeats the comparison over the batch per rank, and ``predicted_speedup`` is what the lesson's
scaling model expects at each point from the one-thread time and the all-reduce's.
"""
from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import replace

__all__ = ["SPEED_ARGS", "SPEED_BATCHES", "step_times_over_batch",
           "speedups", "predicted_speedup", "run", "from_evidence", "speed_figure"]

# The lesson's timed run at its defaults (lesson 08's TIMING_ARGS without the batch), and the
# batches per rank the evidence sweeps (the lesson's own are among them).
SPEED_ARGS = ("--optimizer", "sgd", "--lr", "0.3", "--grad-clip", "100", "--task", "easy",
              "--d-model", "64", "--n-layers", "2", "--steps", "12")
SPEED_BATCHES = (2, 4, 8, 16, 32, 64)


def step_times_over_batch(worker_args: Sequence[str], batches: Sequence[int], *, nproc: int,
                          cores: int, rounds: int, timeout: float = 300.0,
                          launch: Callable | None = None,
                          train: Callable | None = None) -> dict[int, dict[str, list[float]]]:
    """``{b: {configuration: [median step seconds of each round]}}`` at each batch per rank
    ``b`` of ``batches`` (smallest first), for one process with one thread, one process with
    ``cores`` threads (both on batch ``nproc x b``) and DDP on ``nproc`` ranks of batch ``b``
    each, one thread per rank (gloo): with ``nproc <= cores`` every rank has a core of its own.
    ``launch`` and ``train`` default to ``distributed.launch.launch`` and
    ``distributed.ddp.run_training`` (tests pass fakes). In a round each configuration runs
    every batch in turn, DDP in one launch (the worker's ``--batches``), so the sweep pays the
    processes' start once per round, not once per batch."""
    from course_lib.distributed.launch import launch as default_launch
    from course_lib.distributed.ddp import parse_args, run_training

    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 (a standard error needs two), got {rounds}")
    if nproc < 2 or cores < 1:
        raise ValueError(f"nproc must be >= 2 and cores >= 1, got nproc={nproc}, cores={cores}")
    if not batches or any(int(b) < 1 for b in batches):
        raise ValueError(f"batches must be positive batch sizes per rank, got {list(batches)}")
    launch, train = launch or default_launch, train or run_training
    bs = sorted({int(b) for b in batches})
    args = [str(a) for a in worker_args]
    cfg = parse_args(args)[0]

    def quiet(threads):   # the worker logs its steps; here only the step time matters
        with contextlib.redirect_stdout(io.StringIO()):
            return [train(replace(cfg, batch_size=b * nproc, threads=threads))["median_step_s"]
                    for b in bs]

    def ddp():            # JSON turned the worker's keys into strings
        sweep = launch(["--mode", "train", "--backend", "gloo", *args,
                        "--batches", ",".join(map(str, bs))],
                       nproc=nproc, timeout=timeout, threads=1, echo=False)["sweep"]
        return [sweep[str(b)] for b in bs]
    configs = {"1 process, 1 thread": lambda: quiet(1),
               f"1 process, {cores} threads": lambda: quiet(cores),
               f"DDP, {nproc} ranks": ddp}
    names = list(configs)
    out: dict[int, dict[str, list[float]]] = {b: {k: [] for k in names} for b in bs}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for b, t in zip(bs, configs[name]()):
                out[b][name].append(t)
    return out


def speedups(times: dict[str, list[float]]) -> dict[str, object]:
    """The three speed-ups of one batch of ``step_times_over_batch`` (each the course's
    ``verdicts.speedup``, paired by round): ``"ddp"``, DDP over one process on one thread (a
    core per rank against one core: what a rank added buys); ``"threads"``, one process on every
    core over one thread; ``"ddp_vs_threads"``, DDP over that every-core process (two ways to
    spend the same cores)."""
    from course_lib.measure.verdicts import speedup

    one, many, ddp = times.values()   # the order step_times_over_batch builds
    return {"ddp": speedup(one, ddp), "threads": speedup(one, many),
            "ddp_vs_threads": speedup(many, ddp)}


def predicted_speedup(one_thread_s: float, *, nproc: int, comm_s: float) -> float:
    """The scaling model's speed-up of ``nproc`` ranks, a core each, over one core: each rank
    computes ``1/nproc`` of the one-thread step, then all-reduces for ``comm_s`` (no overlap):
    ``t1 / (t1 / nproc + comm)``."""
    if one_thread_s <= 0 or nproc < 1 or comm_s < 0:
        raise ValueError(f"one_thread_s must be > 0, nproc >= 1 and comm_s >= 0, got "
                         f"{one_thread_s}, {nproc}, {comm_s}")
    return one_thread_s / (one_thread_s / nproc + comm_s)


def run(*, rounds: int = 10, batches: Sequence[int] = SPEED_BATCHES, nproc: int = 2,
        args: Sequence[str] = SPEED_ARGS) -> dict:
    """The lesson's step-time sweep with rounds enough to decide (``python -m
    course_lib.tools.evidence ddp_speed``): ``step_times_over_batch`` over ``batches``, the
    all-reduce's times at the worker demo's sizes (and its bus bandwidth on the largest), and
    the model's parameter count (what each step all-reduces)."""
    import os

    from course_lib.core.vocab import build_vocab
    from course_lib.distributed.ddp import parse_args
    from course_lib.distributed.launch import launch
    from course_lib.distributed.setup import worker_model

    args = [str(a) for a in args]
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    demo = launch(["--mode", "allreduce", "--backend", "gloo", *args], nproc=nproc, threads=1,
                  echo=False)["allreduce"]["timings"]
    bandwidth = 2 * (nproc - 1) / nproc * demo[-1]["bytes"] / demo[-1]["seconds"]
    model = worker_model(parse_args(args)[0], len(build_vocab()))
    sweep = step_times_over_batch(args, batches, nproc=nproc, cores=cores, rounds=rounds)
    return {"recipe": {"args": args, "batches": sorted(sweep), "nproc": nproc, "cores": cores,
                       "rounds": rounds},
            "bandwidth": bandwidth, "allreduce": demo,
            "n_params": sum(p.numel() for p in model.parameters()),
            "times": {str(b): t for b, t in sweep.items()}}


def from_evidence(evidence: dict) -> dict:
    """The ``ddp_speed`` evidence reduced: ``"sweep"`` {batch per rank: {configuration:
    [seconds]}}, ``"ups"`` {b: ``speedups``}, ``"predicted"`` {b: ``predicted_speedup`` from
    the evidence's own one-thread time and the all-reduce of the gradient's size, read off the
    measured sizes: ``launch.allreduce_seconds_at``}, ``"comm_s"``, and the recipe's
    ``"nproc"``, ``"cores"``, ``"rounds"``, ``"args"``."""
    import statistics

    from course_lib.distributed.launch import allreduce_seconds_at, ring_allreduce_seconds

    r = evidence["recipe"]
    sweep = {int(b): t for b, t in evidence["times"].items()}
    grad_bytes = 4 * evidence["n_params"]
    comm = (allreduce_seconds_at(evidence["allreduce"], grad_bytes) if "allreduce" in evidence
            else ring_allreduce_seconds(grad_bytes, ranks=r["nproc"],
                                        bandwidth=evidence["bandwidth"]))
    return {"sweep": sweep, "ups": {b: speedups(t) for b, t in sweep.items()},
            "predicted": {b: predicted_speedup(statistics.median(next(iter(t.values()))),
                                               nproc=r["nproc"], comm_s=comm)
                          for b, t in sweep.items()},
            "comm_s": comm, "nproc": r["nproc"], "cores": r["cores"], "rounds": r["rounds"],
            "args": r["args"]}


def speed_figure(evidence: dict, live: dict[int, dict[str, list[float]]], *, ddp_verdict,
                 learner: int, threshold: float, device: str, evidence_device: str):
    """Left: this run's median step time of each configuration over the batch per rank
    (log-log). Right: the evidence's speed-ups over one thread (``from_evidence``) with their
    95% intervals, DDP's coloured by its verdict (``ddp_verdict``, or None where it is not
    judged), the scaling model's prediction, this run's speed-ups as open markers (one
    replicate), the claim's bar and the learner's batch."""
    import statistics

    from matplotlib.ticker import NullLocator

    from course_lib.ui.plots import new_figure

    lbs, ebs = sorted(live), sorted(evidence["sweep"])
    names = list(live[lbs[0]])
    colors = ("#555555", "#DD8452", "#4C72B0")   # one thread, every core, DDP: both panels
    fig, (ax, ax2) = new_figure(2, width=5.2, height=3.9)
    for name, style, c in zip(names, ("o-", "s--", "D-"), colors):
        ax.loglog(lbs, [statistics.median(live[b][name]) * 1e3 for b in lbs], style, color=c,
                  label=name)
    ax.set_ylabel(f"median step time (ms, {device})")
    ax.set_title("This run: the same global batch, three ways", fontsize=10)
    ax.legend(frameon=False, fontsize=7)
    color = {"holds": "#55A868", "fails": "#C44E52", "inconclusive": "#8C8C8C"}
    outcome = {p.at: p.outcome for p in ddp_verdict.points} if ddp_verdict else {}
    ups, mine = evidence["ups"], {b: speedups(live[b]) for b in lbs}
    for key, label, marker, line, shift in (("ddp", names[2], "D", colors[2], 1.0),
                                            ("threads", names[1], "s", colors[1], 1.07)):
        ys = [ups[b][key].value for b in ebs]      # threads drawn a little to the right
        ax2.plot([b * shift for b in ebs], ys, "-", lw=1, color=line)
        for b, y in zip(ebs, ys):
            lo, hi = ups[b][key].interval
            c = color.get(outcome.get(float(b)), line) if key == "ddp" else line
            ax2.errorbar([b * shift], [y], yerr=[[y - lo], [hi - y]], fmt=marker, color=c,
                         capsize=3)
        ax2.plot([b * shift for b in lbs], [mine[b][key].value for b in lbs], marker, ms=8,
                 mfc="none", mec=line)
        ax2.plot([], [], marker + "-", color=line, label=label)
    if ddp_verdict:   # DDP's markers take their verdict's colour
        for outcome_name in dict.fromkeys(p.outcome for p in ddp_verdict.points):
            ax2.plot([], [], "D", color=color[outcome_name], label=f"DDP: {outcome_name}")
    ax2.plot([], [], "D", mfc="none", mec="k", label="this run (one replicate)")
    ax2.plot(ebs, [evidence["predicted"][b] for b in ebs], "k:", lw=1.5, label="scaling model, DDP")
    ax2.axhline(threshold, ls="--", color="k", lw=1)
    ax2.axhline(1.0, ls=":", color="#8C8C8C", lw=1)
    ax2.annotate(f"claim: ≥ {threshold:g}×", (ebs[-1], threshold), textcoords="offset points",
                 xytext=(0, -12), ha="right", fontsize=8)
    ax2.axvline(learner, color="k", lw=0.8, ls="-.", label="your default batch")
    ax2.set_xscale("log")
    ax2.set_ylabel("speed-up over one thread (×)")
    ax2.set_title(f"Evidence: {evidence['rounds']} rounds, {evidence_device}", fontsize=10)
    ax2.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for a, bs in ((ax, lbs), (ax2, ebs)):
        a.set_xlabel("batch per rank (sequences; one process: ranks × this)")
        a.set_xticks(bs, [f"{b:,}" for b in bs])
        a.xaxis.set_minor_locator(NullLocator())
    return fig
