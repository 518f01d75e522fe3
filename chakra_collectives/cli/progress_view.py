"""How the commands show :mod:`chakra_collectives.progress` on the terminal.

:func:`showing_progress` installs a progress callback around a command's work and draws, on
stderr and only once the work has taken longer than a second, one line: what is running
(the innermost tasks), a bar and percentage of the whole, and the time left. Nothing is drawn
when stderr is not a terminal, so pipes and ``--json`` stay clean.

The line is drawn from the progress callbacks themselves, in the thread doing the work: no
timer or refresh thread runs, so work that forks processes to use every core (TACOS trials,
reading and writing thousands of rank files) does so on a terminal as it does under ``--json``.

>>> path = ("synth", "synthesize", "K=2", "tacos", "phases", "all-gather", "match chunks to links")
>>> counts = ((0, None), (1, 3), (0, 1), (0, 2), (0, 2), (1, 4), (40, 112))
>>> describe(Update(path, 40, 112, "(NPU, chunk) pairs", 0.6, 3.0, counts=counts), 80)
'synthesize 1/3 › K=2 0/1 › tacos 0/2 › all-gather 1/4 › matching 40/112 pairs'
>>> describe(Update(path, 40, 112, "(NPU, chunk) pairs", 0.6, 3.0, counts=counts), 44)
'… › all-gather 1/4 › matching 40/112 pairs'

Large counts are shortened (39,304 NPUs match 1.54G pairs a phase):

>>> big = counts[:-1] + ((3_050_790, 1_544_770_000),)
>>> describe(Update(path, 3_050_790, 1_544_770_000, "(NPU, chunk) pairs", 0.002, 3.0, counts=big), 48)
'… › all-gather 1/4 › matching 3.05M/1.54G pairs'
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Iterator

from chakra_collectives import progress
from chakra_collectives.cli.app import LazyConsole
from chakra_collectives.progress import Update
from chakra_collectives.units import format_count

if TYPE_CHECKING:
    from rich.console import Console

_GENERIC = {"phases", "candidates", "steps"}
"""Container tasks that say nothing to a user; left out of the line."""

_SHORT = {"match chunks to links": "matching"}


def describe(update: Update, width: int) -> str:
    """What is running, in at most ``width`` characters: the innermost tasks, with their counts
    (``done/total``; the innermost one with its unit); the outer ones are left out when too long."""
    parts = []
    levels = list(zip(update.path, update.counts or [(update.done, update.total)] * len(update.path)))
    for depth, (name, (done, total)) in enumerate(levels):
        if depth == 0 and len(levels) > 1 or name in _GENERIC:
            continue
        text = _SHORT.get(name, name)
        if total:
            unit = update.unit.split()[-1] if depth == len(levels) - 1 and update.unit else ""
            text += f" {format_count(done)}/{format_count(total)}{' ' + unit if unit else ''}"
        parts.append(text)
    parts = parts or [update.path[0]]
    line = " › ".join(parts)
    while len(line) > width and len(parts) > 1:
        parts = parts[1:]
        line = "… › " + " › ".join(parts)
    return line if len(line) <= width else "…" + line[len(line) - width + 1 :]


def format_eta(seconds: float | None) -> str:
    """``1:05 left`` (``m:ss``), ``1:02:03 left``, or empty when unknown.

    >>> format_eta(65.4), format_eta(3723), format_eta(None)
    ('1:05 left', '1:02:03 left', '')
    """
    if seconds is None:
        return ""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}") + " left"


class _View:
    def __init__(self, console: Console, title: str, delay_s: float) -> None:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

        self.console = console
        self.width = max(console.width - 36, 20)
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=12),
            TextColumn("{task.fields[percent]}"),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=True,
            auto_refresh=False,
        )
        self.task = self.bar.add_task(title[: self.width], total=None, eta="", percent="")
        self.anchor: tuple[str, ...] = ()
        self.started = False
        self.shown = 0
        self.show_from = time.monotonic() + delay_s

    def update(self, update: Update) -> None:
        if not self.started:
            if time.monotonic() < self.show_from:
                return
            self.started = True
            self.bar.start()
        depth = next((i for i, (_, total) in enumerate(update.counts) if total), None)
        anchor = update.path[: depth + 1] if depth is not None else ()
        if anchor != self.anchor:
            self.anchor, self.shown = anchor, 0
        known = update.fraction is not None and depth is not None
        completed = self.shown = max(int(update.fraction * 1000), self.shown) if known else 0  # a bar never moves back
        self.bar.update(
            self.task,
            description=describe(update, self.width),
            total=1000 if known else None,
            completed=completed,
            percent=f"{completed / 10:3.0f}%" if known else "",
            eta=format_eta(update.eta_s) if known else "",
            refresh=True,
        )

    def stop(self) -> None:
        if self.started:
            self.bar.stop()


@contextlib.contextmanager
def showing_progress(console: Console | LazyConsole, title: str, *, enabled: bool = True, delay_s: float = 1.0) -> Iterator[None]:
    """Show the progress of the work inside the block on ``console`` (see the module docstring;
    not enabled, the console is not even made)."""
    if not enabled or not console.is_terminal:
        yield
        return
    view = _View(console.made if isinstance(console, LazyConsole) else console, title, delay_s)
    try:
        with progress.reporting(view.update):
            with progress.task(title):
                yield
    finally:
        view.stop()
