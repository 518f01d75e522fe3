"""Raw Chakra ET decoding for tests: every record exactly as protobuf reads it (no project code)."""

from __future__ import annotations

from pathlib import Path

from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
from chakra.src.third_party.utils import protolib


def decode(path: Path) -> tuple[GlobalMetadata, list[Node]]:
    with open(path, "rb") as handle:
        metadata = GlobalMetadata()
        assert protolib.decodeMessage(handle, metadata)
        nodes = []
        while True:
            node = Node()
            if not protolib.decodeMessage(handle, node):
                return metadata, nodes
            nodes.append(node)


def attrs(node: Node) -> dict[str, tuple[str, object]]:
    """``name -> (oneof kind, value)`` of a node's attributes."""
    out = {}
    for attr in node.attr:
        kind = attr.WhichOneof("value")
        value = getattr(attr, kind)
        if kind.endswith("_list"):
            value = list(value.values)
        out[attr.name] = (kind, value)
    return out
