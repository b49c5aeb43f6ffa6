"""Run a lesson with papermill, and get through a kernel reply that the client misses.

nbclient sometimes waits for an ``execute_reply`` that has already arrived (nbclient issue
312): the kernel is idle, the reply sits in the shell socket (``zmq.EVENTS`` says readable),
but the asyncio poll that should wake the client never fires, so only the cell timeout
(minutes) ends the wait. Here it hit lesson 07's widget cell in 3 of 4 smoke runs (many widget
messages on IOPub at the moment the reply lands). ``StallAwareClient`` watches for the moment
the kernel reports the cell finished (its ``idle`` status on IOPub); if the reply has not come
``poll_interval`` seconds later it reads the shell socket directly, which finds a reply whose
wake-up was missed. If nothing arrives within ``stall_grace`` seconds the reply is truly lost:
it raises ``KernelStall`` and ``execute_notebook`` runs the notebook once more from the start,
saying so. A cell that is merely slow is unaffected: the kernel is busy, not idle.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import zmq
from jupyter_core.utils import ensure_async
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
        poll_interval = Float(0.5, help="seconds between direct reads of the shell socket"
                              ).tag(config=True)

        def _reply_future(self, msg_id, cell, timeout, output_done, kernel_alive):
            return asyncio.ensure_future(super()._async_poll_for_reply(
                msg_id, cell, timeout, output_done, kernel_alive))

        async def _read_missed_reply(self, msg_id, reply):
            """Wait up to ``stall_grace`` for ``reply``; whenever the shell socket holds a
            message that ``reply`` did not wake up for, stop ``reply`` and read the socket
            here instead. Returns the reply message, or None when nothing came."""
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.stall_grace
            shell = self.kc.shell_channel
            while (left := deadline - loop.time()) > 0:
                if reply.cancelled():
                    await asyncio.sleep(min(self.poll_interval, left))
                else:
                    try:
                        return await asyncio.wait_for(asyncio.shield(reply),
                                                      min(self.poll_interval, left))
                    except asyncio.TimeoutError:
                        pass
                if not shell.socket.get(zmq.EVENTS) & zmq.POLLIN:
                    continue
                if not reply.cancelled():   # a message is waiting: read it here, not there
                    reply.cancel()
                    try:
                        return await reply   # it finished in between after all
                    except asyncio.CancelledError:
                        pass
                while shell.socket.get(zmq.EVENTS) & zmq.POLLIN:
                    msg = await ensure_async(shell.get_msg(timeout=1))
                    if msg["parent_header"].get("msg_id") == msg_id:
                        return msg
            reply.cancel()
            return None

        async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg,
                                        task_poll_kernel_alive):
            reply = self._reply_future(msg_id, cell, timeout, task_poll_output_msg,
                                       task_poll_kernel_alive)
            done, _ = await asyncio.wait({reply, task_poll_output_msg},
                                         return_when=asyncio.FIRST_COMPLETED)
            if reply not in done:   # the kernel said idle: the reply is due now
                msg = await self._read_missed_reply(msg_id, reply)
                if msg is None:
                    task_poll_kernel_alive.cancel()
                    first_line = (cell.source.splitlines() or [""])[0][:60]
                    raise KernelStall(f"the kernel finished a cell ({first_line!r}) but its "
                                      f"reply did not arrive within {self.stall_grace:g} s")
                task_poll_kernel_alive.cancel()
                return msg
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
