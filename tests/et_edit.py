"""Edit Chakra ET files node by node (for mutation tests), with Chakra's own protolib."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
from chakra.src.third_party.utils import protolib


def load(path: Path) -> tuple[GlobalMetadata, list[Node]]:
    with open(path, "rb") as handle:
        metadata = GlobalMetadata()
        assert protolib.decodeMessage(handle, metadata)
        nodes = []
        node = Node()
        while protolib.decodeMessage(handle, node):
            nodes.append(node)
            node = Node()
    return metadata, nodes


def save(path: Path, metadata: GlobalMetadata, nodes: list[Node]) -> None:
    with open(path, "wb") as handle:
        protolib.encodeMessage(handle, metadata)
        for node in nodes:
            protolib.encodeMessage(handle, node)


def edit(path: Path, change: Callable[[list[Node]], list[Node] | None]) -> None:
    """Apply ``change`` to the node list of ``path`` (in place, or by returning a new list)."""
    metadata, nodes = load(path)
    result = change(nodes)
    save(path, metadata, nodes if result is None else result)


def attr(node: Node, name: str):
    return next(a for a in node.attr if a.name == name)
