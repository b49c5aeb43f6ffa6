"""Step times of one process and of DDP, interleaved in rounds (lesson 08).

A DDP job is a separate set of processes, so it cannot share a timing loop with the notebook's
own process. The next best thing: rounds, each running every configuration once (the order
rotated from round to round), so that a slow spell of the machine hits all of them alike; a
speed-up is then the mean over rounds of the per-round ratio, with its standard error
(``rounds - 1`` degrees of freedom). All configurations train the same model on the same global
batch for the same steps; only how the work is spread differs.
"""
from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from dataclasses import replace


__all__ = ["interleaved_step_times"]


def interleaved_step_times(worker_args: Sequence[str], *, nproc: int, cores: int, rounds: int,
                           timeout: float = 300.0, launch: Callable | None = None,
                           train: Callable | None = None) -> dict[str, list[float]]:
    """``{configuration: [median step seconds of each round]}`` for one process with one
    thread, one process with ``cores`` threads (both on batch ``nproc x b``) and DDP on
    ``nproc`` ranks of batch ``b`` each (gloo, cores shared). ``launch`` and ``train`` default to
    ``distributed.launch.launch`` and ``distributed.ddp.run_training`` (tests pass fakes)."""
    from course_lib.distributed.launch import launch as default_launch
    from course_lib.distributed.ddp import parse_args, run_training

    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 (a standard error needs two), got {rounds}")
    if nproc < 2 or cores < 1:
        raise ValueError(f"nproc must be >= 2 and cores >= 1, got nproc={nproc}, cores={cores}")
    launch, train = launch or default_launch, train or run_training
    args = [str(a) for a in worker_args]
    cfg = parse_args(args)[0]
    big = replace(cfg, batch_size=cfg.batch_size * nproc)

    def quiet(c):   # the worker logs its steps; here only the step time matters
        with contextlib.redirect_stdout(io.StringIO()):
            return train(c)["median_step_s"]
    configs = {
        "1 process, 1 thread": lambda: quiet(replace(big, threads=1)),
        f"1 process, {cores} threads": lambda: quiet(replace(big, threads=cores)),
        f"DDP, {nproc} ranks": lambda: launch(["--mode", "train", "--backend", "gloo", *args],
                                              nproc=nproc, timeout=timeout,
                                              echo=False)["median_step_s"],
    }
    names = list(configs)
    out: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            out[name].append(configs[name]())
    return out

