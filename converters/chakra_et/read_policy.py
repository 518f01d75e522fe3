"""How a workload reader treats files that ASTRA-sim's own examples never contain.

Every quirk of converter-made traces has one policy, named after it; the defaults replay the
traces people have, :meth:`ReadPolicy.strict` refuses all of them (what ASTRA-sim accepts
without hanging or throwing):

================= ============================================ ==========================
policy            default                                      strict
================= ============================================ ==========================
``dangling``      drop dependencies on absent node ids         refuse
``self_deps``     drop a node's dependency on itself           keep (replay: deadlock)
``ctrl_deps``     ``auto``: ignore a file's ctrl_deps when      ``wait`` (ASTRA-sim)
                  they close a cycle its data_deps do not
``cpu_comm``      COMM nodes with ``is_cpu_op = true`` are     refuse (ASTRA-sim throws)
                  timed as CPU ops by their duration
``int_bools``     ``is_cpu_op`` as an integer: nonzero = true  refuse
``invalid_nodes`` INVALID_NODE (type 0) finishes at once, as   refuse
                  ASTRA-sim skips it
``incomplete``    ``error`` naming the node (``skip``: a        error
                  COMM node without ``comm_type``/``comm_size``
                  becomes a no-op)
``other_times``   MEM_LOAD/STORE and METADATA nodes take       0 ns
                  their ``duration_micros``
================= ============================================ ==========================

>>> ReadPolicy().ctrl_deps, ReadPolicy.strict().ctrl_deps
('auto', 'wait')
>>> ReadPolicy(cpu_comm="maybe")
Traceback (most recent call last):
...
chakra_collectives.errors.InputError: unknown cpu-comm policy 'maybe' (valid: cpu, error)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    INVALID_NODE,
    MEM_LOAD_NODE,
    MEM_STORE_NODE,
    METADATA_NODE,
    NodeType,
)

from chakra_collectives.converters.chakra_et.nodes import NodeColumns, as_integer, decode_rank_files
from chakra_collectives.converters.chakra_et.repairs import CTRL_DEPS, DANGLING, SELF_DEPS, DependencyPolicy, DependencyRepairs
from chakra_collectives.errors import InputError

CHOICES = {
    "dangling": DANGLING,
    "self_deps": SELF_DEPS,
    "ctrl_deps": CTRL_DEPS,
    "cpu_comm": ("cpu", "error"),
    "int_bools": ("accept", "error"),
    "invalid_nodes": ("skip", "error"),
    "incomplete": ("error", "skip"),
}


def _name(code: int) -> str:
    return NodeType.Name(code).removesuffix("_NODE")


@dataclass(frozen=True)
class ReadPolicy:
    """One choice per quirk (see the module docstring)."""

    dangling: str = "drop"
    self_deps: str = "drop"
    ctrl_deps: str = "auto"
    cpu_comm: str = "cpu"
    int_bools: str = "accept"
    invalid_nodes: str = "skip"
    incomplete: str = "error"
    other_times: bool = True

    def __post_init__(self) -> None:
        for name, valid in CHOICES.items():
            if getattr(self, name) not in valid:
                raise InputError(f"unknown {name.replace('_', '-')} policy {getattr(self, name)!r} (valid: {', '.join(valid)})")

    @classmethod
    def strict(cls) -> "ReadPolicy":
        """Refuse every quirk (ASTRA-sim's acceptance rules)."""
        return cls(dangling="error", self_deps="keep", ctrl_deps="wait", cpu_comm="error", int_bools="error",
                   invalid_nodes="error", incomplete="error", other_times=False)

    @property
    def dependencies(self) -> DependencyPolicy:
        return DependencyPolicy(dangling=self.dangling, self_deps=self.self_deps, ctrl_deps=self.ctrl_deps)


@dataclass
class Repairs:
    """What reading repaired, for the one-line summary."""

    dependencies: DependencyRepairs = field(default_factory=DependencyRepairs)
    cpu_comm: dict[str, int] = field(default_factory=dict)
    """CPU-side COMM nodes timed as CPU ops, by type (``COMM_COLL without comm_type``...)."""
    int_bools: int = 0
    invalid: int = 0
    incomplete: dict[str, int] = field(default_factory=dict)

    def describe(self) -> list[str]:
        parts = self.dependencies.describe()
        for label, count in self.cpu_comm.items():
            parts.append(f"{count:,} CPU-side {label} timed as CPU ops")
        if self.int_bools:
            parts.append(f"read {self.int_bools:,} integer is_cpu_op as booleans")
        if self.invalid:
            parts.append(f"skipped {self.invalid:,} INVALID_NODE{'s' if self.invalid > 1 else ''} (as ASTRA-sim does)")
        for label, count in self.incomplete.items():
            parts.append(f"{count:,} {label} replayed as no-ops")
        return parts

    def summary(self) -> str | None:
        """``repaired: dropped 1,277 ctrl_deps to absent nodes, ...`` (``None``: nothing to say)."""
        parts = self.describe()
        return "repaired: " + "; ".join(parts) if parts else None


_KNOWN_TYPES = np.array(list(NodeType.values()))
_COMM = (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE)
OTHER_TIMED = (MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE)


def _as_flag(kind: str | None, value: Any) -> int | None:
    """is_cpu_op: 1/0 for a bool, 3/2 for an integer (so both the value and the kind survive)."""
    if kind == "bool_val":
        return int(bool(value))
    if as_integer(kind, value) is not None:
        return 2 + int(bool(value))
    return None


def cpu_flags(nodes: NodeColumns, policy: ReadPolicy, repairs: Repairs) -> np.ndarray:
    """``is_cpu_op`` of every node (absent: false), applying the ``int_bools`` policy."""
    present, ok, flag = nodes.attributes.converted("is_cpu_op", _as_flag, fill=0, dtype=np.int8)
    if np.any(present & ~ok):
        position = int(np.flatnonzero(present & ~ok)[0])
        raise nodes.error(position, f"attribute is_cpu_op is {nodes.attributes.kind_of('is_cpu_op', position)}; expected bool_val")
    integers = flag >= 2
    if np.any(integers):
        if policy.int_bools == "error":
            position = int(np.flatnonzero(integers)[0])
            raise nodes.error(position, f"attribute is_cpu_op is {nodes.attributes.kind_of('is_cpu_op', position)}; expected bool_val")
        repairs.int_bools = int(np.count_nonzero(integers))
    return (flag % 2).astype(bool)


def node_kinds(nodes: NodeColumns, policy: ReadPolicy, cpu: np.ndarray, repairs: Repairs) -> np.ndarray:
    """Node types after the ``invalid_nodes`` and ``cpu_comm`` policies: CPU-side COMM nodes
    become COMP nodes (``is_cpu_op`` stays true), INVALID nodes stay INVALID (no-ops)."""
    types = nodes.types.copy()
    unknown = ~np.isin(types, _KNOWN_TYPES)
    if np.any(unknown):
        position = int(np.flatnonzero(unknown)[0])
        raise nodes.error(position, f"unknown node type {int(types[position])}")
    invalid = types == INVALID_NODE
    if np.any(invalid):
        if policy.invalid_nodes == "error":
            raise nodes.error(int(np.flatnonzero(invalid)[0]), "INVALID_NODE (type 0): ASTRA-sim skips it; refused by --strict")
        repairs.invalid = int(np.count_nonzero(invalid))
    cpu_side = np.isin(types, _COMM) & cpu
    if np.any(cpu_side):
        if policy.cpu_comm == "error":
            raise nodes.error(int(np.flatnonzero(cpu_side)[0]), "a communication node has is_cpu_op = true (ASTRA-sim throws)")
        has_type = nodes.attributes.lookup("comm_type") >= 0
        for code in _COMM:
            for carries, suffix in ((True, ""), (False, " without comm_type")):
                chosen = cpu_side & (types == code) & (has_type == carries if code == COMM_COLL_NODE else carries)
                count = int(np.count_nonzero(chosen))
                if count:
                    label = f"{_name(code)}{suffix if code == COMM_COLL_NODE else ''}"
                    repairs.cpu_comm[label] = repairs.cpu_comm.get(label, 0) + count
        types[cpu_side] = COMP_NODE
    return types


def durations_ns(nodes: NodeColumns, types: np.ndarray, policy: ReadPolicy) -> np.ndarray:
    """COMP nodes take ``duration_micros``; MEM/METADATA nodes too under ``other_times``."""
    timed = types == COMP_NODE
    if policy.other_times:
        timed |= np.isin(types, OTHER_TIMED)
    return np.where(timed, nodes.duration_micros * 1000.0, 0.0)


def incomplete_comm(nodes: NodeColumns, types: np.ndarray, required: dict[str, np.ndarray], policy: ReadPolicy, repairs: Repairs) -> np.ndarray:
    """COMM nodes that lack a required attribute: an error naming the node, or (``skip``) a mask
    of nodes to replay as no-ops. ``required`` maps an attribute to the nodes that need it."""
    skipped = np.zeros(len(types), dtype=bool)
    for name, needs in required.items():
        absent = needs & (nodes.attributes.lookup(name) < 0)
        if not np.any(absent):
            continue
        if policy.incomplete == "error":
            position = int(np.flatnonzero(absent)[0])
            raise nodes.error(position, f"{_name(int(types[position]))} node has no attribute {name} (--incomplete skip replays it as a no-op)")
        for code in np.unique(types[absent]).tolist():
            label = f"{_name(code)} without {name}"
            repairs.incomplete[label] = repairs.incomplete.get(label, 0) + int(np.count_nonzero(absent & (types == code)))
        skipped |= absent
    return skipped


def is_workload(paths: list) -> bool:
    """Whether rank files hold a workload rather than a collective algorithm: any COMM_COLL,
    MEM, METADATA or INVALID node, any CPU node, or no message at all (read from rank 0)."""
    nodes = decode_rank_files(paths[:1], missing="keep")
    types = nodes.types
    if np.any(~np.isin(types, (COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE))):
        return True
    if not np.any(np.isin(types, (COMM_SEND_NODE, COMM_RECV_NODE))):
        return True
    _, _, flag = nodes.attributes.converted("is_cpu_op", _as_flag, fill=0, dtype=np.int8)
    return bool(np.any(flag % 2 == 1))
