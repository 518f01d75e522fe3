"""Workload: a training step as every rank's nodes, the domain type the replays and reports share.

A workload is what a training step looks like to ASTRA-sim: COMP nodes (a duration), COMM_COLL
nodes (a collective, its size, optional process group), point-to-point COMM_SEND / COMM_RECV
nodes (peer, size, tag), MEM_LOAD / MEM_STORE and METADATA nodes, ordered by dependencies. The
node kinds are the package's own (:class:`NodeKind`); a format reader translates its file's
types into them (:func:`~chakra_collectives.converters.chakra_et.workload_reader.read_workload`
for Chakra ETs), as producers and readers build :class:`~chakra_collectives.ir.CollectiveAlgorithm`.

>>> NodeKind.COMM_COLL.name, node_type_name(NodeKind.COMP), collective_name(0)
('COMM_COLL', 'COMP', 'all-reduce')
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir.collective import Collective


class NodeKind(IntEnum):
    """What a workload node does (numbered as Chakra's ``NodeType``, so reading is a table lookup)."""

    INVALID = 0
    """Finishes at once (a node a reader kept but cannot run)."""
    METADATA = 1
    MEM_LOAD = 2
    MEM_STORE = 3
    COMP = 4
    COMM_SEND = 5
    COMM_RECV = 6
    COMM_COLL = 7


COMMUNICATION = (NodeKind.COMM_COLL, NodeKind.COMM_SEND, NodeKind.COMM_RECV)
"""The kinds that use the network."""
OTHER_TIMED = (NodeKind.MEM_LOAD, NodeKind.MEM_STORE, NodeKind.METADATA)
"""The kinds that take their duration on a rank like COMP does."""

NO_COLLECTIVE = -1
"""``comm_type`` of nodes that are not collectives."""
BARRIER_COMM_TYPE = 9
"""``comm_type`` of a barrier (Chakra's ``BARRIER``): a collective that moves no data."""


def node_type_name(node_type: int) -> str:
    """The name of a node kind (``COMM_COLL``).

    >>> node_type_name(7), node_type_name(NodeKind.METADATA)
    ('COMM_COLL', 'METADATA')
    """
    return NodeKind(node_type).name


def collective_name(comm_type: int) -> str:
    """``all-reduce``, ``barrier``, or ``comm_type N`` for a collective the package has no name for.

    >>> collective_name(BARRIER_COMM_TYPE), collective_name(42)
    ('barrier', 'comm_type 42')
    """
    if comm_type == BARRIER_COMM_TYPE:
        return "barrier"
    try:
        return Collective.from_chakra_comm_type(comm_type).value
    except InputError:
        return f"comm_type {comm_type}"


GPU, CPU, COMM = 0, 1, 2
"""The units of a rank under ASTRA-sim's per-rank rule (:func:`execution_units`)."""
UNITS_PER_RANK = 3
NO_UNIT = -1


def execution_units(workload: "Workload") -> np.ndarray:
    """The unit each node holds while it runs under ASTRA-sim's rule -- per rank at most one GPU
    COMP, one CPU op and one communication in flight: a COMP node holds its rank's :data:`GPU`
    (:data:`CPU` if ``is_cpu_op``), a SEND or a collective :data:`COMM`; receives and the other
    kinds hold nothing (:data:`NO_UNIT`). Both replays apply it (the network model's
    ``concurrency="astra-sim"`` and the model of ASTRA-sim's system layer).

    >>> from types import SimpleNamespace
    >>> kinds = np.array([NodeKind.COMP, NodeKind.COMP, NodeKind.COMM_SEND, NodeKind.COMM_RECV, NodeKind.COMM_COLL])
    >>> execution_units(SimpleNamespace(node_type=kinds, is_cpu_op=np.array([0, 1, 0, 0, 0], dtype=bool))).tolist()
    [0, 1, 2, -1, 2]
    """
    kind = workload.node_type
    unit = np.full(len(kind), NO_UNIT, dtype=np.int8)
    comp = kind == NodeKind.COMP
    unit[comp] = np.where(workload.is_cpu_op[comp], CPU, GPU)
    unit[(kind == NodeKind.COMM_SEND) | (kind == NodeKind.COMM_COLL)] = COMM
    return unit


class ReadingNotes(Protocol):
    """What a reader repaired while reading a workload (the reader's own record)."""

    def describe(self) -> list[str]:
        """One phrase per kind of repair."""

    def summary(self) -> str | None:
        """The one line to show (``None``: nothing to say)."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Every node of every rank, grouped by rank in file order (numpy columns)."""

    prefix: str
    num_ranks: int
    rank: np.ndarray
    node_id: np.ndarray
    node_type: np.ndarray
    """A :class:`NodeKind` per node."""
    duration_ns: np.ndarray
    """COMP (and, by default, MEM / METADATA) nodes: their duration; 0 elsewhere."""
    is_cpu_op: np.ndarray
    comm_type: np.ndarray
    """COMM_COLL: the collective as :attr:`Collective.chakra_comm_type` numbers it (or
    :data:`BARRIER_COMM_TYPE`); :data:`NO_COLLECTIVE` elsewhere."""
    comm_size: np.ndarray
    peer: np.ndarray
    """SEND: the destination rank; RECV: the source rank; -1 elsewhere."""
    tag: np.ndarray
    pg_name: list[str | None]
    involved_dim: list[tuple[bool, ...] | None]
    """COMM_COLL: which network dimensions take part (ASTRA-sim's ``involved_dim``), if given."""
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    """Dependencies (data and control, without those implied by others) as global node
    indices, CSR."""
    paths: list[Path]
    repairs: ReadingNotes
    """What reading repaired (:meth:`ReadingNotes.summary` is the one line to show)."""

    def __len__(self) -> int:
        return len(self.rank)

    def rank_bounds(self) -> np.ndarray:
        # queries of the ranks' own type: mixed types would convert (copy) all of self.rank per call
        return np.searchsorted(self.rank, np.arange(self.num_ranks + 1, dtype=np.result_type(self.rank.dtype, np.int32)))

    def where(self, index: int) -> dict[str, Any]:
        """``path``/``rank``/``node`` of node ``index`` for error messages."""
        rank = int(self.rank[index])
        return {"path": self.paths[rank], "rank": rank, "node": int(self.node_id[index])}

    def describe(self, index: int) -> str:
        """``node 7 COMM_COLL all-reduce``-style label."""
        kind = int(self.node_type[index])
        label = f"node {int(self.node_id[index])} {node_type_name(kind)}"
        if kind == NodeKind.COMM_COLL:
            label += f" {collective_name(int(self.comm_type[index]))}"
        elif kind in (NodeKind.COMM_SEND, NodeKind.COMM_RECV):
            arrow = "to" if kind == NodeKind.COMM_SEND else "from"
            label += f" {arrow} rank {int(self.peer[index])} tag {int(self.tag[index])}"
        return label


__all__ = [
    "BARRIER_COMM_TYPE",
    "COMM",
    "COMMUNICATION",
    "CPU",
    "GPU",
    "NO_COLLECTIVE",
    "NO_UNIT",
    "OTHER_TIMED",
    "UNITS_PER_RANK",
    "NodeKind",
    "ReadingNotes",
    "Workload",
    "collective_name",
    "execution_units",
    "node_type_name",
]
