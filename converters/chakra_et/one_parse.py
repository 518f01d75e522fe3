"""Every node of an ET file in one protobuf parse, read out as whole numpy columns.

A file's node records are turned into the wire form of one message whose single field 1 is a
:class:`NodeColumnsView`: each record becomes a field-1 occurrence (protobuf's own tag, then
the record's own length prefix and bytes), so protobuf *merges* the records while parsing, and
every field of the merged message -- declared ``repeated`` here -- holds that field's values of
all nodes in file order, read out as one array.

A merge alone loses which node each value came from, and proto3 writes no zero values (node
id 0, a duration of 0). So a **separator** record, serialized by protobuf, is merged in before
every node: it holds one sentinel value in each field. Between two sentinels lie one node's
values: its dependencies, its attributes, and at most one id, type and duration (none: the
field's default, 0). A node value equal to a sentinel shows up as one sentinel too many, and a
singular field written twice (protobuf keeps the last) as two values between sentinels:
:func:`parse_node_fields` then returns ``None`` and the caller decodes node by node.

One difference from protobuf's own ``Node`` remains: a node whose id, type or duration is
written length-delimited (no writer does; a damaged file can) is read here as that packed
value, where ``Node`` keeps the field as unknown and reads 0.

>>> from chakra.schema.protobuf.et_def_pb2 import Node
>>> from chakra_collectives.converters.chakra_et.stream import frame
>>> data = b"".join(frame(Node(id=i, type=4, data_deps=[i - 1] if i else []).SerializeToString()) for i in range(3))
>>> fields = parse_node_fields(node_records(data, 0), AttributeIndex())
>>> fields.ids.tolist(), fields.types.tolist(), fields.data_counts.tolist(), fields.data_deps.tolist()
([0, 1, 2], [4, 4, 4], [0, 1, 1], [0, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from chakra.schema.protobuf import et_def_pb2
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import decoder, encoder, wire_format
from google.protobuf.message import DecodeError

from chakra_collectives.converters.chakra_et.stream import frame

_FIELD = descriptor_pb2.FieldDescriptorProto
_COLUMNS = ("id", "type", "ctrl_deps", "data_deps", "duration_micros", "attr")
"""The Node fields read (the others -- name, start time, tensors -- are skipped as unknown)."""


def _build_view_classes() -> tuple[type, type]:
    """NodeColumnsView (Chakra's Node fields of :data:`_COLUMNS`, each repeated, numbered and
    typed on the wire as in Node: ``type`` as int32, ``attr`` as serialized bytes) and
    NodeColumnsMerged (a singular NodeColumnsView field 1, which protobuf merges)."""
    columns = descriptor_pb2.DescriptorProto(name="NodeColumnsView")
    for name in _COLUMNS:
        field = et_def_pb2.Node.DESCRIPTOR.fields_by_name[name]
        wire_type = {"type": _FIELD.TYPE_INT32, "attr": _FIELD.TYPE_BYTES}.get(name, field.type)
        columns.field.add(name=name, number=field.number, label=_FIELD.LABEL_REPEATED, type=wire_type)
    merged = descriptor_pb2.DescriptorProto(name="NodeColumnsMerged")
    merged.field.add(
        name="node", number=1, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_MESSAGE,
        type_name=".chakra_collectives.columns.NodeColumnsView",
    )
    file = descriptor_pb2.FileDescriptorProto(
        name="chakra_collectives/node_columns.proto", package="chakra_collectives.columns", syntax="proto3"
    )
    file.message_type.extend([columns, merged])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"chakra_collectives.columns.{name}"))
        for name in ("NodeColumnsView", "NodeColumnsMerged")
    )


NodeColumnsView, NodeColumnsMerged = _build_view_classes()

ID_SENTINEL = 2**64 - 1
"""Separator value of the uint64 fields (id, dependencies, duration)."""
TYPE_SENTINEL = -(2**31)
"""Separator value of ``type``."""
ATTRIBUTE_SEPARATOR = b"\xff\xff"
"""Separator attribute: not a valid AttributeProto (a truncated varint), so no file carries it
without failing to decode."""

_TAG = encoder.TagBytes(1, wire_format.WIRETYPE_LENGTH_DELIMITED)
_SEPARATOR = frame(
    NodeColumnsView(
        id=[ID_SENTINEL], type=[TYPE_SENTINEL], ctrl_deps=[ID_SENTINEL], data_deps=[ID_SENTINEL],
        duration_micros=[ID_SENTINEL], attr=[ATTRIBUTE_SEPARATOR],
    ).SerializeToString()
)
_JOIN = _TAG + _SEPARATOR + _TAG
"""Between two records: the tag of a separator occurrence, the separator, the next record's tag."""


class AttributeIndex(dict):
    """Distinct serialized attributes -> their position, in first-seen order (``index[data]``
    adds an unseen one). The files one process decodes share one index, so a worker sends each
    distinct attribute back once and combining looks each up once."""

    def __missing__(self, data: bytes) -> int:
        position = self[data] = len(self)
        return position

    def positions(self, flat) -> np.ndarray:
        """Every attribute of ``flat`` (serialized, in order) as its position."""
        return np.fromiter(map(self.__getitem__, flat), dtype=np.int64, count=len(flat))


class _LengthPrefixes:
    """protobuf's varint decoder on record length prefixes, memoized: a prefix's value depends on
    its own bytes only, so a one-byte prefix (a record under 128 bytes) is looked up by that byte,
    a two-byte one by those two; longer ones are decoded every time. A file of millions of records
    calls the decoder a few hundred times instead of once per record."""

    def __init__(self) -> None:
        self.one_byte: dict[int, int] = {}
        """first byte -> prefix width + record length"""
        self.two_bytes: dict[bytes, int] = {}

    def framed_size(self, data: bytes, position: int) -> int:
        """The size of the record at ``position``, its prefix included (``data[position]`` starts no one-byte prefix)."""
        key = data[position : position + 2]
        known = self.two_bytes.get(key)
        if known is None:
            size, payload = decoder._DecodeVarint32(data, position)
            known = payload - position + size
            if payload - position == 1:
                self.one_byte[data[position]] = known
            elif payload - position == 2:
                self.two_bytes[key] = known
        return known


_LENGTHS = _LengthPrefixes()


def node_records(data: bytes, start: int) -> list[bytes] | None:
    """The framed records of ``data`` from byte ``start`` on, each with its length prefix, walked
    with protobuf's varint decoder (memoized); ``None`` when the stream is not cleanly framed
    (:func:`~chakra_collectives.converters.chakra_et.stream.split_records` names the fault)."""
    one_byte = _LENGTHS.one_byte.get
    framed_size = _LENGTHS.framed_size
    total = len(data)
    records: list[bytes] = []
    append = records.append
    position = start
    try:
        while position < total:
            end = position + (one_byte(data[position]) or framed_size(data, position))
            append(data[position:end])
            position = end
    except (IndexError, DecodeError):
        return None
    return records if position == total else None


@dataclass
class NodeFields:
    """The nodes of one file as columns (dependency and attribute lists flat, with per-node counts)."""

    ids: np.ndarray
    types: np.ndarray
    durations: np.ndarray
    data_counts: np.ndarray
    data_deps: np.ndarray
    ctrl_counts: np.ndarray
    ctrl_deps: np.ndarray
    attr_counts: np.ndarray
    attr_positions: np.ndarray
    """Each attribute's position in the :class:`AttributeIndex` given to :func:`parse_node_fields`."""


def parse_node_fields(records: list[bytes], index: AttributeIndex) -> NodeFields | None:
    """Every node record of ``records`` (framed) at once, or ``None`` when a node value collides
    with a separator or repeats a singular field (the caller then decodes node by node).

    Raises ``google.protobuf.message.DecodeError`` when a record is not a valid message.
    """
    count = len(records)
    node = NodeColumnsMerged.FromString(_JOIN + _JOIN.join(records)).node
    separator = index[ATTRIBUTE_SEPARATOR]
    singular = [_one_per_node(np.array(values, dtype=dtype), sentinel, count) for values, dtype, sentinel in (
        (node.id, np.uint64, ID_SENTINEL), (node.type, np.int64, TYPE_SENTINEL), (node.duration_micros, np.uint64, ID_SENTINEL),
    )]
    lists = [
        _per_node(np.array(node.data_deps, dtype=np.uint64), ID_SENTINEL, count),
        _per_node(np.array(node.ctrl_deps, dtype=np.uint64), ID_SENTINEL, count),
        _per_node(index.positions(list(node.attr)), separator, count),  # a list is read out faster than the container
    ]
    if any(column is None for column in singular) or any(pair is None for pair in lists):
        return None
    (data_counts, data_deps), (ctrl_counts, ctrl_deps), (attr_counts, attr_positions) = lists
    ids, types, durations = singular
    return NodeFields(ids, types, durations, data_counts, data_deps, ctrl_counts, ctrl_deps, attr_counts, attr_positions)


def _per_node(values: np.ndarray, sentinel, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(per-node counts, the values without sentinels)``: each node's values follow its sentinel."""
    is_sentinel = values == sentinel
    starts = np.flatnonzero(is_sentinel)
    if len(starts) != count:
        return None
    return np.diff(starts, append=len(values)) - 1, values[~is_sentinel]


def _one_per_node(values: np.ndarray, sentinel, count: int) -> np.ndarray | None:
    """A singular field per node (0 where it is absent); ``None`` if a node has it twice."""
    split = _per_node(values, sentinel, count)
    if split is None:
        return None
    counts, present = split
    if count and counts.max() > 1:
        return None
    column = np.zeros(count, dtype=values.dtype)
    column[counts == 1] = present
    return column
