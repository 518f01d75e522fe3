"""Work shared with forked processes (chakra_collectives/processes.py): their return values."""

from __future__ import annotations

import os
import threading

import pytest

from chakra_collectives.processes import run_forked


def test_run_forked_returns_each_jobs_value_in_job_order():
    here = os.getpid()
    values = run_forked([lambda: os.getpid(), lambda: os.getpid(), lambda: os.getpid()])
    assert values[0] == here and len(set(values)) == 3  # the first ran here, each other in its own process


def test_a_value_that_cannot_come_back_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="result cannot be sent back"):
        run_forked([lambda: None, lambda: threading.Lock()])


def test_cancelling_a_nesting_job_ends_the_jobs_it_forked(tmp_path):
    """A job that nests forks one of its own (a sleeper that writes its pid); cancelling the
    outer job ends the sleeper too (its process group), not only the outer process."""
    import time

    from chakra_collectives.processes import ForkedJob, can_fork, is_running

    if not can_fork():
        pytest.skip("this process may not fork")
    mark = tmp_path / "pid"

    def sleeper() -> None:
        mark.write_text(str(os.getpid()))
        time.sleep(60)

    outer = ForkedJob(lambda: ForkedJob(sleeper).result(), nests=True)
    deadline = time.monotonic() + 30
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    inner = int(mark.read_text())
    assert is_running(inner)
    outer.cancel()
    deadline = time.monotonic() + 10
    while is_running(inner) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not is_running(inner)
