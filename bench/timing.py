"""Timing helpers for benchmarks: medians of repeated runs on a noisy, shared machine."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
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


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for (forked
    workers included: ``time.process_time()`` alone misses the work they did for it)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def whole_command(arguments: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, with the child's own workers) and peak RSS (MiB)
    of one command in a fresh process (``env``: its environment); raises when it fails."""
    started = time.perf_counter()
    child = subprocess.Popen(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(arguments)} failed")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def python_importing(package: str | os.PathLike | None, code: str) -> list[str]:
    """The command line running ``code`` in a fresh Python whose ``chakra_collectives`` comes from
    ``package`` (a folder holding ``chakra_collectives/``, such as ``git archive REV
    chakra_collectives converters`` unpacked with ``converters/`` moved or linked into
    ``chakra_collectives/``), or the installed one when ``None``. ``PYTHONPATH`` alone does not
    do it: the editable install's finder runs ahead of ``sys.path``, so it is taken out."""
    if package is None:
        return [sys.executable, "-c", code]
    prelude = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()];"
        f" sys.path.insert(0, {str(package)!r})\n"
    )
    return [sys.executable, "-c", prelude + code]
