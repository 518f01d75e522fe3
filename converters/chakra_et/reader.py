"""Read Chakra ET rank files (``PREFIX.{rank}.et[.gz]``) into a CollectiveAlgorithm.

Files we wrote come back as the identical IR (their ``cc_*`` attributes carry chunk identity).
Foreign files -- ASTRA-sim's custom collectives, other converters' output -- carry only bytes:
they read into operations with ``nbytes`` set and no chunk identity, which is enough for the
structural, matching and deadlock checks and for replay, but not for proving semantics.

Every problem is an :class:`~chakra_collectives.errors.InputError` (the file cannot be
understood: missing, truncated, not protobuf, wrong attribute types...) or an
:class:`~chakra_collectives.errors.AlgorithmError` (it can be read, but its graph is broken:
duplicate node ids, dependencies on missing nodes), naming file, rank and node id.

>>> import tempfile, pathlib
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> from chakra_collectives.converters.chakra_et.writer import write_algorithm
>>> algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = write_algorithm(algo, pathlib.Path(tmp) / "ar")
...     read_algorithm(pathlib.Path(tmp) / "ar").equals(algo)
True
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, NodeType

from chakra_collectives.errors import InputError
from chakra_collectives.ir import NONE, Collective, CollectiveAlgorithm, OpKind, OpTable
from chakra_collectives.ir.pattern import pattern_from_lines
from chakra_collectives.converters.chakra_et.attributes import FORMAT
from chakra_collectives.converters.chakra_et.commit import check_not_being_written
from chakra_collectives.converters.chakra_et.footprint import reading_estimate
from chakra_collectives.resources import require
from chakra_collectives.converters.chakra_et.nodes import EtFile, NodeColumns, decode_rank_files

_RANK_FILE = re.compile(r"^(?P<stem>.+)\.(?P<rank>\d+)\.et(?P<gz>\.gz)?$")


# ---------------------------------------------------------------------------- file discovery
def split_prefix(prefix: str | Path) -> Path:
    """Accept ``out/ar`` or one of its rank files (``out/ar.3.et``) and return the prefix."""
    match = _RANK_FILE.match(Path(prefix).name)
    if match and not Path(f"{prefix}.0.et").exists() and not Path(f"{prefix}.0.et.gz").exists():
        return Path(prefix).with_name(match.group("stem"))
    return Path(prefix)


def rank_files(prefix: str | Path) -> list[Path]:
    """The rank files of ``prefix``, in rank order; every rank 0..N-1 must be present once."""
    prefix = split_prefix(prefix)
    check_not_being_written(prefix)
    folder = prefix.parent if str(prefix.parent) else Path(".")
    found: dict[int, list[Path]] = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = _RANK_FILE.match(path.name)
            if match and match.group("stem") == prefix.name:
                found.setdefault(int(match.group("rank")), []).append(path)
    if not found:
        raise InputError(f"no rank files {prefix}.{{rank}}.et found", path=f"{prefix}.0.et")
    for rank, paths in sorted(found.items()):
        if len(paths) > 1:
            raise InputError(f"rank {rank} has several files: {', '.join(sorted(p.name for p in paths))}", path=paths[0])
    missing = [r for r in range(max(found) + 1) if r not in found]
    if missing:
        raise InputError(
            f"missing rank file (found {len(found)} of ranks 0..{max(found)})", path=f"{prefix}.{missing[0]}.et", rank=missing[0]
        )
    return [found[r][0] for r in range(len(found))]


GROUP_FIELD = "{group}"
"""Stands for a group's name in a prefix: ``synth --groups FILE -o out/dp`` writes ``out/dp_{group}.{rank}.et``."""


def group_prefixes(pattern: str | Path) -> dict[str, Path]:
    """The prefixes a ``{group}`` pattern stands for, by group name (sorted); empty when none exist.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name in ("dp_5.0.et", "dp_5.1.et", "dp_6.0.et", "tp_1.0.et"):
    ...     _ = (folder / name).write_bytes(b"")
    >>> {group: prefix.name for group, prefix in group_prefixes(folder / "dp_{group}").items()}
    {'5': 'dp_5', '6': 'dp_6'}
    """
    pattern = Path(pattern)
    before, field, after = pattern.name.partition(GROUP_FIELD)
    if not field:
        raise ValueError(f"{pattern} has no {GROUP_FIELD}")
    folder = pattern.parent
    found: dict[str, Path] = {}
    if folder.is_dir():
        for path in folder.iterdir():
            match = _RANK_FILE.match(path.name)
            stem = match.group("stem") if match and match.group("rank") == "0" else ""
            name = stem[len(before) : len(stem) - len(after)]
            if name and stem.startswith(before) and stem.endswith(after) and len(stem) > len(before) + len(after):
                found[name] = folder / stem
    return dict(sorted(found.items()))


# ---------------------------------------------------------------------------- nodes -> operations
def _valid_chunk_ref(kind: str | None, value: Any) -> bool:
    """``[buffer, offset, count]`` with buffer 0/1/2 (input/output/scratch) and no negatives."""
    return kind == "int64_list" and len(value) == 3 and value[0] in (0, 1, 2) and value[1] >= 0 and value[2] >= 0


def _as_chunk_ref(kind: str | None, value: Any) -> tuple[int, int, int] | None:
    """``(buffer, offset, count)`` of a valid chunk reference."""
    return value if _valid_chunk_ref(kind, value) else None


def _as_bool(kind: str | None, value: Any) -> bool | None:
    return bool(value) if kind == "bool_val" else None


def _as_float(kind: str | None, value: Any) -> float | None:
    return float(value) if kind in ("double_val", "float_val") else None


def _as_route(kind: str | None, value: Any) -> tuple[int, ...] | None:
    return tuple(int(v) for v in value) if kind == "int64_list" and len(value) >= 2 and min(value) >= 0 else None


def _as_threadblock(kind: str | None, value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if kind == "int64_list" and len(value) == 2 and 0 <= min(value) and max(value) < 2**31 else None


def _as_ranges(kind: str | None, value: Any) -> tuple[int, ...] | None:
    """``cc_ranges``: pairs ``offset, count``, offsets non-negative and counts positive."""
    if kind != "int64_list" or not value or len(value) % 2 or min(value[0::2]) < 0 or min(value[1::2]) < 1:
        return None
    return tuple(int(v) for v in value)


_LOCAL_OPS = {"reduce": OpKind.REDUCE, "copy": OpKind.COPY}


def _as_local_op(kind: str | None, value: Any) -> int | None:
    return int(_LOCAL_OPS[value]) if kind == "string_val" and value in _LOCAL_OPS else None


def _compact(column: np.ndarray) -> np.ndarray:
    """``column`` as int32 when its values fit (the IR's compact width), else as it is."""
    if column.dtype.itemsize > 4 and (not len(column) or (column.min() >= -(2**31) and column.max() < 2**31)):
        return column.astype(np.int32)
    return column


def _operation_columns(nodes: NodeColumns) -> dict[str, np.ndarray]:
    types = nodes.types
    send = types == COMM_SEND_NODE
    recv = types == COMM_RECV_NODE
    comp = types == COMP_NODE
    comm = send | recv
    other = np.flatnonzero(~(comm | comp))
    if len(other):
        node_type = int(types[other[0]])
        if node_type in NodeType.values():
            hint = " (ASTRA-sim deadlocks on it inside a custom collective)" if node_type == COMM_COLL_NODE else ""
            raise nodes.error(int(other[0]), f"{NodeType.Name(node_type)} cannot be part of a collective algorithm{hint}")
        raise nodes.error(int(other[0]), f"unknown node type {node_type}")
    attrs = nodes.attributes
    why = " (ASTRA-sim aborts without it)"
    destination = _compact(attrs.integer("comm_dst", nodes, required=send, why=why))
    source = _compact(attrs.integer("comm_src", nodes, required=recv, why=why))
    peer = _compact(np.where(send, destination, np.where(recv, source, NONE)))
    del destination, source
    size = attrs.integer("comm_size", nodes, required=comm, why=why)
    tag = _compact(np.where(comm, _compact(attrs.integer("comm_tag", nodes, required=comm, why=why)), NONE))
    _refuse(nodes, comm & (size <= 0), "comm_size must be positive (ASTRA-sim aborts on 0)")
    nbytes = np.where(comm, size, NONE)
    del size
    _, _, cpu = attrs.converted("is_cpu_op", _as_bool, fill=False, dtype=bool)
    _refuse(nodes, comm & cpu, "a communication node has is_cpu_op = true (ASTRA-sim throws)")
    del cpu

    refs = {}
    for name in ("cc_src", "cc_dst"):
        present, ok, (buffer, offset, chunks) = attrs.converted_columns(name, _as_chunk_ref, 3, fill=NONE)
        _refuse(nodes, present & ~ok, f"attribute {name} must be an int64_list [buffer, offset, count] with buffer 0, 1 or 2")
        refs[name] = (present, buffer.astype(np.int8), _compact(offset), _compact(chunks))  # buffers are 0, 1, 2 or NONE here
        del buffer, offset, chunks
    route_present, route_ok, route_path = attrs.converted("cc_route", _as_route, fill=None, dtype=object)
    _refuse(nodes, route_present & ~route_ok, "cc_route must be an int64_list of at least two node ids")
    _refuse(nodes, route_present & ~send, "cc_route belongs on SEND nodes only")
    routes: dict[tuple[int, ...], int] = {}
    route = np.full(len(types), NONE, dtype=np.int32)
    for i in np.flatnonzero(route_present).tolist():
        route[i] = routes.setdefault(route_path[i], len(routes))
    del route_present, route_ok, route_path
    placed = _threadblock_columns(nodes)
    op_present, op_ok, op = attrs.converted("cc_op", _as_local_op, fill=NONE, dtype=np.int8)
    _refuse(nodes, comp & op_present & ~op_ok, "cc_op must be the string 'reduce' or 'copy'")
    exact_present, exact_ok, exact = attrs.converted("cc_duration_ns", _as_float, fill=np.nan, dtype=np.float64)
    _refuse(nodes, exact_present & ~exact_ok, "cc_duration_ns must be a double_val")

    local = comp & op_ok
    reduce = local & (op == OpKind.REDUCE)
    src_present, src_buf, src_off, src_count = refs.pop("cc_src")
    dst_present, dst_buf, dst_off, dst_count = refs.pop("cc_dst")
    _refuse(
        nodes,
        local & ~(src_present & dst_present & (src_count == dst_count)),
        "a reduce/copy needs cc_src and cc_dst with the same count",
    )
    more = _further_ranges(nodes, (send & src_present) | (recv & dst_present))
    if more:
        src_count = src_count + np.where(send, more["extra"], 0)
        dst_count = dst_count + np.where(recv, more["extra"], 0)
    kind = np.select([send, recv, reduce, local], [OpKind.SEND, OpKind.RECV, OpKind.REDUCE, OpKind.COPY], OpKind.COMPUTE).astype(np.int8)
    reads = send | local
    writes = recv | local
    chunk_moving = (send & src_present) | (recv & dst_present) | local
    reading, writing = reads & chunk_moving, writes & chunk_moving
    duration = nodes.duration_micros * 1000.0
    duration[local & (nodes.duration_micros == 0)] = np.nan
    duration[exact_present] = exact[exact_present]
    duration[~comp] = np.nan
    del exact
    return {
        "kind": kind,
        "peer": peer,
        "tag": tag,
        "src_buf": np.where(reading, src_buf, NONE).astype(np.int8),
        "src_off": _compact(np.where(reading, src_off, NONE)),
        "dst_buf": np.where(writing, dst_buf, NONE).astype(np.int8),
        "dst_off": _compact(np.where(writing, dst_off, NONE)),
        "count": _compact(np.where(chunk_moving, np.where(send, src_count, dst_count), NONE)),
        "nbytes": nbytes,
        "duration_ns": duration,
        "node_id": _compact(nodes.ids),
        "route": route,
        **placed,
        **{name: column for name, column in more.items() if name != "extra"},
        "routes": tuple(routes),
    }


def _further_ranges(nodes: NodeColumns, carriers: np.ndarray) -> dict[str, np.ndarray]:
    """``more_ptr`` / ``more_off`` / ``more_count`` from ``cc_ranges`` (none when no node has it),
    and ``extra``: the chunks they add to each node's ``cc_src`` / ``cc_dst`` count."""
    present, ok, pairs = nodes.attributes.converted("cc_ranges", _as_ranges, fill=None, dtype=object)
    if not np.any(present):
        return {}
    _refuse(nodes, present & ~ok, "cc_ranges must be an int64_list [offset, count, ...] of non-negative offsets and positive counts")
    _refuse(nodes, present & ~carriers, "cc_ranges belongs on a SEND with cc_src or a RECV with cc_dst")
    holders = np.flatnonzero(present)
    flat = [pairs[i] for i in holders.tolist()]
    per = np.zeros(len(present), dtype=np.int64)
    per[holders] = [len(p) // 2 for p in flat]
    values = np.fromiter((v for p in flat for v in p), dtype=np.int64, count=int(per.sum()) * 2)
    ptr = np.zeros(len(present) + 1, dtype=np.int64)
    np.cumsum(per, out=ptr[1:])
    extra = np.zeros(len(present), dtype=np.int64)
    extra[holders] = [sum(p[1::2]) for p in flat]
    return {"more_ptr": ptr, "more_off": _compact(values[0::2]), "more_count": _compact(values[1::2]), "extra": extra}


def _threadblock_columns(nodes: NodeColumns) -> dict[str, np.ndarray]:
    """``threadblock`` and ``channel`` from ``cc_threadblock`` (no columns when no node has it)."""
    present, ok, where = nodes.attributes.converted("cc_threadblock", _as_threadblock, fill=None, dtype=object)
    if not np.any(present):
        return {}
    _refuse(nodes, present & ~ok, "cc_threadblock must be an int64_list [threadblock, channel] of two non-negative 32-bit integers")
    threadblock = np.full(len(present), NONE, dtype=np.int32)
    channel = np.full(len(present), NONE, dtype=np.int32)
    carriers = np.flatnonzero(present)
    pairs = np.array([where[i] for i in carriers.tolist()], dtype=np.int64).reshape(len(carriers), 2)
    threadblock[carriers], channel[carriers] = pairs[:, 0], pairs[:, 1]
    return {"threadblock": threadblock, "channel": channel}


def _refuse(nodes: NodeColumns, bad: np.ndarray, message: str) -> None:
    if np.any(bad):
        raise nodes.error(int(np.flatnonzero(bad)[0]), message)


# ---------------------------------------------------------------------------- whole algorithm
def read_algorithm(
    prefix: str | Path,
    *,
    collective: Collective | None = None,
    size_bytes: int | None = None,
) -> CollectiveAlgorithm:
    """Read ``PREFIX.{rank}.et`` for every rank into one :class:`CollectiveAlgorithm`.

    ``collective`` states (or overrides) the collective the files claim; ``size_bytes`` states
    the collective size of foreign files (ours record it; for foreign ones it is estimated as
    the largest message times the number of ranks, which is right for ring and direct
    algorithms).
    """
    paths = rank_files(prefix)
    require(reading_estimate(prefix, paths))
    nodes = decode_rank_files(paths)
    files = nodes.files
    ours = files[0].metadata.get("cc_format") == FORMAT
    if ours:
        _check_consistent(files)
    columns = _operation_columns(nodes)
    routes = columns.pop("routes")
    num_ranks = len(files)
    rank = np.repeat(np.arange(num_ranks, dtype=np.int32), np.diff(nodes.file_ptr))
    table = OpTable.from_columns(rank=rank, dep_ptr=_compact(nodes.dep_ptr), dep_idx=_compact(nodes.dep_pos), **columns)
    if ours:
        return replace(_ours(files, table, collective, size_bytes), routes=routes)
    return replace(_foreign(files, table, collective, size_bytes), routes=routes)


def written_size(prefix: str | Path) -> int | None:
    """The collective size chakra-coll's files at ``prefix`` were written for, from rank 0's
    GlobalMetadata alone (``cc_size_bytes``): what :func:`read_algorithm` reports as
    ``size_bytes`` without reading every rank. ``None`` for files other tools wrote (their size
    is estimated from all the messages: read them with :func:`read_algorithm`)."""
    paths = rank_files(prefix)
    meta = decode_rank_files(paths[:1], workers=1).files[0].metadata
    if meta.get("cc_format") != FORMAT or meta.get("cc_size_bytes") is None:
        return None
    return int(meta["cc_size_bytes"])


_SHARED_METADATA = ("cc_collective", "cc_num_ranks", "cc_chunk_count", "cc_size_bytes", "cc_inplace", "cc_root", "cc_name", "cc_placement")


def _check_consistent(files: list[EtFile]) -> None:
    first = files[0]
    for key in ("cc_collective", "cc_num_ranks", "cc_chunk_count", "cc_size_bytes"):
        if key not in first.metadata:
            raise InputError(f"GlobalMetadata lacks {key}", path=first.path, rank=0)
    declared = int(first.metadata["cc_num_ranks"])
    if declared != len(files):
        raise InputError(f"metadata says {declared} ranks but {len(files)} rank files exist", path=first.path, rank=0)
    for f in files:
        if f.metadata.get("cc_format") != FORMAT:
            raise InputError("not written by chakra-collectives, unlike rank 0's file", path=f.path, rank=f.rank)
        if f.metadata.get("cc_rank") != f.rank:
            raise InputError(f"GlobalMetadata says cc_rank {f.metadata.get('cc_rank')}", path=f.path, rank=f.rank)
        for key in _SHARED_METADATA:
            if f.metadata.get(key) != first.metadata.get(key):
                raise InputError(
                    f"GlobalMetadata {key} = {f.metadata.get(key)!r} differs from rank 0's {first.metadata.get(key)!r}",
                    path=f.path,
                    rank=f.rank,
                )


def _ours(files: list[EtFile], table: OpTable, collective: Collective | None, size_bytes: int | None) -> CollectiveAlgorithm:
    meta = files[0].metadata
    claimed = Collective.parse(meta["cc_collective"])
    chunk_count = int(meta["cc_chunk_count"])
    written_size = int(meta["cc_size_bytes"])
    if chunk_count < 1 or written_size < 1:
        raise InputError("GlobalMetadata cc_chunk_count and cc_size_bytes must be positive", path=files[0].path, rank=0)
    num_ranks = len(files)
    buffers = np.array([f.metadata.get("cc_buffer_chunks", (0, 0, 0)) for f in files], dtype=np.int64).reshape(num_ranks, 3)
    chunk_bytes = -(-written_size // chunk_count)
    # comm_size that agrees with the chunk count is derived, not stored: one algorithm, any size
    derived = (table.count >= 0) & (table.nbytes == table.count.astype(np.int64) * chunk_bytes)
    table.nbytes[derived] = NONE
    provenance = dict(item.split("=", 1) for item in meta.get("cc_provenance", ()) if "=" in item)
    placement = tuple(int(v) for v in meta.get("cc_placement", ()))
    if placement and (len(placement) != num_ranks or len(set(placement)) != num_ranks or min(placement) < 0):
        raise InputError(
            f"GlobalMetadata cc_placement must name {num_ranks} distinct NPUs, one per rank, not {list(placement)}",
            path=files[0].path, rank=0,
        )
    return CollectiveAlgorithm(
        collective=collective or claimed,
        num_ranks=num_ranks,
        chunk_count=chunk_count,
        ops=table,
        input_chunks=buffers[:, 0],
        output_chunks=buffers[:, 1],
        scratch_chunks=buffers[:, 2],
        size_bytes=size_bytes or written_size,
        inplace=bool(meta.get("cc_inplace", False)),
        root=None if meta.get("cc_root") is None else int(meta["cc_root"]),
        name=meta.get("cc_name", ""),
        provenance=provenance,
        placement=placement,
        pattern=None if meta.get("cc_pattern") is None else pattern_from_lines(list(meta["cc_pattern"]), num_ranks=num_ranks),
    )


def _foreign(files: list[EtFile], table: OpTable, collective: Collective | None, size_bytes: int | None) -> CollectiveAlgorithm:
    if collective is None:
        hint = files[0].metadata.get("collective")  # ASTRA-sim's own custom collectives record it
        collective = Collective.parse(hint) if isinstance(hint, str) and hint else Collective.CUSTOM
    num_ranks = len(files)
    comm = table.kind <= OpKind.RECV
    largest = int(table.nbytes[comm].max()) if np.any(comm) else 1
    zeros = np.zeros(num_ranks, dtype=np.int64)
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=num_ranks,
        chunk_count=num_ranks,
        ops=table,
        input_chunks=zeros,
        output_chunks=zeros.copy(),
        scratch_chunks=zeros.copy(),
        size_bytes=size_bytes or largest * num_ranks,
        provenance={"source": "foreign Chakra ET", "size": "given" if size_bytes else "estimated as largest message x ranks"},
    )
