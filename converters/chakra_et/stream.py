"""Chakra ET streams: protolib framing, in bulk.

A Chakra ET file is a stream of length-delimited protobuf messages (a varint length, then the
message), written and read by Chakra's ``protolib.encodeMessage`` / ``decodeMessage``. This
module keeps exactly that framing -- every length prefix comes from ``protolib`` itself -- but
works on whole files at once:

* :func:`frame` prefixes a serialized message with the bytes ``protolib.encodeMessage`` writes;
* :func:`split_records` walks a stream with ``protolib``'s own varint decoder and reports
  truncation precisely (``protolib.decodeMessage`` silently stops instead);
* :func:`parse_nodes` parses every node record of a file in one protobuf call, through
  :class:`NodeView`: a message type built from Chakra's own ``Node`` descriptor that is
  wire-identical to it but keeps each attribute as its serialized bytes, so that a reader can
  decode each distinct attribute once instead of once per node. It also parses the same bytes
  as :class:`NodeViewMerged`, whose single ``node`` field protobuf *merges* across records:
  every node's ``data_deps``, ``ctrl_deps`` and ``attr`` concatenated in file order, read out
  as whole arrays instead of node by node.

>>> from chakra.schema.protobuf.et_def_pb2 import Node
>>> payload = Node(id=3, type=5).SerializeToString()
>>> framed = frame(payload)
>>> split_records(framed, "x.et")
[(0, 1, 5)]
>>> nodes, merged = parse_nodes(framed, split_records(framed, "x.et"))
>>> nodes[0].id
3
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import numpy as np
from chakra.schema.protobuf import et_def_pb2
from chakra.src.third_party.utils import protolib
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import decoder
from google.protobuf.message import DecodeError

from chakra_collectives.errors import InputError
from chakra_collectives.resources import Estimate, require
from chakra_collectives.units import format_size

GZIP_MAGIC = b"\x1f\x8b"


# ---------------------------------------------------------------------------- framing
class _Serialized:
    """Adapter that lets ``protolib.encodeMessage`` frame bytes we already serialized."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's method name)
        return self.data


_PREFIXES: dict[int, bytes] = {}


def length_prefix(length: int) -> bytes:
    """The varint ``protolib.encodeMessage`` writes before a message of ``length`` bytes."""
    prefix = _PREFIXES.get(length)
    if prefix is None:
        sink = io.BytesIO()
        protolib.encodeMessage(sink, _Serialized(b"\0" * length))
        prefix = sink.getvalue()[:-length] if length else sink.getvalue()
        _PREFIXES[length] = prefix
    return prefix


def frame(payload: bytes) -> bytes:
    """``payload`` with its protolib length prefix."""
    return length_prefix(len(payload)) + payload


def load_bytes(path: Path) -> bytes:
    """Whole file contents, gunzipped when the file is gzip (as ``protolib.openFileRd`` does)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=path) from None
    if data.startswith(GZIP_MAGIC):
        try:
            data = gunzip(data, path)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            raise InputError(f"corrupt gzip data ({exc})", path=path) from None
    return data


UNPACK_STEP = 64 * 2**20
"""Bytes :func:`gunzip` unpacks between two checks of the memory limit."""


def gunzip(data: bytes, path: str | Path) -> bytes:
    """``data`` (one or more gzip members) unpacked, a step at a time: a file that unpacks to more
    than the memory limit allows (a "gzip bomb") is refused with a :class:`LimitError` before it
    is held, instead of exhausting memory.

    >>> gunzip(gzip.compress(b"node"), "x.et")
    b'node'
    """
    parts: list[bytes] = []
    total = 0
    pending = data
    while pending:
        inflater = zlib.decompressobj(wbits=31)
        while True:
            part = inflater.decompress(pending, UNPACK_STEP)
            pending = inflater.unconsumed_tail
            if part:
                parts.append(part)
                total += len(part)
                require(Estimate(
                    f"reading {path}", total, f"{format_size(total)} unpacked so far from {format_size(len(data))} of gzip",
                    "check the file (an ET this large is unlikely) or read fewer files",
                ))
            if inflater.eof or not pending and not part:
                break
        if not inflater.eof:
            raise EOFError("the gzip data ends before its last member does")
        pending = inflater.unused_data
    return b"".join(parts)


def split_records(data: bytes, path: str | Path) -> list[tuple[int, int, int]]:
    """``(start, payload_start, end)`` of every framed record, using protobuf's varint decoder
    (``google.protobuf.internal.decoder``, the one ``protolib.decodeMessage`` copies).

    ``data[start:end]`` is the record with its length prefix, ``data[payload_start:end]`` the
    message. Raises :class:`InputError` naming the record when the stream is truncated.
    """
    decode = decoder._DecodeVarint32
    total = len(data)
    bounds: list[tuple[int, int, int]] = []
    append = bounds.append
    start = 0
    while start < total:
        try:
            size, payload = decode(data, start)
        except (IndexError, DecodeError):
            raise InputError(f"record {len(bounds)} at byte {start}: malformed length prefix", path=path) from None
        end = payload + size
        if end > total:
            remain = total - payload
            raise InputError(f"truncated: record {len(bounds)} at byte {start} needs {size} bytes, {remain} remain", path=path)
        append((start, payload, end))
        start = end
    return bounds


def stream_of(data: bytes, bounds: list[tuple[int, int, int]]) -> bytes:
    """The records ``bounds`` of ``data`` as one message whose field 1 repeats them: a tag
    byte before each record's own length prefix (numpy, no per-record slicing)."""
    if not bounds:
        return b""
    starts = np.fromiter((a for a, _, _ in bounds), dtype=np.int64, count=len(bounds))
    first, last = int(starts[0]), bounds[-1][2]
    body = np.frombuffer(data, dtype=np.uint8, count=last - first, offset=first)
    if last - first == int(sum(b - a for a, _, b in bounds)):  # contiguous records: insert the tags
        return np.insert(body, starts - first, _STREAM_TAG[0]).tobytes()
    return _STREAM_TAG + _STREAM_TAG.join([data[a:b] for a, _, b in bounds])


# ---------------------------------------------------------------------------- node view
def _build_view_classes() -> tuple[type, type, type]:
    """NodeView (Chakra's Node with attr/name as bytes, type as int), NodeViewStream (a
    repeated NodeView field 1) and NodeViewMerged (a singular one: the records merge)."""
    node = descriptor_pb2.DescriptorProto()
    et_def_pb2.Node.DESCRIPTOR.CopyToProto(node)
    node.name = "NodeView"
    keep = {"id", "name", "type", "ctrl_deps", "data_deps", "duration_micros", "attr"}
    kept = [f for f in node.field if f.name in keep]
    del node.field[:]
    for f in kept:
        if f.name in ("attr", "name"):
            f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            f.ClearField("type_name")
        elif f.name == "type":
            f.type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32  # same wire format as the enum
            f.ClearField("type_name")
        node.field.append(f)
    stream = descriptor_pb2.DescriptorProto(name="NodeViewStream")
    stream.field.add(
        name="nodes",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".chakra_collectives.view.NodeView",
    )
    merged = descriptor_pb2.DescriptorProto(name="NodeViewMerged")
    merged.field.add(
        name="node",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".chakra_collectives.view.NodeView",
    )
    file = descriptor_pb2.FileDescriptorProto(
        name="chakra_collectives/node_view.proto", package="chakra_collectives.view", syntax="proto3"
    )
    file.message_type.extend([node, stream, merged])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"chakra_collectives.view.{name}"))
        for name in ("NodeView", "NodeViewStream", "NodeViewMerged")
    )


NodeView, NodeViewStream, NodeViewMerged = _build_view_classes()

_STREAM_TAG = b"\x0a"  # field 1 (NodeViewStream.nodes), wire type 2: then the record's own prefix


def parse_nodes(data: bytes, bounds: list[tuple[int, int, int]]):
    """Parse the node records ``bounds`` of ``data`` at once: ``(nodes, merged)``.

    ``nodes`` are :class:`NodeView` messages, one per record; ``merged`` is one
    :class:`NodeView` holding every record's repeated fields concatenated (see the module
    docstring). Raises ``google.protobuf.message.DecodeError`` when a record is not a valid
    message; the caller reports which file (and, by parsing records one by one, which record).
    """
    records = stream_of(data, bounds)
    return NodeViewStream.FromString(records).nodes, NodeViewMerged.FromString(records).node


def parse_node(record: bytes):
    """Parse one node record (payload only) into a :class:`NodeView`."""
    node = NodeView()
    node.ParseFromString(record)
    return node
