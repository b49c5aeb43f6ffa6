"""Start torchrun from a notebook, and a cost model of data-parallel scaling (lesson 08).

``launch`` runs ``python -m torch.distributed.run ... -m course_lib.distributed.ddp`` as a
subprocess, streams its output into the cell line by line, enforces a timeout (killing the
whole process group: never a hang), and returns rank 0's results. When a worker fails it
raises ``DistributedRunError`` naming the rank and what it said. The worker lives in a module,
not in the notebook: spawned processes import the function by name, and a function defined in
a notebook (``__main__``) cannot be found there.

``scaling_model`` follows the standard alpha-beta cost model of ring all-reduce (Patarasuk &
Yuan 2009; Thakur et al. 2005): each rank sends and receives ``2 (N-1)/N`` times the gradient
bytes, plus ``2 (N-1)`` latency hops; compute is ``6 x params x tokens`` FLOPs per step
(Kaplan et al. 2020) at a stated sustained FLOP/s.
"""
from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import torch

WORKER = "course_lib.distributed.ddp"


class DistributedRunError(RuntimeError):
    """A torchrun job failed or timed out; ``rank`` is the failing rank (None if unknown).
    ``transient``: torchrun ended on its own before any rank reported an error (a process
    killed by a signal during start-up, a lost rendezvous): worth one more launch."""

    def __init__(self, message: str, *, rank: int | None = None, output: str = "",
                 transient: bool = False):
        super().__init__(message)
        self.rank, self.output, self.transient = rank, output, transient


def torchrun_command(worker_args: Sequence[str] = (), *, nproc: int = 2, nnodes: int = 1,
                     node_rank: int = 0, rdzv_endpoint: str | None = None,
                     rdzv_id: str = "course", module: str = WORKER,
                     as_torchrun: bool = False) -> list[str]:
    """The torchrun command line: ``--standalone`` on one node, c10d rendezvous on several.
    It starts with this interpreter (``python -m torch.distributed.run``, what ``launch``
    runs); ``as_torchrun=True`` starts it with ``torchrun``, the same program as it is typed
    on another machine."""
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise ValueError(f"nnodes must be >= 1 and node_rank in [0, nnodes - 1], "
                         f"got nnodes={nnodes}, node_rank={node_rank}")
    if nnodes > 1 and not rdzv_endpoint:
        raise ValueError("rdzv_endpoint (HOST:PORT of node 0) is required when nnodes > 1")
    cmd = ["torchrun"] if as_torchrun else [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd += ["--standalone"]   # a local rendezvous on a free port
    else:
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(node_rank), "--rdzv_backend",
                "c10d", "--rdzv_endpoint", rdzv_endpoint, "--rdzv_id", rdzv_id]
    return cmd + ["--nproc_per_node", str(nproc), "-m", module, *map(str, worker_args)]


def _reader(stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _kill(proc: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.terminate()
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        if proc.poll() is None:
            (os.killpg(proc.pid, signal.SIGKILL) if hasattr(os, "killpg") else proc.kill())
            proc.wait(timeout=5)


def _failure(out: Path, rc: int, tail: list[str]) -> DistributedRunError:
    errors = [json.loads(p.read_text()) for p in out.parent.glob(out.stem + ".rank*.error.json")]
    text = "\n".join(tail)
    if errors:   # the first rank to fail is the cause; the others lost their peer
        first = min(errors, key=lambda e: e["time"])
        tb = "\n".join(first["traceback"].strip().splitlines()[-6:])
        return DistributedRunError(f"rank {first['rank']} failed: {first['type']}: "
                                   f"{first['message']}\n{tb}", rank=first["rank"], output=text)
    return DistributedRunError(f"torchrun exited with code {rc} before any rank reported an "
                               f"error; last output:\n" + "\n".join(tail[-15:]), output=text,
                               transient=True)


def launch(worker_args: Sequence[str] = (), *, nproc: int = 2, timeout: float = 120.0,
           echo: bool = True, threads: int | None = None, env: dict | None = None,
           retries: int = 1, **rendezvous) -> dict:
    """Run the DDP worker on ``nproc`` processes; return rank 0's results.

    ``worker_args`` are ``course_lib.distributed.ddp`` options (``["--steps", 10]``). Output is
    printed as it arrives when ``echo``. ``threads`` per process defaults to cores / nproc.
    ``rendezvous``: ``nnodes``, ``node_rank``, ``rdzv_endpoint``, ``rdzv_id`` for several
    nodes. The result holds ``params`` (a flat tensor, when training) and ``launch_s``
    (wall time including process start). A transient failure (see ``DistributedRunError``)
    launches the job again, up to ``retries`` times, saying so; a rank's own error or a
    timeout is raised at once.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    for attempt in range(retries + 1):
        try:
            return _launch_once(worker_args, nproc=nproc, timeout=timeout, echo=echo,
                                threads=threads, env=env, **rendezvous)
        except DistributedRunError as err:
            if not err.transient or attempt == retries:
                raise
            print(f"torchrun failed before any rank reported an error ({str(err).splitlines()[0]});"
                  f" launching it once more", flush=True)
    raise AssertionError("unreachable")


def _launch_once(worker_args: Sequence[str], *, nproc: int, timeout: float, echo: bool,
                 threads: int | None, env: dict | None, **rendezvous) -> dict:
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if rendezvous.get("module", WORKER) == WORKER:
        from course_lib.distributed.ddp import parse_args
        parse_args([str(a) for a in worker_args])   # bad options fail here, before any process
    if threads is not None:
        worker_args = [*worker_args, "--threads", threads]
    # Everything a run writes (rank 0's results, the weights, torchrun's own torchelastic_*
    # folders, via TMPDIR) goes in one temporary folder, removed when the run ends.
    with tempfile.TemporaryDirectory(prefix="course_ddp_", ignore_cleanup_errors=True) as tmp:
        return _run_in(Path(tmp), worker_args, nproc=nproc, timeout=timeout, echo=echo,
                       threads=threads, env=env, **rendezvous)


def _run_in(workdir: Path, worker_args: Sequence[str], *, nproc: int, timeout: float,
            echo: bool, threads: int | None, env: dict | None, **rendezvous) -> dict:
    out = workdir / "result.json"
    cmd = torchrun_command([*worker_args, "--out", out], nproc=nproc, **rendezvous)
    root = str(Path(__file__).resolve().parents[1])
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "TMPDIR": str(workdir),
                "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
                "OMP_NUM_THREADS": str(threads or max(1, (os.cpu_count() or 1) // nproc))}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, env=full_env, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    tail: deque[str] = deque(maxlen=200)
    deadline = t0 + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.perf_counter()))
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            tail.append(line)
            if echo:
                print(line, flush=True)
        if time.perf_counter() > deadline:
            _kill(proc)
            raise DistributedRunError(f"torchrun did not finish within {timeout:.0f} s and was "
                                      "killed; last output:\n" + "\n".join(list(tail)[-15:]),
                                      output="\n".join(tail))
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise DistributedRunError(f"torchrun closed its output but did not exit within "
                                  f"{timeout:.0f} s; killed", output="\n".join(tail)) from None
    if rc != 0 or not out.exists():
        raise _failure(out, rc, list(tail))
    result = json.loads(out.read_text())
    params = out.with_suffix(".params.pt")
    if params.exists():
        result["params"] = torch.load(params, weights_only=True)
    result["launch_s"] = time.perf_counter() - t0
    return result


def ring_allreduce_seconds(n_bytes: float, *, ranks: int, bandwidth: float,
                           latency: float = 0.0) -> float:
    """Ring all-reduce time: ``2 (N-1)/N * bytes / bandwidth + 2 (N-1) * latency``.

    ``bandwidth`` in bytes/s per link, ``latency`` in seconds per hop; 0 for one rank.
    """
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if bandwidth <= 0 or n_bytes < 0 or latency < 0:
        raise ValueError("bandwidth must be > 0, n_bytes and latency >= 0")
    return 2 * (ranks - 1) / ranks * n_bytes / bandwidth + 2 * (ranks - 1) * latency


def allreduce_seconds_at(timings: Sequence[dict], n_bytes: float) -> float:
    """The time of one all-reduce of ``n_bytes``, read off measured ``timings`` (the worker's
    ``allreduce_demo``: ``{"bytes", "seconds"}`` per size) by interpolating on log-log axes.
    Small messages cost latency, not bytes ÷ bandwidth, so a gradient of a few hundred KiB is
    priced by the sizes measured around it; below the smallest size it costs the smallest's
    time, above the largest the largest's plus the extra bytes at the largest's bandwidth."""
    pts = sorted((float(t["bytes"]), float(t["seconds"])) for t in timings)
    if not pts or n_bytes < 0 or any(b <= 0 or s <= 0 for b, s in pts):
        raise ValueError("timings must hold positive bytes and seconds, and n_bytes be >= 0")
    if n_bytes <= pts[0][0]:
        return pts[0][1]
    for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
        if n_bytes <= b1:
            w = math.log(n_bytes / b0) / math.log(b1 / b0)
            return math.exp((1 - w) * math.log(s0) + w * math.log(s1))
    b, s = pts[-1]
    return s + (n_bytes - b) * s / b


def scaling_model(*, params: float, ranks: int, bandwidth: float, tokens_per_rank: float,
                  flops: float, latency: float = 5e-6, bytes_per_grad: int = 4,
                  overlap: float = 0.0) -> dict[str, float]:
    """Step time and speedup of N data-parallel ranks (each with the same per-rank batch).

    Assumptions: compute ``6 * params * tokens_per_rank / flops`` seconds per step on every
    rank; fp32 gradients (``bytes_per_grad``) all-reduced by a ring at ``bandwidth`` bytes/s;
    a fraction ``overlap`` in [0, 1] of the communication hidden behind backward (DDP's
    gradient buckets), never more than the backward pass itself (2/3 of compute). Speedup =
    throughput of N ranks / throughput of one.
    """
    if params <= 0 or tokens_per_rank <= 0 or flops <= 0:
        raise ValueError("params, tokens_per_rank and flops must be > 0")
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be in [0, 1], got {overlap}")
    compute = 6.0 * params * tokens_per_rank / flops
    comm = ring_allreduce_seconds(params * bytes_per_grad, ranks=ranks, bandwidth=bandwidth,
                                  latency=latency)
    hidden = min(overlap * comm, 2.0 / 3.0 * compute)   # at most the backward pass (2/3)
    step = compute + comm - hidden
    speedup = ranks * compute / step
    return {"compute_s": compute, "allreduce_s": comm, "step_s": step, "speedup": speedup,
            "efficiency": speedup / ranks}
