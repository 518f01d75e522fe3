"""Dependency repairs for workload files other tools wrote: one explicit policy per quirk.

Traces converted from PyTorch by older Chakra converters list, in ``ctrl_deps``, the *calling*
operator of each node (the call tree) rather than an ordering: ids of nodes the converter left
out, the node's own id, and parents that close cycles with the ``data_deps``. ASTRA-sim's
feeder waits for both kinds of dependency, so such files hang there; these policies say what
to do instead (defaults first):

* ``dangling``: ``drop`` dependencies on node ids that are not in the file, or ``error``;
* ``self_deps``: ``drop`` a node's dependency on itself, or ``keep`` it (it never runs);
* ``ctrl_deps``: ``auto`` waits for ``ctrl_deps`` unless, in a file, they close a dependency
  cycle that the ``data_deps`` alone do not have -- then that file's ``ctrl_deps`` are call-tree
  links and are all ignored; ``wait`` always waits (ASTRA-sim), ``ignore`` never (Chakra's
  original feeder).

Each distinct dependency structure is decided once. The result also leaves out dependencies
implied by others (a node waiting for what one of its other dependencies already waits for,
or for the same node twice): every node becomes ready exactly when it did, and a replay has
far fewer edges to follow (Chakra's feeder trace: 181,878 -> 3,784).

>>> import numpy as np
>>> from chakra_collectives.converters.chakra_et.nodes import decode_files, NodeColumns
>>> from chakra_collectives.converters.chakra_et.stream import frame
>>> from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
>>> nodes = [Node(id=0, type=4), Node(id=1, type=4, data_deps=[0], ctrl_deps=[1, 7])]
>>> data = frame(GlobalMetadata().SerializeToString()) + b"".join(frame(n.SerializeToString()) for n in nodes)
>>> columns = decode_files([(data, "w.0.et", 0)], missing="keep")
>>> dep_ptr, dep_idx, repairs = repair_dependencies(columns, DependencyPolicy())
>>> dep_idx.tolist(), repairs.describe()
([0], ['dropped 1 ctrl_dep to absent nodes', 'dropped 1 self-dependency'])
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from chakra_collectives.converters.chakra_et.nodes import NodeColumns
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir.dag import find_cycle, transitive_reduction

DANGLING = ("drop", "error")
SELF_DEPS = ("drop", "keep")
CTRL_DEPS = ("auto", "wait", "ignore")


@dataclass(frozen=True)
class DependencyPolicy:
    dangling: str = "drop"
    self_deps: str = "drop"
    ctrl_deps: str = "auto"

    def __post_init__(self) -> None:
        for name, valid in (("dangling", DANGLING), ("self_deps", SELF_DEPS), ("ctrl_deps", CTRL_DEPS)):
            if getattr(self, name) not in valid:
                raise InputError(f"unknown {name.replace('_', '-')} policy {getattr(self, name)!r} (valid: {', '.join(valid)})")


@dataclass
class DependencyRepairs:
    """What :func:`repair_dependencies` changed (counts over all ranks)."""

    dangling_data: int = 0
    dangling_ctrl: int = 0
    self_deps: int = 0
    ignored_ctrl: int = 0
    cycle: list[str] = field(default_factory=list)
    """The cycle that made a file's ctrl_deps be ignored, as labels (``rank R node N``, ``node M``, ...)."""

    def describe(self) -> list[str]:
        parts = []
        if self.dangling_ctrl or self.dangling_data:
            kinds = [f"{n:,} {kind}" for n, kind in ((self.dangling_ctrl, "ctrl_dep"), (self.dangling_data, "data_dep")) if n]
            plural = "s" if (self.dangling_ctrl + self.dangling_data) > 1 else ""
            parts.append(f"dropped {' and '.join(kinds)}{plural} to absent nodes")
        if self.self_deps:
            parts.append(f"dropped {self.self_deps:,} self-dependenc{'ies' if self.self_deps > 1 else 'y'}")
        if self.ignored_ctrl and self.cycle:
            shown = " -> ".join(self.cycle)
            parts.append(f"ignored {self.ignored_ctrl:,} ctrl_deps (call-tree links: with them {shown} is a cycle)")
        elif self.ignored_ctrl:
            parts.append(f"ignored {self.ignored_ctrl:,} ctrl_deps (--ctrl-deps ignore)")
        return parts


def repair_dependencies(nodes: NodeColumns, policy: DependencyPolicy) -> tuple[np.ndarray, np.ndarray, DependencyRepairs]:
    """The dependencies to replay (CSR over node positions) and what was repaired.

    ``nodes`` must be decoded with ``missing="keep"`` unless the policy refuses dangling ids.
    Each distinct dependency structure is repaired once: byte-identical copies, and ranks whose
    files differ only in durations or attributes (SPMD ranks), reuse the result.
    """
    repairs = DependencyRepairs()
    done: dict[int, tuple[np.ndarray, np.ndarray, _FileRepairs]] = {}
    structures: dict[tuple, tuple[int, tuple[np.ndarray, ...]]] = {}
    counts, positions = [], []
    for index, file in enumerate(nodes.files):
        first = int(nodes.file_ptr[index])
        source = file.same_as if file.same_as is not None and file.same_as in done else index
        if source == index:
            key, arrays = _structure(nodes, index)
            source, seen = structures.setdefault(key, (index, arrays))
            if source != index and not all(np.array_equal(a, b) for a, b in zip(seen, arrays)):
                source = index  # the checksums collided
            if source == index:
                done[index] = _repair_file(nodes, index, policy)
        kept_counts, kept_local, stats = done[source]
        stats.add_to(repairs)
        counts.append(kept_counts)
        positions.append(kept_local + first)
    per_node = np.concatenate(counts)
    dep_ptr = np.zeros(len(per_node) + 1, dtype=np.int64)
    np.cumsum(per_node, out=dep_ptr[1:])
    return dep_ptr, np.concatenate(positions).astype(np.int64, copy=False), repairs


def _structure(nodes: NodeColumns, index: int) -> tuple[tuple, tuple[np.ndarray, ...]]:
    """A checksum of one file's dependency structure and the structure itself: dependency
    counts, positions in the file, kinds."""
    first, last = int(nodes.file_ptr[index]), int(nodes.file_ptr[index + 1])
    lo, hi = int(nodes.dep_ptr[first]), int(nodes.dep_ptr[last])
    local = np.where(nodes.dep_pos[lo:hi] >= 0, nodes.dep_pos[lo:hi] - first, -1)
    counts = np.diff(nodes.dep_ptr[first : last + 1])
    ctrl = nodes.dep_ctrl[lo:hi]
    key = (last - first, hi - lo, zlib.crc32(counts.tobytes()), zlib.crc32(local.tobytes()), zlib.crc32(ctrl.tobytes()))
    return key, (counts, local, ctrl)


@dataclass
class _FileRepairs:
    dangling_data: int = 0
    dangling_ctrl: int = 0
    self_deps: int = 0
    ignored_ctrl: int = 0
    cycle: list[str] = field(default_factory=list)

    def add_to(self, total: DependencyRepairs) -> None:
        total.dangling_data += self.dangling_data
        total.dangling_ctrl += self.dangling_ctrl
        total.self_deps += self.self_deps
        total.ignored_ctrl += self.ignored_ctrl
        if self.cycle and not total.cycle:
            total.cycle = self.cycle


def _repair_file(nodes: NodeColumns, index: int, policy: DependencyPolicy) -> tuple[np.ndarray, np.ndarray, _FileRepairs]:
    """One file's kept dependency counts per node and positions (relative to the file)."""
    first, last = int(nodes.file_ptr[index]), int(nodes.file_ptr[index + 1])
    lo, hi = int(nodes.dep_ptr[first]), int(nodes.dep_ptr[last])
    size = last - first
    owner = np.repeat(np.arange(size), np.diff(nodes.dep_ptr[first : last + 1]))
    missing = nodes.dep_pos[lo:hi] < 0
    position = np.where(missing, -1, nodes.dep_pos[lo:hi] - first)
    ctrl = nodes.dep_ctrl[lo:hi]
    stats = _FileRepairs()
    if np.any(missing):
        if policy.dangling == "error":
            raise nodes.error(first + int(owner[np.argmax(missing)]), "depends on a node that is not in the file", AlgorithmError)
        stats.dangling_ctrl = int(np.count_nonzero(missing & ctrl))
        stats.dangling_data = int(np.count_nonzero(missing & ~ctrl))
    keep = ~missing
    if policy.self_deps == "drop":
        itself = position == owner
        stats.self_deps = int(np.count_nonzero(itself))
        keep &= ~itself
    if policy.ctrl_deps == "ignore" or (policy.ctrl_deps == "auto" and _ctrl_closes_cycle(owner, position, ctrl, keep, size, stats)):
        stats.ignored_ctrl = int(np.count_nonzero(keep & ctrl))
        keep &= ~ctrl
    if stats.cycle:
        rank = nodes.files[index].rank
        labels = [f"node {int(nodes.ids[first + i])}" for i in stats.cycle]
        stats.cycle = [f"rank {rank} {labels[0]}", *labels[1:], labels[0]]
    counts, kept = np.bincount(owner[keep], minlength=size), position[keep]
    implied = transitive_reduction(np.concatenate([[0], np.cumsum(counts)]), kept)
    if implied is not None:  # drop dependencies implied by others: the same readiness, far fewer edges
        counts, kept = np.bincount(owner[keep][implied], minlength=size), kept[implied]
    return counts, kept, stats


def _ctrl_closes_cycle(owner, position, ctrl, keep, size, stats: _FileRepairs) -> bool:
    """True when the kept dependencies have a cycle that the data_deps alone do not."""
    if not np.any(keep & ctrl):
        return False

    def cycle(mask: np.ndarray) -> list[int] | None:
        counts = np.bincount(owner[mask], minlength=size)
        return find_cycle(np.concatenate([[0], np.cumsum(counts)]), position[mask])

    found = cycle(keep)
    if found is None or cycle(keep & ~ctrl) is not None:
        return False
    stats.cycle = found
    return True
