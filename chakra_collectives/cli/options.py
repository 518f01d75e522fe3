"""Option parsers shared by several commands."""

from __future__ import annotations

from dataclasses import replace

import typer

from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy
from chakra_collectives.ir import Collective
from chakra_collectives.units import parse_size


def collective_option(value: str | None) -> Collective | None:
    return None if value is None else Collective.parse(value)


def size_option(value: str | None) -> int | None:
    return None if value is None else parse_size(value)


# ---------------------------------------------------------------------- workload read policy
STRICT = typer.Option(False, "--strict", help="Refuse every quirk the defaults repair (ASTRA-sim's acceptance rules): today's refusals.")
DANGLING = typer.Option(None, "--dangling", help="Dependencies on node ids not in the file: drop (default) or error.")
SELF_DEPS = typer.Option(None, "--self-deps", help="A node depending on itself: drop (default) or keep (it never runs: deadlock).")
CTRL_DEPS = typer.Option(None, "--ctrl-deps", help="auto (default: wait for ctrl_deps unless they close a cycle the data_deps do not, as call-tree links from older Chakra converters do; then ignore that file's), wait (ASTRA-sim) or ignore.")
CPU_COMM = typer.Option(None, "--cpu-comm", help="COMM nodes with is_cpu_op = true: cpu (default: timed as CPU ops by their duration) or error.")
INT_BOOLS = typer.Option(None, "--int-bools", help="is_cpu_op written as an integer: accept (default) or error.")
INVALID_NODES = typer.Option(None, "--invalid-nodes", help="INVALID_NODE (type 0): skip (default, as ASTRA-sim does) or error.")
INCOMPLETE = typer.Option(None, "--incomplete", help="COMM nodes without comm_type / comm_size / peer: error (default) or skip (replayed as no-ops).")
OTHER_TIMES = typer.Option(None, "--other-times/--no-other-times", help="MEM_LOAD/STORE and METADATA nodes take their duration_micros (default on; --strict: 0 ns).")


def read_policy(strict: bool, **choices) -> ReadPolicy:
    """The read policy of the flags: ``--strict`` or the defaults, then each flag given."""
    base = ReadPolicy.strict() if strict else ReadPolicy()
    return replace(base, **{name: value for name, value in choices.items() if value is not None})
