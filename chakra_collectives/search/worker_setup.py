"""What every Dask worker of a search does before its first task, and again on a worker that joins
later (a nanny's restart after a crash, or a ``dask worker`` started mid-search).

A Dask nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (Dask's default, to hand
memory back to the system), which also fixes glibc's mmap threshold at 128 KiB: every column a
task allocates is then mapped afresh and its pages faulted in again. The plugin lets the
worker's ``malloc`` keep freed columns for reuse instead
(:func:`~chakra_collectives.resources.reuse_freed_memory`, what the CLI does in its own process).
A 512-NPU ring row of ``bench/search_space_1024.yaml`` in one process (2026-11-28, load 10):
17.5 CPU s (5.2 s of system time, 623K page faults) under Dask's setting, 13.1 s (1.1 s, 91K)
under this one, the same peak (0.70-0.73 GiB).

>>> ReuseFreedMemory.name
'chakra-coll-reuse-freed-memory'
"""

from __future__ import annotations

from distributed import WorkerPlugin

from chakra_collectives.resources import reuse_freed_memory


class ReuseFreedMemory(WorkerPlugin):
    """A worker plugin: :func:`~chakra_collectives.resources.reuse_freed_memory` in the worker's process."""

    name = "chakra-coll-reuse-freed-memory"

    def setup(self, worker: object) -> None:
        reuse_freed_memory()


__all__ = ["ReuseFreedMemory"]
