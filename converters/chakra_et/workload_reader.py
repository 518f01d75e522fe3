"""Read a workload's Chakra ETs (``PREFIX.{rank}.et``, one per rank) into flat node columns.

A workload is what a training step looks like to ASTRA-sim: COMP nodes (``duration_micros``),
COMM_COLL nodes (``comm_type``, ``comm_size``, optional ``pg_name``), point-to-point
COMM_SEND / COMM_RECV nodes (``comm_dst`` / ``comm_src``, ``comm_size``, ``comm_tag``),
MEM_LOAD / MEM_STORE and METADATA nodes, ordered by ``data_deps`` and ``ctrl_deps`` (both are
waited for). The reader builds the domain type, :class:`~chakra_collectives.ir.workload.Workload`,
translating Chakra's node types into its :class:`~chakra_collectives.ir.workload.NodeKind`
(:data:`NODE_KINDS`). Files are framed and parsed
with the same helpers as algorithm files (:mod:`~chakra_collectives.converters.chakra_et.stream`);
each distinct attribute is decoded once.

>>> import tempfile, pathlib
>>> from chakra_collectives.converters.chakra_et.workload_writer import single_collective_workload
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = single_collective_workload(pathlib.Path(tmp) / "w", "all-reduce", 4, 2**20)
...     w = read_workload(pathlib.Path(tmp) / "w")
>>> w.num_ranks, len(w), NodeKind(int(w.node_type[0])).name, int(w.comm_size[0]), w.describe(0)
(4, 4, 'COMM_COLL', 1048576, 'node 0 COMM_COLL all-reduce')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import (
    BARRIER,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    INVALID_NODE,
    MEM_LOAD_NODE,
    MEM_STORE_NODE,
    METADATA_NODE,
)

from chakra_collectives.converters.chakra_et.columns_file import load_columns
from chakra_collectives.converters.chakra_et.footprint import reading_estimate
from chakra_collectives.resources import require
from chakra_collectives.converters.chakra_et.nodes import NodeColumns, decode_files, decode_rank_files
from chakra_collectives.converters.chakra_et.read_policy import (
    ReadPolicy,
    Repairs,
    cpu_flags,
    durations_ns,
    incomplete_comm,
    node_kinds,
)
from chakra_collectives.converters.chakra_et.repairs import repair_dependencies
from chakra_collectives.converters.chakra_et.reader import rank_files
from chakra_collectives.converters.chakra_et.stream import load_bytes, parse_nodes, split_records
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.ir.workload import NO_COLLECTIVE, NodeKind, Workload

NODE_KINDS = {
    INVALID_NODE: NodeKind.INVALID,
    METADATA_NODE: NodeKind.METADATA,
    MEM_LOAD_NODE: NodeKind.MEM_LOAD,
    MEM_STORE_NODE: NodeKind.MEM_STORE,
    COMP_NODE: NodeKind.COMP,
    COMM_SEND_NODE: NodeKind.COMM_SEND,
    COMM_RECV_NODE: NodeKind.COMM_RECV,
    COMM_COLL_NODE: NodeKind.COMM_COLL,
}
"""Chakra's node types -> the workload's node kinds."""
_KIND_OF_TYPE = np.zeros(max(NODE_KINDS) + 1, dtype=np.int8)
_KIND_OF_TYPE[list(NODE_KINDS)] = list(NODE_KINDS.values())


def _as_string(kind: str | None, value: Any) -> str | None:
    return str(value) if kind == "string_val" else None


def _as_bool_list(kind: str | None, value: Any) -> tuple[bool, ...] | None:
    return tuple(bool(v) for v in value) if kind == "bool_list" else None


_COLLECTIVE_TYPES = np.array([c.chakra_comm_type for c in Collective if c.chakra_comm_type is not None] + [BARRIER])


def _decode_nodes(nodes: NodeColumns, policy: ReadPolicy, repairs: Repairs) -> dict[str, Any]:
    """Workload columns of every node under ``policy`` (every refusal names the first offending node)."""
    attrs = nodes.attributes
    cpu = cpu_flags(nodes, policy, repairs)
    types = node_kinds(nodes, policy, cpu, repairs)
    coll, send, recv = types == COMM_COLL_NODE, types == COMM_SEND_NODE, types == COMM_RECV_NODE
    comm = coll | send | recv
    no_op = incomplete_comm(nodes, types, {"comm_type": coll, "comm_size": comm, "comm_dst": send, "comm_src": recv}, policy, repairs)
    if np.any(no_op):
        types[no_op] = INVALID_NODE
        coll, send, recv, comm = coll & ~no_op, send & ~no_op, recv & ~no_op, comm & ~no_op
    size = attrs.integer("comm_size", nodes)
    comm_type = attrs.integer("comm_type", nodes)
    bad_type = coll & ~np.isin(comm_type, _COLLECTIVE_TYPES)
    if np.any(bad_type):
        position = int(np.flatnonzero(bad_type)[0])
        raise nodes.error(position, f"comm_type {int(comm_type[position])} is not a collective chakra-collectives can replay")
    empty = comm & (size <= 0) & ~(coll & (comm_type == BARRIER))
    if np.any(empty):
        position = int(np.flatnonzero(empty)[0])
        raise nodes.error(position, f"comm_size is {int(size[position])}; communication needs a positive size")
    peer = np.full(len(nodes), -1, dtype=np.int64)
    peer[send] = attrs.integer("comm_dst", nodes)[send]
    peer[recv] = attrs.integer("comm_src", nodes)[recv]
    tag = np.where(send | recv, np.maximum(attrs.integer("comm_tag", nodes), 0), -1)
    calls = np.flatnonzero(coll)  # groups and dimensions are read on collectives only
    _, _, pg = attrs.converted("pg_name", _as_string, fill=None, dtype=object, at=calls)
    present, ok, dims = attrs.converted("involved_dim", _as_bool_list, fill=None, dtype=object, at=calls)
    if np.any(present & ~ok):
        position = int(calls[np.flatnonzero(present & ~ok)[0]])
        raise nodes.error(position, f"attribute involved_dim is {attrs.kind_of('involved_dim', position)}; ASTRA-sim needs a bool_list")
    pg_name: list[str | None] = [None] * len(nodes)
    involved_dim: list[tuple[bool, ...] | None] = [None] * len(nodes)
    for position, name, dim in zip(calls.tolist(), pg.tolist(), dims.tolist()):
        pg_name[position] = None if name in (None, "") else name
        involved_dim[position] = dim
    return {
        "node_type": _KIND_OF_TYPE[types],
        "duration_ns": durations_ns(nodes, types, policy),
        "is_cpu_op": cpu,
        "comm_type": np.where(coll, comm_type, NO_COLLECTIVE),
        "comm_size": np.where(comm, np.maximum(size, 0), 0),
        "peer": peer,
        "tag": tag,
        "pg_name": pg_name,
        "involved_dim": involved_dim,
    }


def read_workload(prefix: str | Path, policy: ReadPolicy | None = None) -> Workload:
    """Read every rank file of ``prefix`` (``PREFIX.{rank}.et[.gz]``; ranks 0..N-1 all present).

    ``policy`` says what to do with each quirk of converter-made files
    (:mod:`~chakra_collectives.converters.chakra_et.read_policy`; default: repair, and say so
    in ``Workload.repairs``; ``ReadPolicy.strict()``: refuse). Under the default policy, the
    columns kept beside the files (:mod:`~chakra_collectives.converters.chakra_et.columns_file`)
    are returned instead of decoding while the files hold the bytes they were read from.
    """
    policy = policy or ReadPolicy()
    paths = rank_files(prefix)
    if policy == ReadPolicy():
        kept = load_columns(prefix, paths)
        if kept is not None:
            return kept
    require(reading_estimate(prefix, paths))
    nodes = decode_rank_files(paths, missing="error" if policy.dangling == "error" else "keep")
    return _workload(str(prefix), paths, nodes, policy)


def read_encoded_workload(files: list[bytes], paths: list[Path], policy: ReadPolicy | None = None, *, prefix: str = "") -> Workload:
    """The workload that the encoded rank files ``files`` (rank ``i`` to be written at
    ``paths[i]``) will read as: every check and repair of :func:`read_workload`, before writing.

    >>> from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder
    >>> b = WorkloadBuilder(2)
    >>> _ = b.collective(0, "all-reduce", 0), b.collective(1, "all-reduce", 0)
    >>> b.write("w", check=read_encoded_workload)
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: w.0.et: rank 0: node 0: comm_size is 0; communication needs a positive size
    """
    policy = policy or ReadPolicy()
    missing = "error" if policy.dangling == "error" else "keep"
    nodes = decode_files([(data, path, rank) for rank, (data, path) in enumerate(zip(files, paths))], missing=missing)
    return _workload(prefix, paths, nodes, policy)


def _workload(prefix: str, paths: list[Path], nodes: NodeColumns, policy: ReadPolicy) -> Workload:
    repairs = Repairs()
    dep_ptr, dep_idx, repairs.dependencies = repair_dependencies(nodes, policy.dependencies)
    columns = _decode_nodes(nodes, policy, repairs)
    return Workload(
        prefix=prefix,
        num_ranks=len(paths),
        rank=nodes.file_of.astype(np.int32),
        node_id=nodes.ids,
        node_type=columns["node_type"],
        duration_ns=columns["duration_ns"],
        is_cpu_op=columns["is_cpu_op"],
        comm_type=columns["comm_type"].astype(np.int64),
        comm_size=columns["comm_size"].astype(np.int64),
        peer=columns["peer"],
        tag=columns["tag"].astype(np.int64),
        pg_name=columns["pg_name"],
        involved_dim=columns["involved_dim"],
        dep_ptr=dep_ptr,
        dep_idx=dep_idx,
        paths=paths,
        repairs=repairs,
    )


def read_node_names(workload: Workload) -> list[str]:
    """The ``name`` of every node of ``workload``, in its order (pictures and traces label nodes
    with it; reading the columns skips names). Names are looked up by rank and node id in the
    files, so nodes the read policy skipped do not shift them.

    >>> import tempfile, pathlib
    >>> from chakra_collectives.converters.chakra_et.workload_writer import single_collective_workload
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = single_collective_workload(pathlib.Path(tmp) / "w", "all-reduce", 2, 2**20)
    ...     names = read_node_names(read_workload(pathlib.Path(tmp) / "w"))
    >>> names
    ['all-reduce', 'all-reduce']
    """
    names: list[str] = []
    bounds = workload.rank_bounds()
    for rank, path in enumerate(workload.paths):
        data = load_bytes(path)
        records = split_records(data, path)
        view = parse_nodes(data, records[1:])[0] if len(records) > 1 else []
        by_id = {node.id: node.name.decode("utf-8", "replace") for node in view}
        names += [by_id.get(int(i), "") for i in workload.node_id[bounds[rank] : bounds[rank + 1]].tolist()]
    return names


__all__ = ["NODE_KINDS", "read_encoded_workload", "read_node_names", "read_workload"]
