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
