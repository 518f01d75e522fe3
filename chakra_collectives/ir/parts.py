"""An algorithm that is never whole in memory: lowered one range of ranks at a time.

A producer whose operations of a range of ranks can be built from its own compact description
(TACOS's All-Gather: the schedule, :func:`~chakra_collectives.synth.lowering.all_gather_algorithm`
with ``ranks``) may hand its caller an :class:`AlgorithmParts` when the caller only writes the
algorithm and reports its summary (``synth -o`` at large sizes): the writer
(:func:`~chakra_collectives.converters.chakra_et.write_parts`) lowers, encodes and frees one part
at a time, so the whole operation table is never laid out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from chakra_collectives.ir.algorithm import CollectiveAlgorithm
from chakra_collectives.ir.collective import Collective


PART_OPS = 2**22
"""Operations a writer (:func:`~chakra_collectives.converters.chakra_et.write_parts`) lowers at
once in each writing process (a part's operation table: about 200 MiB); here, with the parts,
so that an estimate reads it without importing the ET schema."""


@dataclass(frozen=True)
class AlgorithmParts:
    """What a :class:`~chakra_collectives.ir.algorithm.CollectiveAlgorithm` summary reports, and
    ``lower(ranks)``: the algorithm holding only the operations of ``ranks``, exactly as the
    whole algorithm has them (rank ``r`` has ``ops_per_rank[r]``).

    >>> parts = AlgorithmParts(Collective.ALL_GATHER, 4, 4, 10**6, np.array([7, 7, 7, 7]), lambda ranks: None)
    >>> parts.num_ops, parts.chunk_bytes()            # ceil(10**6 / 4 chunks)
    (28, 250000)
    """

    collective: Collective
    num_ranks: int
    chunk_count: int
    size_bytes: int
    ops_per_rank: np.ndarray
    lower: Callable[[range], CollectiveAlgorithm] = field(repr=False)
    provenance: dict[str, str] = field(default_factory=dict)
    """What the parts' ET metadata say of where the algorithm came from (as
    :attr:`CollectiveAlgorithm.provenance <chakra_collectives.ir.algorithm.CollectiveAlgorithm.provenance>`)."""
    further_runs: int = 0
    """Chunk runs beyond their operation's first, all operations together (messages of several
    runs): a part holds them beside its operations, so a writer takes fewer operations a part."""

    @property
    def num_ops(self) -> int:
        return int(np.sum(self.ops_per_rank))

    def part_ops(self, limit: int) -> int:
        """How many operations a part may hold where ``limit`` would be the most without further
        runs: ``limit`` with each further run counted as an operation (on average).

        >>> AlgorithmParts(Collective.ALL_GATHER, 4, 4, 10**6, np.array([7, 7, 7, 7]), lambda ranks: None, further_runs=84).part_ops(100)
        25
        """
        ops = self.num_ops
        return max(1, limit * ops // (ops + self.further_runs)) if ops else limit

    def chunk_bytes(self, size_bytes: int | None = None) -> int:
        """Bytes of one chunk for a collective of ``size_bytes`` (default :attr:`size_bytes`)."""
        size = self.size_bytes if size_bytes is None else size_bytes
        return -(-size // self.chunk_count)


__all__ = ["AlgorithmParts", "PART_OPS"]
