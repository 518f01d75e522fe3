"""Figures: created without pyplot (no global state), rendered by Agg, written all or nothing.

>>> figure = new_figure(4, 3)
>>> type(figure.canvas).__name__
'FigureCanvasAgg'
"""

from __future__ import annotations

import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from chakra_collectives.errors import InputError
from chakra_collectives.plot.formats import output_format

DPI = 150


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches on the Agg canvas."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Write ``figure`` as PNG or SVG (by suffix) under a temporary name, then rename."""
    path = Path(path)
    fmt = output_format(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(temp, format=fmt, dpi=DPI)
        os.replace(temp, path)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise InputError(f"cannot write image: {error.strerror}", path=path) from None
    return path


def time_unit(span_ns: float) -> tuple[str, float]:
    """Unit to label a time axis of ``span_ns`` with, and its size in ns.

    >>> time_unit(3e5), time_unit(2e7)
    (('µs', 1000.0), ('ms', 1000000.0))
    """
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if span_ns >= 10 * scale:
            return unit, scale
    return "ns", 1.0
