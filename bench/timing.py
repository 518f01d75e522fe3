"""Timing helpers for benchmarks: medians of repeated runs on a noisy, shared machine."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
import tracemalloc
from typing import Any, Callable


def median_seconds(run: Callable[[], Any], *, repeat: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    """Median wall time of ``run()`` over ``repeat`` runs (after ``warmup`` untimed runs), and all samples."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), samples


def peak_memory_mb(run: Callable[[], Any]) -> float:
    """Peak Python-heap allocation (tracemalloc, includes numpy buffers) of one ``run()``, in MiB."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def whole_command(arguments: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, with the child's own workers) and peak RSS (MiB)
    of one command in a fresh process (``env``: its environment); raises when it fails."""
    started = time.perf_counter()
    child = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(arguments)} failed")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
