"""Decode one Chakra ET file into columns: node ids, types, dependencies and attributes.

This is the format layer shared by every reader (collective algorithms, workloads): it knows
Chakra's ``Node`` and ``GlobalMetadata`` but nothing about what the nodes mean. It is built for
files of millions of nodes: all records of a file are parsed in one protobuf call and read out
as whole columns (:mod:`.one_parse`; node by node, through :mod:`.stream`, when a file is
unusual), each distinct attribute is decoded once, then spread over the nodes that carry it
with numpy, and large sets of files are decoded by two processes.

>>> from chakra.schema.protobuf.et_def_pb2 import AttributeProto, GlobalMetadata, Node
>>> from chakra_collectives.converters.chakra_et.stream import frame
>>> data = frame(GlobalMetadata(version="0.0.4").SerializeToString()) + b"".join(
...     frame(Node(id=i, type=5, data_deps=[i - 1] if i else [],
...                attr=[AttributeProto(name="comm_dst", int32_val=i + 1)]).SerializeToString())
...     for i in range(3))
>>> nodes = decode_nodes(data, "x.et", rank=0)
>>> nodes.ids.tolist(), nodes.deps_of(2).tolist(), nodes.attributes.integer("comm_dst", nodes).tolist()
([0, 1, 2], [1], [1, 2, 3])
"""

from __future__ import annotations

import multiprocessing
import os
import zlib
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import AttributeProto, GlobalMetadata
from google.protobuf.internal import decoder
from google.protobuf.message import DecodeError

from chakra_collectives.errors import AlgorithmError, ChakraCollError, InputError
from chakra_collectives.processes import can_fork
from chakra_collectives.converters.chakra_et.one_parse import ATTRIBUTE_SEPARATOR, AttributeIndex, NodeFields, node_records, parse_node_fields
from chakra_collectives.converters.chakra_et.stream import load_bytes, parse_node, parse_nodes, split_records

MISSING = -1

_INTEGER_KINDS = frozenset(
    "int32_val int64_val uint32_val uint64_val sint32_val sint64_val fixed32_val fixed64_val sfixed32_val sfixed64_val".split()
)


class AttributeCatalog:
    """Every distinct serialized ``AttributeProto`` seen so far, decoded once, with an integer id.

    The same attribute (``comm_tag = 3``, ``comm_size = 131072``...) recurs across the nodes and
    rank files of an algorithm, so each is parsed by protobuf once; per-name conversions
    (:meth:`table`) are computed once per distinct value too.
    """

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}
        self.names: list[str] = []
        self.kinds: list[str | None] = []
        self.values: list[Any] = []
        self._ids_by_name: dict[str, list[int]] = {}
        self._codes: dict[str, int] = {}
        self._name_code: list[int] = []
        self._code_array = np.zeros(0, dtype=np.int64)
        self._tables: dict[tuple, tuple[int, np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.names)

    def add(self, data: bytes) -> int:
        """Decode ``data`` (raises ``DecodeError`` if it is not an AttributeProto) and return its id."""
        attr = AttributeProto.FromString(data)
        kind = attr.WhichOneof("value")
        value = None if kind is None else getattr(attr, kind)
        if kind is not None and kind.endswith("_list"):
            value = tuple(value.values)
        name = attr.name
        index = self.ids[data] = len(self.names)
        self.names.append(name)
        self.kinds.append(kind)
        self.values.append(value)
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self._codes)
            self._ids_by_name[name] = []
        self._ids_by_name[name].append(index)
        self._name_code.append(code)
        return index

    def code(self, name: str) -> int | None:
        return self._codes.get(name)

    def name_codes(self) -> np.ndarray:
        if len(self._code_array) != len(self._name_code):
            self._code_array = np.array(self._name_code, dtype=np.int32)
        return self._code_array

    def table(self, name: str, convert, fill: Any, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(accepted, values)`` over all ids plus one trailing ``fill`` entry (selected by id -1).

        ``values[i] = convert(kind, value)`` for the attributes called ``name`` that ``convert``
        accepts (it returns ``None`` to reject), ``fill`` elsewhere.
        """
        key = (name, convert, fill, np.dtype(dtype).str)
        done, accepted, values = self._tables.get(key, (0, np.zeros(1, dtype=bool), np.array([fill], dtype=dtype)))
        size = len(self.names) + 1
        if len(accepted) < size:  # grow; the trailing fill entry moves to the new end
            grown_accepted = np.zeros(size, dtype=bool)
            grown_values = np.full(size, fill, dtype=dtype)
            grown_accepted[: len(accepted) - 1] = accepted[:-1]
            grown_values[: len(values) - 1] = values[:-1]
            accepted, values = grown_accepted, grown_values
        ids = self._ids_by_name.get(name, [])
        kinds, raw = self.kinds, self.values
        for i in ids[done:]:
            converted = convert(kinds[i], raw[i])
            if converted is not None:
                accepted[i] = True
                values[i] = converted
        self._tables[key] = (len(ids), accepted, values)
        return accepted, values


CATALOG = AttributeCatalog()
"""The process-wide catalog (attributes decode once per process)."""


@dataclass
class AttributeColumns:
    """The attributes of every node of a file, queried by name as whole columns.

    Occurrences are stored flat: ``node_of`` (which node carries it) and ``ids`` (which
    distinct attribute of :data:`CATALOG` it is).
    """

    node_of: np.ndarray
    ids: np.ndarray
    num_nodes: int
    _found: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def lookup(self, name: str) -> np.ndarray:
        """Per node, the catalog id of its attribute ``name`` (``MISSING`` if it has none); read-only.

        Each name is looked up once (a reader asks for most names several times: checks first,
        values after; each lookup is a pass over every attribute of every node)."""
        known = self._found.get(name)
        if known is not None:
            return known
        found = np.full(self.num_nodes, MISSING, dtype=np.int32 if len(CATALOG) < 2**31 else np.int64)
        code = CATALOG.code(name)
        if code is not None and len(self.ids):
            chosen = np.flatnonzero(self._name_codes == code)
            found[self.node_of[chosen]] = self.ids[chosen]
        found.flags.writeable = False
        self._found[name] = found
        return found

    @cached_property
    def _name_codes(self) -> np.ndarray:
        """The name code of every occurrence (16 bits when they fit: a file carries millions of
        attributes of a few dozen names)."""
        codes = CATALOG.name_codes()
        return (codes.astype(np.int16) if len(codes) and codes.max() < 2**15 else codes)[self.ids]

    def converted(self, name: str, convert, *, fill: Any, dtype: Any, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Attribute ``name`` per node through ``convert(kind, value)`` (computed once per distinct value).

        Returns ``(present, ok, values)``: whether the node carries the attribute, whether
        ``convert`` accepted it (it returns ``None`` to reject), and the converted values
        (``fill`` where absent or rejected); of the nodes ``at`` only, when given. ``convert``
        should be a module-level function: its results are remembered under its identity.
        """
        index = self.lookup(name) if at is None else self.lookup(name)[at]
        accepted, values = CATALOG.table(name, convert, fill, dtype)
        return index != MISSING, accepted[index], values[index]

    def converted_columns(self, name: str, convert, width: int, *, fill: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Attribute ``name`` per node through ``convert(kind, value)``, which returns a tuple of
        ``width`` integers (or ``None`` to reject): one conversion per distinct value for all the
        columns, where :meth:`converted` would convert once per column.

        Returns ``(present, ok, columns)``: as :meth:`converted`, and the ``width`` int64 columns
        (``fill`` where absent or rejected).

        >>> from chakra.schema.protobuf.et_def_pb2 import AttributeProto
        >>> ids = [CATALOG.add(AttributeProto(name="doc_pair", int64_list={"values": v}).SerializeToString()) for v in ([1, 2], [3])]
        >>> attrs = AttributeColumns(node_of=np.array([0, 2]), ids=np.array(ids), num_nodes=3)
        >>> pair = lambda kind, value: tuple(value) if len(value) == 2 else None
        >>> present, ok, (first, second) = attrs.converted_columns("doc_pair", pair, 2, fill=-1)
        >>> present.tolist(), ok.tolist(), first.tolist(), second.tolist()
        ([True, False, True], [True, False, False], [1, -1, -1], [2, -1, -1])
        """
        index = self.lookup(name)
        accepted, values = CATALOG.table(name, convert, None, object)
        rows = np.full((len(values), width), fill, dtype=np.int64)
        at = np.flatnonzero(accepted)
        if len(at):
            rows[at] = np.array(values[at].tolist(), dtype=np.int64).reshape(len(at), width)
        return index != MISSING, accepted[index], [np.ascontiguousarray(rows[:, k])[index] for k in range(width)]

    def kind_of(self, name: str, node: int) -> str | None:
        index = int(self.lookup(name)[node])
        return None if index == MISSING else CATALOG.kinds[index]

    def integer(self, name: str, nodes: "NodeColumns", *, required: np.ndarray | None = None, why: str = "") -> np.ndarray:
        """Integer attribute ``name`` per node (``MISSING`` when absent).

        Nodes selected by ``required`` must carry it; every carrier must hold an integer type,
        as ASTRA-sim's feeder reads it. Otherwise an :class:`InputError` names the first
        offending node.
        """
        present, integral, values = self.converted(name, as_integer, fill=MISSING, dtype=np.int64)
        wrong = present & ~integral
        if np.any(wrong):
            node = int(np.flatnonzero(wrong)[0])
            raise nodes.error(node, f"attribute {name} is {self.kind_of(name, node)}; ASTRA-sim needs an integer type")
        if required is not None:
            absent = required & ~present
            if np.any(absent):
                raise nodes.error(int(np.flatnonzero(absent)[0]), f"missing attribute {name}{why}")
        return values


def as_integer(kind: str | None, value: Any) -> int | None:
    """Converter for :meth:`AttributeColumns.converted`: any protobuf integer type."""
    return int(value) if kind in _INTEGER_KINDS else None


@dataclass(frozen=True)
class EtFile:
    """One decoded file: where it came from and its GlobalMetadata attributes."""

    path: Path | str
    rank: int | None
    metadata: dict[str, Any]
    same_as: int | None = None
    """Index of an earlier file with the same bytes (this one's columns are its copy)."""


@dataclass
class NodeColumns:
    """Every node of one or more ET files as columns.

    Positions run over all files in order: the nodes of ``files[f]`` are positions
    ``file_ptr[f]:file_ptr[f+1]``; dependencies are positions too (within the same file).
    """

    files: list[EtFile]
    file_ptr: np.ndarray
    ids: np.ndarray
    types: np.ndarray
    duration_micros: np.ndarray
    dep_ptr: np.ndarray
    dep_pos: np.ndarray
    """Dependencies (data_deps then ctrl_deps) as positions (:data:`MISSING_DEPENDENCY` for an
    absent node, when decoded with ``missing="keep"``)."""
    dep_ctrl: np.ndarray
    """Per dependency: True if it is a ctrl_dep."""
    attributes: AttributeColumns

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def file_of(self) -> np.ndarray:
        """For each node, the index of its file."""
        return np.repeat(np.arange(len(self.files)), np.diff(self.file_ptr))

    def deps_of(self, position: int) -> np.ndarray:
        return self.dep_pos[self.dep_ptr[position] : self.dep_ptr[position + 1]]

    def error(self, position: int, message: str, kind: type = InputError):
        """An error located at the node in ``position`` (its file, rank and node id)."""
        file = self.files[int(np.searchsorted(self.file_ptr, position, side="right")) - 1]
        return kind(message, path=file.path, rank=file.rank, node=int(self.ids[position]))


def read_metadata(record: bytes, path: Path | str) -> dict[str, Any]:
    """GlobalMetadata attributes as ``{name: value}`` plus ``version``."""
    metadata = GlobalMetadata()
    try:
        metadata.ParseFromString(record)
    except DecodeError:
        raise InputError("first record is not a Chakra GlobalMetadata", path=path) from None
    size = metadata.ByteSize()
    metadata.DiscardUnknownFields()
    if metadata.ByteSize() != size:
        raise InputError("first record is not a Chakra GlobalMetadata (it has fields GlobalMetadata does not)", path=path)
    values: dict[str, Any] = {"version": metadata.version}
    for attr in metadata.attr:
        kind = attr.WhichOneof("value")
        value = getattr(attr, kind) if kind else None
        values[attr.name] = tuple(value.values) if kind and kind.endswith("_list") else value
    return values


def decode_nodes(data: bytes, path: Path | str, *, rank: int | None = None) -> NodeColumns:
    """Decode one ET stream (GlobalMetadata then nodes) into :class:`NodeColumns`."""
    return decode_files([(data, path, rank)])


def decode_rank_files(paths: list[Path], *, workers: int | None = None, missing: str = "error") -> NodeColumns:
    """Decode ``PREFIX.{rank}.et`` files (``paths[r]`` is rank ``r``) into one :class:`NodeColumns`.

    Byte-identical files (an SPMD workload replicated over its ranks) are decoded once.
    ``workers`` processes share the other files (default: 2 when they hold more than
    :data:`PARALLEL_BYTES` and the machine has 2 or more cores, else 1); the result is identical.
    ``missing="keep"`` keeps dependencies on absent node ids (as :data:`MISSING_DEPENDENCY`)
    instead of refusing them, for readers with a repair policy.
    """
    same = _identical_files(paths)
    jobs = [(path, rank) for rank, path in enumerate(paths) if same[rank] == rank]
    if workers is None:
        big = sum(path.stat().st_size for path, _ in jobs) > PARALLEL_BYTES
        workers = 2 if big and len(jobs) > 1 and (os.cpu_count() or 1) > 1 else 1
    if workers <= 1 or not can_fork():
        packed = _decode_paths(jobs, missing)
    else:
        shares = [jobs[w::workers] for w in range(workers)]
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context("fork")) as pool:
            others = [pool.submit(_decode_paths, share, missing) for share in shares[1:]]
            packed = _decode_paths(shares[0], missing) + [batch for future in others for batch in future.result()]
    decoded = [part for batch in packed for part in batch.parts()]
    del packed  # the views keep the packed arrays, each freed once combining has copied it
    by_rank = {part.file.rank: part for part in decoded}
    parts = [
        by_rank[rank] if same[rank] == rank
        else replace(by_rank[same[rank]], file=replace(by_rank[same[rank]].file, path=path, rank=rank, same_as=same[rank]))
        for rank, path in enumerate(paths)
    ]
    return _combine(parts)


def _identical_files(paths: list[Path]) -> list[int]:
    """For each file, the index of the first file with the same bytes (itself if none).

    Only files whose size and first :data:`HEAD_BYTES` bytes both occur more than once are read
    whole (rank files that differ -- a peer in the first node -- are told apart by their heads).
    Each is compared byte for byte with the first file of its head (replicated ranks: one
    comparison each); the others are bucketed by a CRC-32 and compared with their bucket's first.
    """
    sizes: dict[int, int] = {}
    for index, path in enumerate(paths):
        try:
            sizes[index] = path.stat().st_size
        except OSError:
            pass  # decoding reports it
    counts = Counter(sizes.values())
    heads: dict[int, tuple[int, bytes]] = {}
    for index, size in sizes.items():
        if counts[size] < 2:
            continue
        try:
            with open(paths[index], "rb") as file:
                heads[index] = (size, file.read(HEAD_BYTES))
        except OSError:
            continue
    head_counts = Counter(heads.values())
    first_of_head: dict[tuple[int, bytes], tuple[int, bytes]] = {}
    first_of: dict[tuple[int, int], int] = {}
    same = list(range(len(paths)))
    for index, head in heads.items():
        if head_counts[head] < 2:
            continue
        size = head[0]
        try:
            data = paths[index].read_bytes()
            first, first_data = first_of_head.setdefault(head, (index, data))
            if first != index and data == first_data:
                same[index] = first
                continue
            key = (size, zlib.crc32(data))
            earlier = first_of.setdefault(key, index)
            if earlier != index and paths[earlier].read_bytes() == data:
                same[index] = earlier
        except OSError:
            continue
    return same


HEAD_BYTES = 4096
"""How much of each file :func:`_identical_files` reads to tell files of one size apart."""


PARALLEL_BYTES = 16 * 2**20
"""Rank files larger than this in total are decoded by two processes (fork and pickling cost
about 0.1 s; decoding 16 MiB alone takes several times that)."""


BATCH_FILES = 64
"""Files whose columns are packed into one array per column as soon as they are decoded (see
:class:`_Packed`)."""


def _decode_paths(jobs: list[tuple[Path, int]], missing: str = "error") -> list["_Packed"]:
    shared = AttributeIndex()
    return [
        _Packed.of([_decode_file(load_bytes(path), path, rank, missing, shared) for path, rank in jobs[start : start + BATCH_FILES]])
        for start in range(0, len(jobs), BATCH_FILES)
    ]


@dataclass
class _FileColumns:
    """One file's nodes as numpy columns; attributes as local ids into ``attr_distinct``, a
    list shared by the files decoded together (a worker process has its own catalog, so
    catalog ids are assigned when combining)."""

    file: EtFile
    ids: np.ndarray
    types: np.ndarray
    durations: np.ndarray
    dep_counts: np.ndarray
    dep_local: np.ndarray
    dep_ctrl: np.ndarray
    attr_counts: np.ndarray
    attr_local: np.ndarray
    attr_distinct: AttributeIndex


_ARRAYS = ("ids", "types", "durations", "dep_counts", "dep_local", "dep_ctrl", "attr_counts", "attr_local")
"""The array fields of :class:`_FileColumns`."""


@dataclass
class _Packed:
    """The columns of several files, one array per column: what a worker process sends back,
    and how a process keeps what it decoded. Thousands of files' small arrays would stay
    scattered over the heap after combining (the process's peak memory); a few large arrays
    are returned to the system when freed."""

    files: list[EtFile]
    lengths: dict[str, list[int]]
    columns: dict[str, np.ndarray]
    attr_distinct: AttributeIndex

    @classmethod
    def of(cls, parts: list[_FileColumns]) -> "_Packed":
        return cls(
            files=[p.file for p in parts],
            lengths={name: [len(getattr(p, name)) for p in parts] for name in _ARRAYS},
            columns={name: np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAYS},
            attr_distinct=parts[0].attr_distinct,
        )

    def parts(self) -> list[_FileColumns]:
        """The files' columns again (views of the packed arrays)."""
        views = {name: np.split(self.columns[name], np.cumsum(self.lengths[name][:-1])) for name in _ARRAYS}
        return [
            _FileColumns(file=file, attr_distinct=self.attr_distinct, **{name: views[name][i] for name in _ARRAYS})
            for i, file in enumerate(self.files)
        ]


def decode_files(sources: Iterable[tuple[bytes, Path | str, int | None]], *, missing: str = "error") -> NodeColumns:
    """Decode several ET streams ``(data, path, rank)`` into one :class:`NodeColumns`.

    Each file is reduced to numpy columns as soon as it is parsed (its protobuf objects are
    then freed); everything that can be done for all files at once is done once.
    """
    shared = AttributeIndex()
    return _combine([_decode_file(data, path, rank, missing, shared) for data, path, rank in sources])


def _combine(parts: list[_FileColumns]) -> NodeColumns:
    """One :class:`NodeColumns` for ``parts``, column by column: each part's column is released
    once it is copied (the parts are this module's own), so reading millions of nodes holds
    one copy of them and one column more."""
    sizes = np.array([len(p.ids) for p in parts], dtype=np.int64)
    file_ptr = np.concatenate([[0], np.cumsum(sizes)])
    total = int(file_ptr[-1])
    attribute_ids = _catalog_ids(parts)
    _release(parts, "attr_local")
    attr_counts = _take(parts, "attr_counts")
    node_of = np.repeat(np.arange(total, dtype=_position_dtype(total)), attr_counts)
    del attr_counts
    positions = []
    for p, base in zip(parts, file_ptr[:-1].tolist()):
        local = p.dep_local.astype(np.int64)
        positions.append(local + base if not len(local) or local.min() >= 0 else np.where(local >= 0, local + base, MISSING_DEPENDENCY))
    _release(parts, "dep_local")
    dep_counts = _take(parts, "dep_counts")
    return NodeColumns(
        files=[p.file for p in parts],
        file_ptr=file_ptr,
        ids=_take(parts, "ids"),
        types=_take(parts, "types"),
        duration_micros=_take(parts, "durations"),
        dep_ptr=np.concatenate([[0], np.cumsum(dep_counts, dtype=np.int64)]),
        dep_pos=np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64),
        dep_ctrl=_take(parts, "dep_ctrl"),
        attributes=AttributeColumns(node_of=node_of, ids=attribute_ids, num_nodes=total),
    )


def _take(parts: list[_FileColumns], name: str) -> np.ndarray:
    """Column ``name`` of every part, concatenated; the parts' own copies are released."""
    column = np.concatenate([getattr(p, name) for p in parts])
    _release(parts, name)
    return column


def _release(parts: list[_FileColumns], name: str) -> None:
    for p in parts:
        setattr(p, name, None)


def _position_dtype(size: int) -> type:
    """The narrowest of int32 / int64 that holds positions up to ``size``."""
    return np.int32 if size < 2**31 else np.int64


def _catalog_ids(parts: list[_FileColumns]) -> np.ndarray:
    """Every file's attribute occurrences as :data:`CATALOG` ids (new attributes decoded once;
    each shared index of distinct attributes looked up once)."""
    catalogs: dict[int, np.ndarray] = {}
    for part in parts:
        if id(part.attr_distinct) in catalogs:
            continue
        ids = np.empty(len(part.attr_distinct), dtype=np.int32)
        for position, data in enumerate(part.attr_distinct):
            index = CATALOG.ids.get(data)
            if index is None:
                try:
                    index = CATALOG.add(data)
                except DecodeError:
                    _raise_malformed_attribute(parts, data)
                    if data != ATTRIBUTE_SEPARATOR:
                        raise InputError("malformed attribute") from None
                    index = MISSING  # the one-parse separator, which no node carries
            ids[position] = index
        catalogs[id(part.attr_distinct)] = ids
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate([catalogs[id(p.attr_distinct)][p.attr_local] for p in parts])


def _raise_malformed_attribute(parts: list[_FileColumns], data: bytes) -> None:
    """Name the first file and node that carry the attribute ``data`` protobuf cannot decode (if any does)."""
    for part in parts:
        local = part.attr_distinct.get(data)
        if local is None or not np.any(part.attr_local == local):
            continue  # the index is shared: another file of this share carries it
        node = int(np.repeat(np.arange(len(part.ids)), part.attr_counts)[np.argmax(part.attr_local == local)])
        raise InputError("malformed attribute", path=part.file.path, rank=part.file.rank, node=int(part.ids[node]))


def _decode_file(data: bytes, path: Path | str, rank: int | None, missing: str = "error", shared: AttributeIndex | None = None) -> _FileColumns:
    try:
        return _decode_file_columns(data, path, rank, missing, AttributeIndex() if shared is None else shared)
    except ChakraCollError as error:
        raise error.located(path=path, rank=rank) from None


def _decode_file_columns(data: bytes, path: Path | str, rank: int | None, missing: str, shared: AttributeIndex) -> _FileColumns:
    """One parse for all nodes (:mod:`.one_parse`); node by node when the file is unusual (a
    framing fault, a record protobuf cannot parse, a value that collides with a separator), so
    that every error reads as that path reports it."""
    if not data:
        raise InputError("empty file (no GlobalMetadata, no nodes)", path=path, rank=rank)
    records = node_records(data, 0)
    if records is None:
        return _decode_node_by_node(data, path, rank, missing, shared)
    size, payload = decoder._DecodeVarint32(records[0], 0)
    metadata = read_metadata(records[0][payload:], path)
    if len(records) == 1:
        raise InputError("no nodes after the GlobalMetadata (ASTRA-sim cannot run an empty rank file)", path=path, rank=rank)
    try:
        fields = parse_node_fields(records[1:], shared)
    except DecodeError:
        fields = None
    if fields is None:
        return _decode_node_by_node(data, path, rank, missing, shared)
    return _file_columns(EtFile(path, rank, metadata), fields, missing, shared)


def _decode_node_by_node(data: bytes, path: Path | str, rank: int | None, missing: str, shared: AttributeIndex) -> _FileColumns:
    bounds = split_records(data, path)
    _, payload, end = bounds[0]
    metadata = read_metadata(data[payload:end], path)
    if len(bounds) == 1:
        raise InputError("no nodes after the GlobalMetadata (ASTRA-sim cannot run an empty rank file)", path=path, rank=rank)
    try:
        parsed, merged = parse_nodes(data, bounds[1:])
    except DecodeError:
        _raise_bad_record(data, bounds, path, rank)
    nodes = list(parsed)  # one Python wrapper per node, reused by the field passes below
    count = len(nodes)

    def per_node(values, dtype) -> np.ndarray:
        return np.fromiter(values, dtype=dtype, count=count)

    fields = NodeFields(
        ids=per_node((n.id for n in nodes), np.uint64),
        types=per_node((n.type for n in nodes), np.int64),
        durations=per_node((n.duration_micros for n in nodes), np.uint64),
        data_counts=per_node((len(n.data_deps) for n in nodes), np.int64),
        data_deps=np.array(merged.data_deps, dtype=np.uint64),
        ctrl_counts=per_node((len(n.ctrl_deps) for n in nodes), np.int64),
        ctrl_deps=np.array(merged.ctrl_deps, dtype=np.uint64),
        attr_counts=per_node((len(n.attr) for n in nodes), np.int64),
        attr_positions=shared.positions(merged.attr),
    )
    return _file_columns(EtFile(path, rank, metadata), fields, missing, shared)


def _file_columns(file: EtFile, fields: NodeFields, missing: str, shared: AttributeIndex) -> _FileColumns:
    ids = fields.ids
    if np.any(ids > np.iinfo(np.int64).max):
        position = int(np.flatnonzero(ids > np.iinfo(np.int64).max)[0])
        raise InputError(f"node id {int(ids[position])} does not fit in int64", path=file.path, rank=file.rank)
    node_ids = ids.astype(np.int64)
    dep_counts, dep_ids, dep_ctrl = _dependency_lists(fields)
    return _FileColumns(
        file=file,
        ids=node_ids,
        types=fields.types.astype(np.int32),  # Node.type is an enum: 32 bits on the wire
        durations=fields.durations.astype(np.int64),
        dep_counts=dep_counts.astype(np.int32),
        dep_local=_positions_of(node_ids, dep_counts, dep_ids, file.path, file.rank, missing).astype(_position_dtype(len(node_ids))),
        dep_ctrl=dep_ctrl,
        attr_counts=fields.attr_counts.astype(np.int32),
        attr_local=fields.attr_positions.astype(np.int32),
        attr_distinct=shared,
    )


def _dependency_lists(fields: NodeFields) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, how many dependencies it has; all of them flat (each node's data_deps, then
    its ctrl_deps); and which of those are ctrl_deps."""
    data_counts, data_ids = fields.data_counts, fields.data_deps
    if not len(fields.ctrl_deps):
        return data_counts, data_ids, np.zeros(len(data_ids), dtype=bool)
    count = len(data_counts)
    ctrl_counts, ctrl_ids = fields.ctrl_counts, fields.ctrl_deps
    owner = np.concatenate([np.repeat(np.arange(count), data_counts), np.repeat(np.arange(count), ctrl_counts)])
    order = np.argsort(owner, kind="stable")  # per node: its data_deps, then its ctrl_deps
    is_ctrl = np.concatenate([np.zeros(len(data_ids), dtype=bool), np.ones(len(ctrl_ids), dtype=bool)])
    return data_counts + ctrl_counts, np.concatenate([data_ids, ctrl_ids])[order], is_ctrl[order]


MISSING_DEPENDENCY = -1
"""Position of a dependency on a node id the file does not have (``missing="keep"``)."""


def _positions_of(node_ids: np.ndarray, dep_counts: np.ndarray, dep_ids: np.ndarray, path, rank, missing: str = "error") -> np.ndarray:
    """Map dependency ids to positions in the file; duplicate ids are errors, and so are
    dependencies on absent nodes unless ``missing="keep"`` (they become :data:`MISSING_DEPENDENCY`)."""
    count = len(node_ids)
    owner = np.repeat(np.arange(count), dep_counts)
    if count and node_ids[0] == 0 and node_ids[-1] == count - 1 and np.array_equal(node_ids, np.arange(count)):
        found = dep_ids < count
        positions = np.where(found, dep_ids, 0).astype(np.int64)
    else:
        order = np.argsort(node_ids, kind="stable")
        sorted_ids = node_ids[order]
        duplicate = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
        if len(duplicate):
            node = int(sorted_ids[duplicate[0]])
            first, second = sorted(order[duplicate[0] : duplicate[0] + 2].tolist())
            raise AlgorithmError(f"duplicate node id (records {first + 1} and {second + 1})", path=path, rank=rank, node=node)
        in_range = dep_ids <= np.iinfo(np.int64).max
        wanted = np.where(in_range, dep_ids, 0).astype(np.int64)
        slot = np.minimum(np.searchsorted(sorted_ids, wanted), count - 1)
        found = in_range & (sorted_ids[slot] == wanted)
        positions = order[slot].astype(np.int64)
    if not np.all(found):
        if missing != "keep":
            first = int(np.flatnonzero(~found)[0])
            raise AlgorithmError(
                f"depends on node {int(dep_ids[first])}, which is not in the file", path=path, rank=rank, node=int(node_ids[owner[first]])
            )
        positions[~found] = MISSING_DEPENDENCY
    return positions


def _raise_bad_record(data: bytes, bounds: list[tuple[int, int, int]], path, rank):
    for index, (start, payload_start, end) in enumerate(bounds[1:], start=1):
        try:
            parse_node(data[payload_start:end])
        except DecodeError:
            raise InputError(f"record {index} (byte {start}) is not a Chakra Node", path=path, rank=rank) from None
    raise InputError("the node records are not valid Chakra Nodes", path=path, rank=rank)
