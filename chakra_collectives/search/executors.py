"""Where a search's tasks run: in this process, or on a Dask cluster (local or remote).

An executor takes tasks with their dependencies (a task's arguments may be other tasks'
handles) and hands back each finished task once. :class:`InProcess` runs them one after
another in submission order (``--workers 1``); :class:`DaskExecutor` submits them to a
``dask.distributed`` scheduler -- an embedded ``LocalCluster`` of one single-threaded worker
process per core by default, or a running cluster (``dask scheduler`` / ``dask worker``) at
``--scheduler ADDRESS``. The same task functions run either way, so the results are identical.

>>> with InProcess() as executor:
...     a = executor.submit(pow, 2, 10)
...     b = executor.submit(divmod, a, 7)
...     finished = [(h is b, error) for h, error in executor.as_completed([a, b])]
...     finished, executor.fetch(b)
([(False, None), (True, None)], (146, 2))
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from chakra_collectives.errors import InputError
from chakra_collectives.resources import memory_limit, memory_limit_set

CONNECT_TIMEOUT_S = 3
"""How long to try reaching a scheduler before giving up."""
WORKER_TIMEOUT_S = 60
"""How long to wait for a scheduler without workers to get one."""
LOCAL_WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
"""Dask settings of the local cluster's workers: no statistical profiler (it samples the running
task's stack every 10 ms for the dashboard, which a search does not start; measured on the
benchmark's tasks: about 15 % more CPU per task with it)."""


WORKER_MEMORY_SHARE = 0.85
"""Share of a Dask worker's memory limit a task may plan to use: its nanny ends the worker at
95% (every task on it is then lost and retried elsewhere), so a task whose estimate would pass
this share fails as its own row instead ("needs about X GiB")."""


def worker_memory_limit() -> int | None:
    """:data:`WORKER_MEMORY_SHARE` of the memory limit of the Dask worker running this task
    (``None``: not in a Dask worker, or the worker has no limit)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # ValueError: not inside a worker
        return None
    limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
    return int(limit * WORKER_MEMORY_SHARE) if limit else None


@contextmanager
def within_worker_memory() -> Iterator[None]:
    """Run a task under its worker's memory limit (:func:`worker_memory_limit`) when that is
    lower than the one in force, so estimates refuse what the worker's nanny would kill.

    >>> with within_worker_memory():          # not in a Dask worker: the limit stays
    ...     pass
    """
    limit = worker_memory_limit()
    current = memory_limit().nbytes
    if limit is None or 0 < current <= limit:
        yield
        return
    with memory_limit_set(limit, f"{WORKER_MEMORY_SHARE:.0%} of the Dask worker's memory limit"):
        yield


def machine_cores() -> int:
    """Cores this process may run on (what the local cluster is sized to)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(eq=False)
class Task:
    """A task submitted to :class:`InProcess`."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    value: Any = None


class InProcess:
    """Runs every task here, in submission order (dependencies are always submitted first)."""

    workers = 1
    description = "in process"

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def share(self, value: Any) -> Any:
        return value

    def submit(self, function: Callable[..., Any], *args: Any, priority: int = 0, key: str | None = None) -> Task:
        return Task(function, args)

    def as_completed(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, BaseException | None]]:
        """``(task, error)`` as each finishes (``error``: the task raised); values via :meth:`fetch`."""
        for task in list(tasks):
            args = tuple(a.value if isinstance(a, Task) else a for a in task.args)
            try:
                task.value = task.function(*args)
            except Exception as error:  # noqa: BLE001 -- reported like a lost Dask task
                yield task, error
                continue
            yield task, None

    def fetch(self, task: Task) -> Any:
        """The value of a finished task."""
        return task.value

    def release(self, task: Task) -> None:
        task.value = None

    def close(self) -> None:
        pass


class DaskExecutor:
    """Tasks on a ``dask.distributed`` cluster: a new ``LocalCluster`` or the scheduler at ``address``."""

    def __init__(self, *, workers: int | None = None, address: str | None = None) -> None:
        from distributed import Client, LocalCluster

        self.cluster = None
        if address is not None:
            try:
                self.client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as error:
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise InputError(
                    f"cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S} s ({reason}); "
                    "start one with 'dask scheduler' and workers with 'dask worker ADDRESS'"
                ) from None
            try:
                self.client.wait_for_workers(1, timeout=WORKER_TIMEOUT_S)
            except (TimeoutError, OSError):
                self.client.close()
                raise InputError(f"the Dask scheduler at {address!r} has no workers (none joined within {WORKER_TIMEOUT_S} s)") from None
            self.description = f"scheduler {address}"
        else:
            import dask

            count = workers or machine_cores()
            with dask.config.set(LOCAL_WORKER_CONFIG):  # the nannies hand it to the worker processes they start
                self.cluster = LocalCluster(
                    n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR,
                )
            self.client = Client(self.cluster, set_as_default=False)
            self.description = f"local Dask cluster, {count} worker process(es)"
        from chakra_collectives.search.tasks import warm_up
        from chakra_collectives.search.worker_setup import ReuseFreedMemory

        self.client.register_plugin(ReuseFreedMemory())  # on every worker, and on any that joins later
        self.client.run(warm_up)  # every worker imports the engines now, not inside its first task

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"]) or 1

    def __enter__(self) -> "DaskExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def share(self, value: Any) -> Any:
        """Put ``value`` on the cluster once; tasks that take the handle fetch it from there.

        It is a task that returns the value, not scattered data: if the worker holding it dies,
        the scheduler makes it again elsewhere (scattered data would be lost with the worker).
        """
        return self.client.submit(_same, value, pure=False, priority=2)

    def submit(self, function: Callable[..., Any], *args: Any, priority: int = 0, key: str | None = None) -> Any:
        return self.client.submit(function, *args, priority=priority, key=key, pure=False)

    def as_completed(self, futures: Iterable[Any]) -> Iterator[tuple[Any, BaseException | None]]:
        """``(future, error)`` as each finishes (``error``: it raised, or its worker died too often);
        values stay on the cluster until :meth:`fetch`."""
        from distributed import as_completed

        for future in as_completed(list(futures), loop=self.client.loop):
            yield future, (None if future.status == "finished" else future.exception())

    def fetch(self, future: Any) -> Any:
        """The value of a finished task, brought to this process."""
        return future.result()

    def release(self, future: Any) -> None:
        future.release()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _same(value: Any) -> Any:
    return value


def make_executor(*, workers: int | None = None, scheduler: str | None = None) -> InProcess | DaskExecutor:
    """``--workers 1``: in process; ``--scheduler ADDRESS``: that cluster; otherwise a local cluster (one worker per core)."""
    if scheduler is not None and workers is not None:
        raise InputError("give --workers or --scheduler, not both (a running cluster has its own workers)")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    if scheduler is None and (workers == 1 or (workers is None and machine_cores() == 1)):
        return InProcess()
    return DaskExecutor(workers=workers, address=scheduler)


__all__ = ["CONNECT_TIMEOUT_S", "DaskExecutor", "InProcess", "WORKER_MEMORY_SHARE", "machine_cores", "make_executor", "within_worker_memory", "worker_memory_limit"]
