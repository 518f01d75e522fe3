"""File-level entry points: read MSCCL-IR into the IR, write the IR as MSCCL-IR.

>>> import pathlib, tempfile
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.verify import verify_algorithm
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = pathlib.Path(tmp) / "ring.xml"
...     _ = write_msccl(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), path)
...     again = read_msccl(path, 2**20)
>>> again.describe(), verify_algorithm(again).ok
('all-reduce over 4 ranks, 4 chunks, 60 ops (ring)', True)
"""

from __future__ import annotations

import warnings
from pathlib import Path

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective, CollectiveAlgorithm
from chakra_collectives.converters.chakra_et.writer import write_files_atomically
from chakra_collectives.converters.msccl.lift import Lifted, lift_algorithm
from chakra_collectives.converters.msccl.lower import lower_program
from chakra_collectives.converters.msccl.options import MscclOptions
from chakra_collectives.converters.msccl.program import Program
from chakra_collectives.converters.msccl.xml_reader import parse_documents, read_text
from chakra_collectives.converters.msccl.xml_writer import format_program


class MscclWarning(UserWarning):
    """Something the MSCCL runtime would reject or hang on, in an otherwise well-defined algorithm."""


def read_programs(path: str | Path) -> list[Program]:
    """Every ``<algo>`` document of the file, parsed (text around and between them is ignored)."""
    return parse_documents(read_text(path), path)


def read_msccl(
    path: str | Path,
    size_bytes: int,
    *,
    index: int | None = None,
    collective: Collective | None = None,
    root: int | None = None,
) -> CollectiveAlgorithm:
    """Import an MSCCL-IR file as the algorithm it describes, for a collective of ``size_bytes``.

    ``size_bytes`` is the size of the larger per-rank buffer (ASTRA-sim's ``comm_size``); a step
    moves ``cnt * ceil(size_bytes / nchunksperloop)`` bytes. ``index`` picks one of several
    ``<algo>`` documents (required when there are several); ``collective`` overrides the XML's
    ``coll`` label and ``root`` a broadcast/reduce root. Runtime-limit problems are issued as
    :class:`MscclWarning`; errors are :class:`~chakra_collectives.errors.ChakraCollError` naming
    the XML line. The two stages are :func:`read_programs` (with :func:`choose_program`) and
    :func:`~chakra_collectives.converters.msccl.lower.lower_program`, which returns the
    warnings instead of issuing them.
    """
    program = choose_program(read_programs(path), index, path)
    lowered = lower_program(program, size_bytes=size_bytes, path=path, collective=collective, root=root)
    for message in lowered.warnings:
        warnings.warn(MscclWarning(message), stacklevel=2)
    return lowered.algorithm


def choose_program(programs: list[Program], index: int | None, path: str | Path | None) -> Program:
    """The document ``index`` selects; with no index the file must hold exactly one."""
    if index is None:
        if len(programs) == 1:
            return programs[0]
        listing = "; ".join(f"{i}: {p.name or '(unnamed)'} ({p.coll}, {p.ngpus} gpus, line {p.line})" for i, p in enumerate(programs))
        raise InputError(f"holds {len(programs)} <algo> documents, choose one with --index: {listing}", path=path)
    if not 0 <= index < len(programs):
        raise InputError(f"--index {index}: the file holds {len(programs)} <algo> document(s) (0..{len(programs) - 1})", path=path)
    return programs[index]


def write_msccl(algo: CollectiveAlgorithm, path: str | Path, options: MscclOptions | None = None) -> Program:
    """:func:`export_msccl`'s program (the XML written to ``path``)."""
    return export_msccl(algo, path, options).program


def export_msccl(algo: CollectiveAlgorithm, path: str | Path, options: MscclOptions | None = None) -> Lifted:
    """Write ``algo`` as an MSCCL-IR XML file the MSCCL runtime loads; return the program with
    what was checked (:class:`~chakra_collectives.converters.msccl.lift.Lifted`).

    ``options`` (:class:`MscclOptions`): fusion of receive chains, fitting the runtime's limits,
    the protocol, the name and the size range the runtime should use the algorithm for.
    Runtime-limit problems are issued as :class:`MscclWarning` (the stage that returns them
    instead is :func:`~chakra_collectives.converters.msccl.lift.lift_algorithm`). The file is
    written under a temporary name and renamed, so a failure leaves nothing behind.
    """
    lifted = lift_algorithm(algo, options)
    write_files_atomically([Path(path)], [format_program(lifted.program).encode("utf-8")])
    for message in lifted.warnings:
        warnings.warn(MscclWarning(message), stacklevel=3)
    return lifted


__all__ = ["MscclWarning", "choose_program", "export_msccl", "read_msccl", "read_programs", "write_msccl"]
