"""One protobuf parse per file (converters/chakra_et/one_parse.py) against protobuf's own node-by-node reading."""

from __future__ import annotations

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_SEND_NODE, COMP_NODE, AttributeProto, GlobalMetadata, Node

from chakra_collectives.converters.chakra_et.nodes import decode_files, decode_rank_files
from chakra_collectives.converters.chakra_et.one_parse import (
    ATTRIBUTE_SEPARATOR,
    ID_SENTINEL,
    AttributeIndex,
    node_records,
    parse_node_fields,
)
from chakra_collectives.converters.chakra_et.stream import frame, split_records
from chakra_collectives.errors import InputError


def varied_nodes() -> list[Node]:
    """Nodes with what proto3 leaves out (id 0, type 0, no duration, no lists) and what it keeps."""
    comm = [AttributeProto(name="comm_dst", int32_val=1), AttributeProto(name="comm_size", int64_val=2**40)]
    return [
        Node(),
        Node(id=1, type=COMP_NODE, duration_micros=2**63 + 5, data_deps=[0]),
        Node(id=2**62, type=COMM_SEND_NODE, data_deps=[0, 1], ctrl_deps=[1], attr=comm),
        Node(id=3, type=-7, ctrl_deps=[2**62, 0], attr=[AttributeProto(), comm[0], AttributeProto(name="x", string_val="y")]),
        Node(id=4, name="named", data_deps=list(range(300))),
    ]


def records_of(nodes: list[Node]) -> list[bytes]:
    return node_records(b"".join(frame(n.SerializeToString()) for n in nodes), 0)


def test_one_parse_reads_what_protobuf_reads_node_by_node():
    nodes = varied_nodes()
    index = AttributeIndex()
    fields = parse_node_fields(records_of(nodes), index)
    assert fields is not None
    assert fields.ids.tolist() == [n.id for n in nodes]
    assert fields.types.tolist() == [n.type for n in nodes]
    assert fields.durations.tolist() == [n.duration_micros for n in nodes]
    assert fields.data_counts.tolist() == [len(n.data_deps) for n in nodes]
    assert fields.data_deps.tolist() == [d for n in nodes for d in n.data_deps]
    assert fields.ctrl_counts.tolist() == [len(n.ctrl_deps) for n in nodes]
    assert fields.ctrl_deps.tolist() == [d for n in nodes for d in n.ctrl_deps]
    assert fields.attr_counts.tolist() == [len(n.attr) for n in nodes]
    by_position = {position: data for data, position in index.items()}
    assert [by_position[p] for p in fields.attr_positions.tolist()] == [a.SerializeToString() for n in nodes for a in n.attr]


@pytest.mark.parametrize(
    "node",
    [Node(id=ID_SENTINEL), Node(id=1, data_deps=[ID_SENTINEL]), Node(id=1, ctrl_deps=[ID_SENTINEL]), Node(id=1, duration_micros=ID_SENTINEL)],
)
def test_a_value_equal_to_a_separator_is_left_to_node_by_node_decoding(node):
    assert parse_node_fields(records_of([Node(id=0), node]), AttributeIndex()) is None


def test_a_singular_field_written_twice_is_left_to_node_by_node_decoding():
    twice = Node(id=5, type=COMP_NODE).SerializeToString() + Node(id=7).SerializeToString()  # protobuf keeps the last id
    records = node_records(frame(Node(id=0).SerializeToString()) + frame(twice), 0)
    assert parse_node_fields(records, AttributeIndex()) is None
    columns = decode_files([(frame(GlobalMetadata().SerializeToString()) + frame(Node(id=0).SerializeToString()) + frame(twice), "x.et", 0)])
    assert columns.ids.tolist() == [0, 7] and columns.types.tolist() == [0, COMP_NODE]


def stream(nodes: list[Node]) -> bytes:
    return frame(GlobalMetadata(version="0.0.4").SerializeToString()) + b"".join(frame(n.SerializeToString()) for n in nodes)


def test_files_read_in_one_parse_or_node_by_node_give_the_same_columns():
    nodes = [n for n in varied_nodes() if n.id < 2**62]
    clean = decode_files([(stream(nodes), "a.et", 0)], missing="keep")
    collides = decode_files([(stream(nodes + [Node(id=1000, duration_micros=ID_SENTINEL)]), "a.et", 0)], missing="keep")  # node by node
    for name in ("ids", "types", "duration_micros", "dep_ptr", "dep_pos", "dep_ctrl"):
        assert np.array_equal(getattr(clean, name), getattr(collides, name)[: len(getattr(clean, name))]), name
    for attribute in ("comm_dst", "comm_size"):
        assert clean.attributes.integer(attribute, clean).tolist() == collides.attributes.integer(attribute, collides).tolist()[:-1]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_node_carrying_the_separator_attribute_is_a_malformed_attribute(tmp_path, workers):
    paths = []
    for rank in range(3):
        attr = [AttributeProto(name="comm_dst", int32_val=rank)]
        first = Node(id=0, type=COMP_NODE, attr=attr).SerializeToString()
        second = Node(id=1, type=COMP_NODE, attr=attr, data_deps=[0]).SerializeToString()
        if rank == 2:  # one more attribute (field 10): the separator's bytes
            second += Node(attr=[AttributeProto()]).SerializeToString()[:-1] + bytes([len(ATTRIBUTE_SEPARATOR)]) + ATTRIBUTE_SEPARATOR
        path = tmp_path / f"s.{rank}.et"
        path.write_bytes(frame(GlobalMetadata().SerializeToString()) + frame(first) + frame(second))
        paths.append(path)
    with pytest.raises(InputError, match=r"s\.2\.et.*rank 2.*node 1.*malformed attribute"):
        decode_rank_files(paths, workers=workers)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_record_protobuf_cannot_parse_is_named_in_either_process(tmp_path, workers):
    paths = []
    for rank in range(4):
        path = tmp_path / f"b.{rank}.et"
        data = stream([Node(id=0, type=COMP_NODE), Node(id=1, type=COMP_NODE, data_deps=[0])])
        if rank == 3:
            data += frame(b"\xff\xff\xff")  # frames, but is no message
        path.write_bytes(data)
        paths.append(path)
    with pytest.raises(InputError) as caught:
        decode_rank_files(paths, workers=workers)
    assert caught.value.path == str(paths[3]) and caught.value.rank == 3
    assert str(caught.value).count("\n") == 0 and "record 3" in str(caught.value) and "is not a Chakra Node" in str(caught.value)


@pytest.mark.parametrize("sizes", [[0], [5, 127, 128, 129], [300, 0, 16383, 16384, 20000, 1], [2**21 + 3, 7]])
def test_records_are_walked_as_protobufs_decoder_walks_them(sizes):
    data = b"".join(frame(bytes([size % 251]) * size) for size in sizes) * 2  # each prefix seen twice: memoized the second time
    assert node_records(data, 0) == [data[start:end] for start, _, end in split_records(data, "x.et")]
    assert node_records(data + frame(b"abc")[:-1], 0) is None  # the last record is cut short
    assert node_records(data + b"\x80", 0) is None  # a length prefix that never ends
