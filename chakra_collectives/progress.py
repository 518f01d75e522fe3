"""Progress of long work: library code says how far it got, a front end shows it.

Long phases (TACOS matching, ``best``'s candidates, reading thousands of rank files, a replay)
open a :func:`task` and advance it; whoever wants to see progress installs a callback with
:func:`reporting` around the call. Tasks nest (a synthesis holds a search, the search holds
trials, a trial matches chunks), and every report carries the whole stack, the overall
fraction done and an estimate of the time left. Without a callback installed, :func:`task`
returns a shared do-nothing task, so instrumented code costs a function call.

Library side -- open a task with a ``total`` (or ``None`` when unknown) and advance it:

>>> def work(items):
...     with task("square numbers", total=len(items), unit="numbers") as t:
...         out = []
...         for x in items:
...             out.append(x * x)
...             t.advance()
...         return out

Front-end side -- receive :class:`Update` objects (here: every one, no throttling):

>>> seen = []
>>> with reporting(seen.append, interval_s=0):
...     work([1, 2, 3])
[1, 4, 9]
>>> [u.describe() for u in seen]  # doctest: +NORMALIZE_WHITESPACE
['square numbers: 0/3 numbers', 'square numbers: 1/3 numbers', 'square numbers: 2/3 numbers',
 'square numbers: 3/3 numbers', 'square numbers: 3/3 numbers']
>>> seen[1].fraction, seen[-1].finished
(0.3333333333333333, True)

Nested tasks refine their parent's fraction: half-way through the second of four trials is
37.5 % of the search.

>>> seen = []
>>> with reporting(seen.append, interval_s=0):
...     with task("search", total=4, unit="trials") as search:
...         search.advance()
...         with task("trial 2", total=10) as trial:
...             trial.update(5)
>>> [u.describe() for u in seen if u.name == "trial 2"][1]
'search > trial 2: 5/10 (37.5% of search)'

Give a task a ``total`` only when its units take comparable time (trials of one search,
files of one size, chunks to deliver): the fraction of the outermost task with a total is what
a front end shows as "done" and extrapolates into the time left. A task of unequal steps (a
search, then a lowering, then bounds) is opened without a total: it only names what runs.

The callback is called from the thread doing the work, at most once per ``interval_s``
(always when a task starts or ends); it must be quick.
"""

from __future__ import annotations

import contextlib
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = ["Task", "Update", "reporting", "task"]


@dataclass(frozen=True)
class Update:
    """One progress report: where the work is, and how far along."""

    path: tuple[str, ...]
    """Names of the open tasks, outermost first (the last is the one that moved)."""
    done: float
    """Units of the innermost task done so far."""
    total: float | None
    """Units of the innermost task (``None``: not known in advance)."""
    unit: str
    """What the units are (``"trials"``, ``"(NPU, chunk) pairs"``, ``"files"``; may be empty)."""
    fraction: float | None
    """Fraction of the *outermost* task with a known total that is done, using every nested
    task's progress (``None`` when no task in the stack has a total)."""
    elapsed_s: float
    """Seconds since that outermost task started (or since the outermost task, if none has a total)."""
    finished: bool = False
    """The innermost task just ended."""
    counts: tuple[tuple[float, float | None], ...] = ()
    """``(done, total)`` of every task in :attr:`path` (the last is :attr:`done`, :attr:`total`)."""

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def eta_s(self) -> float | None:
        """Seconds left if the rest goes as fast as what is done (``None`` until something is).

        >>> Update(("x",), 1, 4, "", 0.25, 10.0).eta_s
        30.0
        """
        if self.fraction is None or self.fraction <= 0 or self.finished:
            return None if not self.finished else 0.0
        return self.elapsed_s * (1.0 - self.fraction) / self.fraction

    def describe(self) -> str:
        """One line: ``outer > inner: done/total unit (p% of outer)``.

        >>> Update(("read",), 3, 10, "files", 0.3, 1.0).describe()
        'read: 3/10 files'
        """
        amount = f"{self.done:g}" if self.total is None else f"{self.done:g}/{self.total:g}"
        text = f"{' > '.join(self.path)}: {amount}{' ' + self.unit if self.unit else ''}"
        if len(self.path) > 1 and self.fraction is not None:
            text += f" ({self.fraction:.1%} of {self.path[0]})"
        return text


Callback = Callable[[Update], None]


class Task:
    """An open unit of work; advance it as the work gets done (see the module docstring)."""

    __slots__ = ("name", "total", "unit", "done", "started", "parent", "child", "_reporter")

    def __init__(self, name: str, total: float | None, unit: str, parent: "Task | None", reporter: "_Reporter | None") -> None:
        self.name = name
        self.total = total
        self.unit = unit
        self.done: float = 0
        self.started = time.perf_counter()
        self.parent = parent
        self.child: Task | None = None
        self._reporter = reporter

    def advance(self, amount: float = 1) -> None:
        """``amount`` more units are done."""
        self.done += amount
        if self._reporter is not None:
            self._reporter.moved(self)

    def update(self, done: float, total: float | None = None) -> None:
        """Set how many units are done (and the total, when it became known)."""
        self.done = done
        if total is not None:
            self.total = total
        if self._reporter is not None:
            self._reporter.moved(self)

    def fraction(self) -> float | None:
        """This task's fraction done, counting an open child task's progress.

        A task without a total is a label: its fraction is its open child's (``None`` if none).
        """
        inner = self.child.fraction() if self.child is not None else None
        if not self.total:
            return inner
        return min(1.0, (self.done + (inner or 0.0)) / self.total)

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._reporter is not None:
            self._reporter.close(self)


class _Idle(Task):
    """The task handed out when nobody listens: every method does nothing."""

    def __init__(self) -> None:
        super().__init__("", None, "", None, None)

    def advance(self, amount: float = 1) -> None:
        pass

    def update(self, done: float, total: float | None = None) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_IDLE = _Idle()


class _Reporter:
    def __init__(self, callback: Callback, interval_s: float) -> None:
        self.callback = callback
        self.interval_s = interval_s
        self.last = -float("inf")
        self.stack: list[Task] = []
        self.pid = os.getpid()

    def open(self, name: str, total: float | None, unit: str) -> Task:
        parent = self.stack[-1] if self.stack else None
        opened = Task(name, total, unit, parent, self)
        if parent is not None:
            parent.child = opened
        self.stack.append(opened)
        self._send(opened, finished=False)
        return opened

    def moved(self, moved: Task) -> None:
        now = time.perf_counter()
        if now - self.last >= self.interval_s:
            self._send(moved, finished=False, now=now)

    def close(self, closed: Task) -> None:
        if closed in self.stack:
            self._send(closed, finished=True)
            del self.stack[self.stack.index(closed) :]
            if closed.parent is not None:
                closed.parent.child = None

    def _send(self, moved: Task, *, finished: bool, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        self.last = now
        chain = self.stack[: self.stack.index(moved) + 1] if moved in self.stack else [moved]
        anchor = next((t for t in chain if t.total), chain[0])
        self.callback(
            Update(
                path=tuple(t.name for t in chain),
                done=moved.done,
                total=moved.total,
                unit=moved.unit,
                fraction=anchor.fraction(),
                elapsed_s=now - anchor.started,
                finished=finished,
                counts=tuple((t.done, t.total) for t in chain),
            )
        )


_CURRENT: ContextVar[_Reporter | None] = ContextVar("chakra_collectives_progress", default=None)


def task(name: str, total: float | None = None, unit: str = "") -> Task:
    """Open a task (use it as a context manager); a do-nothing task when nobody listens.

    A process forked by the work (a worker sharing TACOS trials or rank files) inherits the
    listener but is not the one it listens to: its tasks do nothing, so only the process that
    installed the callback reports."""
    reporter = _CURRENT.get()
    if reporter is None or reporter.pid != os.getpid():
        return _IDLE
    return reporter.open(name, total, unit)


@contextlib.contextmanager
def reporting(callback: Callback, *, interval_s: float = 0.1) -> Iterator[None]:
    """Send progress of the work done inside the block to ``callback`` (at most every ``interval_s``)."""
    token = _CURRENT.set(_Reporter(callback, interval_s))
    try:
        yield
    finally:
        _CURRENT.reset(token)
