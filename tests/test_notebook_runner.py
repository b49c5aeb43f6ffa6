"""The stall-aware runner: a reply whose wake-up was missed (still in the shell socket) is read
directly, with no rerun; a reply truly lost is noticed within the grace period (not the cell
timeout) and the notebook runs once more; a slow cell is not mistaken for a stall."""
import asyncio
import time

import nbformat
import pytest

from course_lib.tools import notebook_runner as runner


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(path))
    return path


def _dropping_factory(drops: list[int], *, lose: bool = True):
    """A client whose reply poll for the cell marked DROP_REPLY never returns, ``drops[0]``
    times. ``lose=True`` also takes the reply out of the shell socket (a lost message);
    ``lose=False`` leaves it there (the missed wake-up seen in lesson 07)."""
    def factory():
        base = runner._client_class()

        class Dropping(base):
            def _reply_future(self, msg_id, cell, timeout, output_done, kernel_alive):
                if "DROP_REPLY" in cell.source and drops[0] > 0:
                    drops[0] -= 1
                    shell = self.kc.shell_channel

                    async def never():
                        if lose:
                            msg = await shell.get_msg(timeout=timeout)
                            assert msg["parent_header"]["msg_id"] == msg_id
                        await asyncio.Event().wait()
                    return asyncio.ensure_future(never())
                return super()._reply_future(msg_id, cell, timeout, output_done, kernel_alive)
        return Dropping
    return factory


@pytest.mark.timeout(120)
def test_a_missed_wake_up_is_read_from_the_socket_without_a_rerun(tmp_path, monkeypatch):
    nb = _notebook(tmp_path / "in.ipynb", "x = 1", "# DROP_REPLY\ny = x + 1", "print(y)")
    drops = [3]
    monkeypatch.setattr(runner, "CLIENT_FACTORY", _dropping_factory(drops, lose=False))
    said = []
    assert runner.execute_notebook(nb, tmp_path / "out.ipynb", cell_timeout=100,
                                   stall_grace=30.0, log=said.append) == 0
    assert said == [] and drops == [2]     # the one poll that missed it, no second run
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[-1].outputs[0]["text"].strip() == "2"


@pytest.mark.timeout(120)
def test_a_lost_reply_is_detected_and_the_notebook_rerun(tmp_path, monkeypatch):
    nb = _notebook(tmp_path / "in.ipynb", "x = 1", "# DROP_REPLY\ny = x + 1", "print(y)")
    monkeypatch.setattr(runner, "CLIENT_FACTORY", _dropping_factory([1]))
    said = []
    t0 = time.monotonic()
    stalls = runner.execute_notebook(nb, tmp_path / "out.ipynb", cell_timeout=100,
                                     stall_grace=2.0, log=said.append)
    assert stalls == 1 and len(said) == 1 and "once more" in said[0]
    assert time.monotonic() - t0 < 60          # the grace, not the 100 s cell timeout
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[-1].outputs[0]["text"].strip() == "2"


@pytest.mark.timeout(120)
def test_stalls_beyond_the_retries_raise_and_slow_cells_do_not_stall(tmp_path, monkeypatch):
    nb = _notebook(tmp_path / "in.ipynb", "# DROP_REPLY\nx = 1")
    monkeypatch.setattr(runner, "CLIENT_FACTORY", _dropping_factory([5]))
    with pytest.raises(runner.KernelStall, match="did not arrive within 1 s"):
        runner.execute_notebook(nb, tmp_path / "out.ipynb", stall_grace=1.0, retries=1,
                                log=lambda s: None)
    monkeypatch.setattr(runner, "CLIENT_FACTORY", runner._client_class)
    slow = _notebook(tmp_path / "slow.ipynb", "import time; time.sleep(3)")
    assert runner.execute_notebook(slow, tmp_path / "o2.ipynb", stall_grace=1.0) == 0
    with pytest.raises(ValueError, match="retries"):
        runner.execute_notebook(slow, tmp_path / "o3.ipynb", retries=-1)
