"""The one vocabulary of the commands: every option that means the same thing is spelled the
same way, parsed the same way, and documented once here.

============================ ================================================================
option                       meaning (Python keyword; JSON key)
============================ ================================================================
``-t, --topology SPEC|FILE`` a builder spec (``torus2d:4x4``) or a topology file (``topology``)
``-c, --collective NAME``    a collective type: all-reduce, all-gather, ... (``collective``)
``-s, --size SIZE``          bytes with binary suffixes: 64MiB, 1GB, 4096 (``size_bytes``)
``-k, --chunks-per-npu K``   chunks of each NPU's share (``chunks_per_npu``)
``-a, --algorithm``          synth: a producer (tacos, ring, ...); replay: files for a
                             collective type, ``TYPE=PREFIX`` (``algorithm``)
``--root R``                 root rank of broadcast / reduce (``root``)
``--network-model M``        ``default`` or ``astra-sim`` (``network_model``)
``--reduce-bandwidth-gbps``  GB/s of reductions that carry no duration (``reduce_bandwidth_gbps``)
``-o, --output PATH``        where to write (a prefix, a file or a folder)
``--json``                   print a JSON document (``schemas/COMMAND.schema.json``)
============================ ================================================================

Old spellings (``replay -c TYPE=PREFIX``, ``--mode``, ``--reduce-bandwidth``,
``--reduce-gbps``, ``demo --out``, network model ``tacos``) still work for one release and
print a deprecation warning (:func:`deprecated`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import typer

from chakra_collectives.errors import InputError

T = TypeVar("T")


def collective_option(value: str | None) -> Any:
    from chakra_collectives.ir import Collective

    return None if value is None else Collective.parse(value)


def size_option(value: str | None) -> int | None:
    from chakra_collectives.units import parse_size

    return None if value is None else parse_size(value)


def prefix_option(text: str | None, default_name: str) -> Path | None:
    """``-o PREFIX``: files ``PREFIX.{rank}.et``. A value ending in ``/`` or naming an existing
    folder means inside it: ``DIR/default_name`` (never ``DIR.0.et`` beside it).

    >>> prefix_option("out/ar", "all_reduce"), prefix_option("out/", "all_reduce"), prefix_option(".", "w")
    (PosixPath('out/ar'), PosixPath('out/all_reduce'), PosixPath('w'))
    """
    if text is None:
        return None
    if text.endswith(("/", "\\")) or Path(text).is_dir():
        return Path(text) / default_name
    return Path(text)


def warn(message: str) -> None:
    """One warning line on stderr: ``chakra-coll: warning: ...``."""
    from chakra_collectives.cli.app import err_console

    err_console.print(f"chakra-coll: warning: {message}", markup=False, soft_wrap=True, highlight=False)


def deprecated(old: str, new: str) -> None:
    """Warn that option ``old`` is an old spelling of ``new`` (it goes in the next release)."""
    warn(f"{old} is deprecated and will be removed in the next release; use {new}")


def merged(new: T | None, new_name: str, old: T | None, old_name: str, default: T) -> T:
    """The value of an option given as ``new_name`` or under its old spelling ``old_name``.

    >>> merged(None, "--network-model", None, "--mode", "default")
    'default'
    >>> merged("astra-sim", "--network-model", None, "--mode", "default")
    'astra-sim'
    """
    if old is not None:
        if new is not None:
            raise InputError(f"give {new_name} or its old spelling {old_name}, not both")
        deprecated(old_name, new_name)
        return old
    return default if new is None else new


NETWORK_MODELS = ("default", "astra-sim")


def network_model_option(value: str | None, old: str | None = None) -> str:
    """``--network-model`` (or the deprecated ``--mode``); ``tacos``, its old name, maps to ``default``."""
    chosen = merged(value, "--network-model", old, "--mode", "default")
    if chosen == "tacos":
        deprecated("network model 'tacos'", "'default' (the same model)")
        chosen = "default"
    if chosen not in NETWORK_MODELS:
        raise InputError(f"unknown network model {chosen!r} (valid: {', '.join(NETWORK_MODELS)})")
    return chosen


TOPOLOGY = typer.Option(
    ..., "--topology", "-t", metavar="SPEC|FILE",
    help="A builder spec (ring:8, torus2d:4x4, switch:16, dgx:4x8, ...) or a topology file "
    "(our YAML/JSON, ASTRA-sim network YAML, GraphML, edge list).",
)
JSON = typer.Option(False, "--json", help="Print a JSON document instead (its schema: schemas/COMMAND.schema.json).")
NETWORK_MODEL = typer.Option(
    None, "--network-model", metavar="MODEL",
    help="The network model: default (a hop holds its link latency + bytes/bandwidth, exact "
    "ns; what TACOS plans with) or astra-sim (ASTRA-sim's congestion-aware analytical model, to "
    "the ns). Default: default.",
)
OLD_MODE = typer.Option(None, "--mode", hidden=True, help="Deprecated: --network-model.")
REDUCE_BANDWIDTH = typer.Option(
    None, "--reduce-bandwidth-gbps", metavar="GBPS",
    help="Reductions and copies that carry no duration take bytes / this bandwidth (GB/s, 1 GB = 2^30 bytes). Default: no time.",
)


# ---------------------------------------------------------------------- workload read policy
STRICT = typer.Option(False, "--strict", help="Refuse every quirk the defaults repair (ASTRA-sim's acceptance rules): today's refusals.")
DANGLING = typer.Option(None, "--dangling", metavar="drop|error", help="Dependencies on node ids not in the file: drop (default) or error.")
SELF_DEPS = typer.Option(None, "--self-deps", metavar="drop|keep", help="A node depending on itself: drop (default) or keep (it never runs: deadlock).")
CTRL_DEPS = typer.Option(
    None, "--ctrl-deps", metavar="auto|wait|ignore",
    help="auto (default: wait for ctrl_deps unless they close a cycle the data_deps do not, as call-tree links from older Chakra converters do; then ignore that file's), wait (ASTRA-sim) or ignore.",
)
CPU_COMM = typer.Option(None, "--cpu-comm", metavar="cpu|error", help="COMM nodes with is_cpu_op = true: cpu (default: timed as CPU ops by their duration) or error.")
INT_BOOLS = typer.Option(None, "--int-bools", metavar="accept|error", help="is_cpu_op written as an integer: accept (default) or error.")
INVALID_NODES = typer.Option(None, "--invalid-nodes", metavar="skip|error", help="INVALID_NODE (type 0): skip (default, as ASTRA-sim does) or error.")
INCOMPLETE = typer.Option(None, "--incomplete", metavar="error|skip", help="COMM nodes without comm_type / comm_size / peer: error (default) or skip (replayed as no-ops).")
OTHER_TIMES = typer.Option(None, "--other-times/--no-other-times", help="MEM_LOAD/STORE and METADATA nodes take their duration_micros (default on; --strict: 0 ns).")


def read_policy(strict: bool, **choices: Any) -> Any:
    """The read policy of the flags: ``--strict`` or the defaults, then each flag given."""
    from chakra_collectives.converters.chakra_et.read_policy import ReadPolicy

    base = ReadPolicy.strict() if strict else ReadPolicy()
    return replace(base, **{name: value for name, value in choices.items() if value is not None})
