"""``--max-memory``, which every command takes, and what a command does when memory runs out.

:func:`with_memory_limit` adds the option to a command function's signature (so Typer shows
and parses it like the command's own options) and runs the command under that limit
(:func:`chakra_collectives.resources.memory_limit_set`); requests estimated to need more are
refused before they start. Should an allocation fail anyway, the command ends with one line
and exit code 4, never a traceback.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import typer

from chakra_collectives.errors import LimitError
from chakra_collectives.resources import memory_limit, memory_limit_set, parse_memory
from chakra_collectives.units import format_size

MAX_MEMORY_HELP = (
    "Memory this command may use: a size (8GiB) or a share of available memory (50%); 0 = no limit. "
    "Default: 75% of available memory (or CHAKRA_COLL_MAX_MEMORY). Work estimated to need more is refused before it starts."
)


def with_memory_limit(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``func`` with a ``--max-memory`` option, run under that memory limit."""
    signature = inspect.signature(func)
    option = inspect.Parameter(
        "max_memory",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(None, "--max-memory", metavar="SIZE", help=MAX_MEMORY_HELP),
        annotation=Optional[str],
    )

    @functools.wraps(func)
    def run(*args: Any, max_memory: Optional[str] = None, **kwargs: Any) -> Any:
        limit = None if max_memory is None else parse_memory(max_memory)
        with memory_limit_set(limit):
            try:
                return func(*args, **kwargs)
            except MemoryError:
                raise LimitError(out_of_memory(name)) from None

    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), option])  # type: ignore[attr-defined]
    run.__annotations__ = {**getattr(func, "__annotations__", {}), "max_memory": Optional[str]}
    return run


def out_of_memory(name: str) -> str:
    """The one line for an allocation that failed although the estimates let the work start."""
    limit = memory_limit()
    where = f" (limit {format_size(limit.nbytes)}, {limit.source})" if limit.nbytes else ""
    return f"{name} ran out of memory{where}; ask for less work, or free memory and retry"


__all__ = ["MAX_MEMORY_HELP", "out_of_memory", "with_memory_limit"]
