"""Run a lesson with papermill, and get through a kernel reply that never comes.

nbclient sometimes waits for an ``execute_reply`` the kernel never sends (nbclient issue 312;
seen here about once in 30-40 lesson runs, on widget cells): the kernel is idle, the client
waits, and only the cell timeout (minutes) ends it. ``StallAwareClient`` watches for the moment
the kernel reports the cell finished (its ``idle`` status on IOPub); if no reply follows within
``stall_grace`` seconds it raises ``KernelStall``. ``execute_notebook`` then runs the notebook
once more from the start, saying so, so a lost message costs seconds instead of a red CI run.
A cell that is merely slow is unaffected: the kernel is busy, not idle.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from traitlets import Float

ENGINE = "course-stall-aware"

__all__ = ["KernelStall", "execute_notebook", "ENGINE"]


class KernelStall(RuntimeError):
    """The kernel finished a cell (idle) but its reply never reached the client."""


def _client_class():
    from papermill.clientwrap import PapermillNotebookClient

    class StallAwareClient(PapermillNotebookClient):
        stall_grace = Float(20.0, help="seconds to wait for the reply once the kernel is idle"
                            ).tag(config=True)

        def _reply_future(self, msg_id, cell, timeout, output_done, kernel_alive):
            return asyncio.ensure_future(super()._async_poll_for_reply(
                msg_id, cell, timeout, output_done, kernel_alive))

        async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg,
                                        task_poll_kernel_alive):
            reply = self._reply_future(msg_id, cell, timeout, task_poll_output_msg,
                                       task_poll_kernel_alive)
            done, _ = await asyncio.wait({reply, task_poll_output_msg},
                                         return_when=asyncio.FIRST_COMPLETED)
            if reply not in done:   # the kernel said idle: the reply is due now
                try:
                    return await asyncio.wait_for(asyncio.shield(reply), self.stall_grace)
                except asyncio.TimeoutError:
                    reply.cancel()
                    task_poll_kernel_alive.cancel()
                    first_line = (cell.source.splitlines() or [""])[0][:60]
                    raise KernelStall(f"the kernel finished a cell ({first_line!r}) but its "
                                      f"reply did not arrive within {self.stall_grace:g} s"
                                      ) from None
            return reply.result()

    return StallAwareClient


CLIENT_FACTORY: Callable[[], type] = _client_class   # tests swap in a client that drops a reply


def _register() -> None:
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.utils import merge_kwargs, remove_args

    class StallAwareEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False,
                                     stdout_file=None, stderr_file=None, start_timeout=60,
                                     execution_timeout=None, **kwargs):
            # papermill's NBClientEngine, with the stall-aware client
            kwargs = remove_args(["input_path"], **kwargs)
            safe = remove_args(["timeout", "startup_timeout"], **kwargs)
            final = merge_kwargs(safe, timeout=execution_timeout or kwargs.get("timeout"),
                                 startup_timeout=start_timeout, kernel_name=kernel_name,
                                 log_output=log_output, stdout_file=stdout_file,
                                 stderr_file=stderr_file)
            return CLIENT_FACTORY()(nb_man, **final).execute()

    papermill_engines.register(ENGINE, StallAwareEngine)


def execute_notebook(nb_path: str | Path, out_path: str | Path, *, parameters: dict | None = None,
                     cwd: str | Path | None = None, cell_timeout: int = 300,
                     stall_grace: float = 20.0, retries: int = 1,
                     log: Callable[[str], None] = print) -> int:
    """Execute ``nb_path`` into ``out_path`` with papermill; returns how many kernel stalls it
    got through (each one reran the notebook). Cell errors raise as papermill raises them."""
    import papermill as pm

    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if not stall_grace > 0:
        raise ValueError(f"stall_grace must be > 0 seconds, got {stall_grace}")
    _register()
    for attempt in range(retries + 1):
        try:
            pm.execute_notebook(str(nb_path), str(out_path), parameters=parameters or {},
                                kernel_name="python3", cwd=str(cwd) if cwd else None,
                                progress_bar=False, execution_timeout=cell_timeout,
                                engine_name=ENGINE, stall_grace=stall_grace)
            return attempt
        except KernelStall as err:
            more = attempt < retries
            log(f"{Path(nb_path).name}: kernel stall: {err}; "
                + ("running the notebook once more." if more else "no retries left."))
            if not more:
                raise
    raise AssertionError("unreachable")
