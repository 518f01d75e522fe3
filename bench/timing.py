"""Timing helpers for benchmarks: medians of repeated runs on a noisy, shared machine."""

from __future__ import annotations

import statistics
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
