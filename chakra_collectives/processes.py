"""Other processes: whether one runs (for the writers of multi-file outputs), and work shared
with forked ones (to use every core on a large write).

>>> import os
>>> is_running(os.getpid())
True
>>> is_running(2**22 + 12345)     # above Linux's largest process id
False

:func:`run_forked` runs the first job here and the others in forked processes, which see this
process's memory as it was (no pickling of large inputs), and returns what they return; a
job's error is raised here:

>>> done = []
>>> run_forked([lambda: done.append("here"), lambda: 6 * 7])
[None, 42]
>>> done
['here']
>>> run_forked([lambda: None, lambda: 1 / 0])
Traceback (most recent call last):
ZeroDivisionError: division by zero
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one we may not signal counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # not a process id at all
        return False
    return True


def can_start_processes() -> bool:
    """Whether this process may start processes at all: not when it is itself a daemonic one
    (a Dask worker, a multiprocessing pool's worker), which multiprocessing forbids to have
    children -- work meant for other processes runs here, serially.

    >>> can_start_processes()
    True
    """
    import multiprocessing  # imported when used (start-up time), as in the functions below

    return not multiprocessing.current_process().daemon


PARALLEL_PAIRS = 2**18
"""(NPU, chunk) pairs of a synthesis from which its independent plans or matchings (TACOS's
trials of a phase, the grid pipelines' variants) run in parallel processes: 512 NPUs at one
chunk each. Below, a process costs more than the plan it would run."""


def can_fork() -> bool:
    """Whether work may be shared with forked processes: the platform forks, this process may
    start processes (:func:`can_start_processes`), and it runs one thread (a fork copies only
    the calling thread; a lock another thread held would stay locked in the child)."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and can_start_processes() and threading.active_count() == 1


def run_forked(jobs: list[Callable[[], T]]) -> list[T]:
    """Run ``jobs[0]`` in this process and every other job in a process forked for it, all at
    once; return their return values, in job order, when all have finished (a forked job's
    comes back pickled through a pipe: keep it small -- large results go through files). The
    first error (in job order) is raised here: the child's exception itself when it pickles,
    else a :class:`RuntimeError` naming it."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    children = []
    for job in jobs[1:]:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_report_to, args=(send, job), daemon=True)
        child.start()
        send.close()
        children.append((child, receive))
    errors: list[BaseException] = []
    values: list = [None] * len(jobs)
    try:
        values[0] = jobs[0]()
    except BaseException as exc:  # noqa: BLE001 - raised below, after the children are reaped
        errors.append(exc)
    for index, (child, receive) in enumerate(children, start=1):
        try:
            outcome, values[index] = receive.recv()
        except EOFError:  # killed before it could say
            outcome = None
        child.join()
        receive.close()
        if outcome is None and child.exitcode != 0:
            outcome = RuntimeError(f"a worker process ended with exit code {child.exitcode}")
        if outcome is not None:
            errors.append(pickle.loads(outcome) if isinstance(outcome, bytes) else outcome)
    if errors:
        raise errors[0]
    return values


class ForkedJob:
    """One job started now in a forked process: :meth:`result` waits for its return value
    (pickled back through a temporary file; its error raised here), :meth:`cancel` ends it
    unfinished (when what it would find is no longer wanted).

    >>> job = ForkedJob(lambda: 6 * 7)
    >>> job.result()
    42
    >>> quick = ForkedJob(lambda: None)
    >>> while not quick.done():
    ...     pass
    >>> quick.result() is None
    True
    >>> slow = ForkedJob(lambda: __import__("time").sleep(60))
    >>> slow.cancel()

    ``nests``: the job may fork jobs of its own (its process is not daemonic, which
    multiprocessing forbids children; so it is not ended for its parent at exit either: the
    caller must take its result or cancel it, as for any job). It runs in a process group of
    its own, which :meth:`cancel` ends whole: the jobs it forked end with it.

    >>> ForkedJob(lambda: ForkedJob(lambda: 6 * 7).result(), nests=True).result()
    42
    """

    def __init__(self, job: Callable[[], T], *, nests: bool = False) -> None:
        import tempfile

        self._folder = tempfile.mkdtemp(prefix="chakra-forked-")
        self._path = os.path.join(self._folder, "value.pickle")
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)

        def run() -> None:
            if nests:
                os.setpgid(0, 0)
            with open(self._path, "wb") as out:
                pickle.dump(job(), out, protocol=pickle.HIGHEST_PROTOCOL)

        self._nests = nests
        self._child = context.Process(target=_report_to, args=(send, run), daemon=not nests)
        self._child.start()
        send.close()
        if nests:
            try:  # here too: a cancel before the child has set it still ends the group
                os.setpgid(self._child.pid, self._child.pid)
            except OSError:  # it has already (or has ended)
                pass

    def done(self) -> bool:
        """Whether it has finished (:meth:`result` then returns at once)."""
        return self._receive.poll()

    def result(self) -> T:
        """Its return value, once it has finished (its error raised here)."""
        try:
            try:
                outcome, _ = self._receive.recv()
            except EOFError:  # killed before it could say
                outcome = None
            self._child.join()
            if outcome is None and self._child.exitcode != 0:
                outcome = RuntimeError(f"a worker process ended with exit code {self._child.exitcode}")
            if outcome is not None:
                raise pickle.loads(outcome) if isinstance(outcome, bytes) else outcome
            with open(self._path, "rb") as stored:
                return pickle.load(stored)
        finally:
            self._close()

    def cancel(self) -> None:
        """End it now, unfinished (with every job it forked, when it ``nests``)."""
        if self._nests:
            try:
                os.killpg(self._child.pid, signal.SIGKILL)
            except OSError:  # the group has ended already
                pass
        self._child.kill()
        self._child.join()
        self._close()

    def _close(self) -> None:
        import shutil

        self._receive.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _report_to(send, job: Callable[[], T]) -> None:
    """A forked worker: run ``job``, send ``(None, its value)`` or ``(its pickled exception, None)``."""
    value = None
    try:
        value = job()
        outcome = None
    except BaseException as exc:  # noqa: BLE001 - the parent raises it
        try:
            outcome = pickle.dumps(exc)
            pickle.loads(outcome)
        except Exception:  # noqa: BLE001 - an exception that does not survive pickling
            outcome = RuntimeError(f"{type(exc).__name__}: {exc}")
    try:
        send.send((outcome, value))
    except Exception as exc:  # noqa: BLE001 - a value that does not pickle
        send.send((RuntimeError(f"a worker's result cannot be sent back: {type(exc).__name__}: {exc}"), None))
    send.close()


__all__ = ["PARALLEL_PAIRS", "ForkedJob", "can_fork", "can_start_processes", "is_running", "run_forked"]
