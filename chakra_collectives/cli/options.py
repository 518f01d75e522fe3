"""Option parsers shared by several commands."""

from __future__ import annotations

from chakra_collectives.ir import Collective
from chakra_collectives.units import parse_size


def collective_option(value: str | None) -> Collective | None:
    return None if value is None else Collective.parse(value)


def size_option(value: str | None) -> int | None:
    return None if value is None else parse_size(value)
