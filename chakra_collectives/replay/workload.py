"""Read a workload's Chakra ETs (``PREFIX.{rank}.et``, one per rank) into flat node columns.

A workload is what a training step looks like to ASTRA-sim: COMP nodes (``duration_micros``),
COMM_COLL nodes (``comm_type``, ``comm_size``, optional ``pg_name``), point-to-point
COMM_SEND / COMM_RECV nodes (``comm_dst`` / ``comm_src``, ``comm_size``, ``comm_tag``),
MEM_LOAD / MEM_STORE and METADATA nodes, ordered by ``data_deps`` and ``ctrl_deps`` (both are
waited for). Files are framed and parsed with the same helpers as algorithm files
(:mod:`~chakra_collectives.converters.chakra_et.stream`); each distinct attribute is decoded once.

>>> import tempfile, pathlib
>>> from chakra_collectives.replay.writer import single_collective_workload
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = single_collective_workload(pathlib.Path(tmp) / "w", "all-reduce", 4, 2**20)
...     w = read_workload(pathlib.Path(tmp) / "w")
>>> w.num_ranks, len(w), NodeType(int(w.node_type[0])).name, int(w.comm_size[0])
(4, 4, 'COMM_COLL', 1048576)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from chakra_collectives.converters.chakra_et.reader import (
    _INTEGER_FIELDS,
    _decode_attribute,
    _raise_bad_record,
    _read_metadata,
    _resolve_deps,
    rank_files,
)
from chakra_collectives.converters.chakra_et.stream import load_bytes, parse_nodes, split_records
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective


class NodeType(IntEnum):
    """Chakra's ``NodeType`` values."""

    METADATA = 1
    MEM_LOAD = 2
    MEM_STORE = 3
    COMP = 4
    COMM_SEND = 5
    COMM_RECV = 6
    COMM_COLL = 7


NO_COLLECTIVE = -1
BARRIER = 9
"""Chakra's ``CollectiveCommType.BARRIER``: replayed as a zero-byte all-reduce of the group."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Every node of every rank, grouped by rank in file order (numpy columns)."""

    prefix: str
    num_ranks: int
    rank: np.ndarray
    node_id: np.ndarray
    node_type: np.ndarray
    duration_ns: np.ndarray
    """COMP: ``duration_micros * 1000``; 0 elsewhere."""
    is_cpu_op: np.ndarray
    comm_type: np.ndarray
    """COMM_COLL: Chakra's CollectiveCommType; -1 elsewhere."""
    comm_size: np.ndarray
    peer: np.ndarray
    """SEND: ``comm_dst``; RECV: ``comm_src``; -1 elsewhere."""
    tag: np.ndarray
    pg_name: list[str | None]
    name: list[str]
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    """Dependencies (data and control) as global node indices, CSR."""
    paths: list[Path]

    def __len__(self) -> int:
        return len(self.rank)

    def rank_bounds(self) -> np.ndarray:
        return np.searchsorted(self.rank, np.arange(self.num_ranks + 1))

    def where(self, index: int) -> dict[str, Any]:
        """``path``/``rank``/``node`` of node ``index`` for error messages."""
        rank = int(self.rank[index])
        return {"path": self.paths[rank], "rank": rank, "node": int(self.node_id[index])}

    def describe(self, index: int) -> str:
        """``node 7 (COMM_COLL all-reduce 1 MiB)``-style label."""
        kind = NodeType(int(self.node_type[index]))
        label = f"node {int(self.node_id[index])} {kind.name}"
        if kind is NodeType.COMM_COLL:
            label += f" {collective_name(int(self.comm_type[index]))}"
        elif kind in (NodeType.COMM_SEND, NodeType.COMM_RECV):
            arrow = "to" if kind is NodeType.COMM_SEND else "from"
            label += f" {arrow} rank {int(self.peer[index])} tag {int(self.tag[index])}"
        return label


def collective_name(comm_type: int) -> str:
    if comm_type == BARRIER:
        return "barrier"
    try:
        return Collective.from_chakra_comm_type(comm_type).value
    except InputError:
        return f"comm_type {comm_type}"


_COLUMNS = ("node_type", "duration_ns", "is_cpu_op", "comm_type", "comm_size", "peer", "tag", "pg_name")


class _WorkloadDecoder:
    """Node attributes to column values; each distinct attribute blob is decoded once."""

    def __init__(self) -> None:
        self._attrs: dict[bytes, tuple[str, str | None, Any]] = {}
        self._rows: dict[tuple, tuple] = {}

    def row(self, node_type: int, duration_micros: int, raw: tuple[bytes, ...], rank: int, where: dict[str, Any]) -> tuple:
        key = (node_type, duration_micros, raw, rank)
        row = self._rows.get(key)
        if row is None:
            row = self._make_row(node_type, duration_micros, self._attributes(raw, where), rank, where)
            if len(self._rows) < 1_000_000:
                self._rows[key] = row
        return row

    def _attributes(self, raw: tuple[bytes, ...], where: dict[str, Any]) -> dict[str, tuple[str | None, Any]]:
        found: dict[str, tuple[str | None, Any]] = {}
        for data in raw:
            decoded = self._attrs.get(data)
            if decoded is None:
                try:
                    decoded = _decode_attribute(data)
                except DecodeError:
                    raise InputError("malformed attribute", **where) from None
                if len(self._attrs) < 1_000_000:
                    self._attrs[data] = decoded
            found[decoded[0]] = decoded[1:]
        return found

    def _make_row(self, node_type: int, duration_micros: int, attrs: dict, rank: int, where: dict[str, Any]) -> tuple:
        cpu = _boolean(attrs, "is_cpu_op", where)
        if node_type == NodeType.COMP:
            return (node_type, duration_micros * 1000.0, cpu, NO_COLLECTIVE, 0, -1, -1, None)
        if node_type in (NodeType.METADATA, NodeType.MEM_LOAD, NodeType.MEM_STORE):
            return (node_type, duration_micros * 1000.0, cpu, NO_COLLECTIVE, 0, -1, -1, None)
        if node_type not in (NodeType.COMM_COLL, NodeType.COMM_SEND, NodeType.COMM_RECV):
            raise InputError(f"unknown node type {node_type}", **where)
        if cpu:
            raise InputError("a communication node has is_cpu_op = true (ASTRA-sim throws)", **where)
        size = _integer(attrs, "comm_size", where)
        if node_type == NodeType.COMM_COLL:
            comm_type = _integer(attrs, "comm_type", where)
            if comm_type != BARRIER:
                if size <= 0:
                    raise InputError(f"comm_size is {size}; a collective needs a positive size", **where)
                try:
                    Collective.from_chakra_comm_type(comm_type)
                except InputError as error:
                    raise error.located(**where) from None
            pg = attrs.get("pg_name")
            pg_name = None if pg is None or pg[1] in (None, "") else str(pg[1])
            return (node_type, 0.0, False, comm_type, max(size, 0), -1, -1, pg_name)
        sending = node_type == NodeType.COMM_SEND
        # ASTRA-sim: comm_src defaults to the own rank on a send, comm_dst on a receive
        peer = _integer(attrs, "comm_dst" if sending else "comm_src", where)
        tag = _integer(attrs, "comm_tag", where, default=0)
        if size <= 0:
            raise InputError(f"comm_size is {size}; a message needs a positive size", **where)
        return (node_type, 0.0, False, NO_COLLECTIVE, size, peer, tag, None)


def _integer(attrs: dict, name: str, where: dict[str, Any], default: int | None = None) -> int:
    found = attrs.get(name)
    if found is None:
        if default is not None:
            return default
        raise InputError(f"missing attribute {name}", **where)
    kind, value = found
    if kind not in _INTEGER_FIELDS:
        raise InputError(f"attribute {name} is {kind}; expected an integer type", **where)
    return int(value)


def _boolean(attrs: dict, name: str, where: dict[str, Any]) -> bool:
    found = attrs.get(name)
    if found is None or found[0] is None:
        return False
    kind, value = found
    if kind != "bool_val" and kind not in _INTEGER_FIELDS:
        raise InputError(f"attribute {name} is {kind}; expected bool_val", **where)
    return bool(value)


def read_workload(prefix: str | Path) -> Workload:
    """Read every rank file of ``prefix`` (``PREFIX.{rank}.et[.gz]``; ranks 0..N-1 all present)."""
    paths = rank_files(prefix)
    decoder = _WorkloadDecoder()
    columns: dict[str, list] = {name: [] for name in _COLUMNS}
    ranks: list[np.ndarray] = []
    node_ids: list[int] = []
    names: list[str] = []
    dep_ptr = [0]
    dep_idx: list[int] = []
    for rank, path in enumerate(paths):
        data = load_bytes(path)
        if not data:
            raise InputError("empty file (no GlobalMetadata, no nodes)", path=path, rank=rank)
        bounds = split_records(data, path)
        _, payload_start, end = bounds[0]
        _read_metadata(data[payload_start:end], path)
        try:
            nodes = parse_nodes(data, bounds[1:])
        except DecodeError:
            _raise_bad_record(data, bounds, path, rank)
        where = {"path": path, "rank": rank, "node": None}
        ids: list[int] = []
        raw_deps: list[tuple[int, ...]] = []
        rows = []
        for node in nodes:
            where["node"] = node.id
            rows.append(decoder.row(node.type, node.duration_micros, tuple(node.attr), rank, where))
            ids.append(node.id)
            names.append(node.name.decode("utf-8", "replace"))
            ctrl = node.ctrl_deps
            raw_deps.append(tuple(node.data_deps) + tuple(ctrl) if ctrl else tuple(node.data_deps))
        base = len(node_ids)
        for deps in _resolve_deps(ids, raw_deps, path, rank):
            dep_idx.extend(base + d for d in deps)
            dep_ptr.append(len(dep_idx))
        node_ids.extend(ids)
        ranks.append(np.full(len(ids), rank, dtype=np.int32))
        for name, values in zip(_COLUMNS, zip(*rows)) if rows else ():
            columns[name].extend(values)
    return Workload(
        prefix=str(prefix),
        num_ranks=len(paths),
        rank=np.concatenate(ranks) if ranks else np.zeros(0, np.int32),
        node_id=np.asarray(node_ids, dtype=np.int64),
        node_type=np.asarray(columns["node_type"], dtype=np.int8),
        duration_ns=np.asarray(columns["duration_ns"], dtype=np.float64),
        is_cpu_op=np.asarray(columns["is_cpu_op"], dtype=bool),
        comm_type=np.asarray(columns["comm_type"], dtype=np.int64),
        comm_size=np.asarray(columns["comm_size"], dtype=np.int64),
        peer=np.asarray(columns["peer"], dtype=np.int64),
        tag=np.asarray(columns["tag"], dtype=np.int64),
        pg_name=columns["pg_name"],
        name=names,
        dep_ptr=np.asarray(dep_ptr, dtype=np.int64),
        dep_idx=np.asarray(dep_idx, dtype=np.int64),
        paths=paths,
    )
