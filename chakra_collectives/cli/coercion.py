"""Option values that need no validation library: plain strings, integers and decimals.

Typer turns every option value into its annotated type with a pydantic ``TypeAdapter`` (typer
0.2x, built the first time a value is seen): importing pydantic and building some twenty
adapters took about 0.1 s of the 0.3 s that ``chakra-coll synth -t mesh2d:8x8 -a tacos`` may
take. Here a value that is already of its type (a default), a string for a ``str`` option, or
a plain decimal number for an ``int`` or ``float`` option (``-k 4``, ``--time-budget 2.5``)
becomes its value directly -- what the adapter would return --, an option not given stays
``None``, a string for a ``Path`` argument or option (``verify PREFIX``, ``replay WORKLOAD``)
becomes a ``Path`` that typer's own path checks then take (pydantic's adapter would only have
made the ``Path``; importing it took 0.05-0.1 s of every such command), and anything else (a
choice, a malformed number, a type with bounds or a parser) goes to typer's own coercion, with
its checks and its error messages. On a typer without per-parameter coercion objects
(:func:`install`'s ``_runtime_param``) nothing changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")


class _Lean:
    """A parameter's coercion: the plain cases here, the others typer's."""

    def __init__(self, annotation: Any) -> None:
        self.annotation = annotation
        """``str``, ``int``, ``float`` or ``Path``; ``None``: another type, or one with a parser, bounds or choices."""
        self.full: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # an option not given: typer's coercion returns it as is
            return () if param.multiple or param.nargs == -1 else None
        kind = self.annotation
        if kind is str and isinstance(value, str):
            return value
        if kind is int and (type(value) is int or isinstance(value, str) and _INTEGER.fullmatch(value)):
            return int(value)
        if kind is float and (type(value) in (int, float) or isinstance(value, str) and _DECIMAL.fullmatch(value)):
            return float(value)
        if kind is Path and isinstance(value, (str, Path)) and value != "":
            from typer._param_types import coerce_cli_path

            return coerce_cli_path(Path(value), param.type_descriptor.parameter_info, path_type=Path, param=param, ctx=ctx)
        if self.full is None:
            from typer._coercion import build_runtime_param

            self.full = build_runtime_param(param.type_descriptor)
        return self.full.coerce(value, param=param, ctx=ctx)


def install(params: list[Any]) -> None:
    """Give each typer parameter the lean coercion, unless it has one already: the plain cases
    for a ``str``, ``int`` or ``float`` option (no parser, bounds or choices, one value), a
    missing value for any."""
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", False) is not None:
            continue
        info = descriptor.parameter_info
        plain = (
            descriptor.annotation in (str, int, float) and not param.multiple and param.nargs == 1
            and getattr(info, "parser", None) is None and getattr(info, "min", None) is None and getattr(info, "max", None) is None
            and not descriptor.is_choice and not descriptor.is_path and not descriptor.is_file
        )
        path = (
            descriptor.annotation is Path and descriptor.is_path and not descriptor.is_file and not param.multiple and param.nargs == 1
            and getattr(info, "parser", None) is None and getattr(info, "path_type", None) in (None, Path)
        )
        param._runtime_param = _Lean(descriptor.annotation if plain or path else None)
