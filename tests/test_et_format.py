"""Chakra ET files we write: exact protolib bytes, ASTRA-sim attribute types, exact round trip."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, GlobalMetadata, Node
from chakra.src.third_party.utils import protolib
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.chakra_et.attributes import ATTRIBUTES, schema_document
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, CollectiveAlgorithm, OpKind
from chakra_collectives.synth.baselines import ring

import et_edit

REPO = Path(__file__).resolve().parents[1]


def _protolib_reencode(path: Path) -> bytes:
    """Decode a file with protolib into real Chakra messages and encode them again."""
    metadata, nodes = et_edit.load(path)
    sink = io.BytesIO()
    protolib.encodeMessage(sink, metadata)
    for node in nodes:
        protolib.encodeMessage(sink, node)
    return sink.getvalue()


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE])
def test_files_are_byte_for_byte_what_protolib_writes(tmp_path, collective):
    algo = ring(collective, 5, size_bytes=5 * 2**20, chunks_per_npu=2)
    for path in write_algorithm(algo, tmp_path / "x", reduce_bandwidth_gbps=100.0):
        assert path.read_bytes() == _protolib_reencode(path)


def _random_algorithm(draw) -> CollectiveAlgorithm:
    num_ranks = draw(st.integers(2, 5))
    builder = AlgorithmBuilder(Collective.CUSTOM, num_ranks=num_ranks, chunk_count=8, size_bytes=draw(st.integers(8, 10**9)))
    for rank in range(num_ranks):
        for _ in range(draw(st.integers(1, 6))):
            existing = builder.num_ops(rank)
            deps = draw(st.lists(st.integers(0, existing - 1), max_size=3, unique=True)) if existing else []
            what = draw(st.sampled_from(["transfer", "reduce", "copy", "compute"]))
            if what == "transfer":
                peer = draw(st.integers(0, num_ranks - 1).filter(lambda p: p != rank))
                builder.transfer(rank, peer, src=(Buffer.INPUT, draw(st.integers(0, 3))), dst=(Buffer.OUTPUT, draw(st.integers(0, 3))),
                                 count=draw(st.integers(1, 4)), send_deps=deps)
            elif what == "compute":
                builder.add(rank, OpKind.COMPUTE, duration_ns=float(draw(st.integers(0, 10**7))), deps=deps)
            else:
                duration = draw(st.one_of(st.just(float("nan")), st.floats(0, 1e7, allow_nan=False)))
                op = OpKind.REDUCE if what == "reduce" else OpKind.COPY
                builder.add(rank, op, src=(Buffer.SCRATCH, draw(st.integers(0, 3))), dst=(Buffer.OUTPUT, draw(st.integers(0, 3))),
                            count=draw(st.integers(1, 4)), duration_ns=duration, deps=deps)
    return builder.build(input_chunks=[8] * num_ranks, output_chunks=[8] * num_ranks)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_algorithms_round_trip_exactly_and_match_protolib(tmp_path_factory, data):
    algo = _random_algorithm(data.draw)
    prefix = tmp_path_factory.mktemp("rt") / "alg"
    paths = write_algorithm(algo, prefix)
    assert read_algorithm(prefix).equals(algo)
    for path in paths:
        assert path.read_bytes() == _protolib_reencode(path)


def test_attributes_have_the_protobuf_types_astra_sim_reads(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=2**20)
    write_algorithm(algo, tmp_path / "ar", reduce_bandwidth_gbps=50.0)
    metadata, nodes = et_edit.load(tmp_path / "ar.1.et")
    expected_field = {
        COMM_SEND_NODE: {"comm_type": "int64_val", "comm_dst": "int32_val", "comm_size": "int64_val", "comm_tag": "int32_val"},
        COMM_RECV_NODE: {"comm_type": "int64_val", "comm_src": "int32_val", "comm_size": "int64_val", "comm_tag": "int32_val"},
        COMP_NODE: {"is_cpu_op": "bool_val"},
    }
    seen = set()
    for node in nodes:
        fields = {a.name: a.WhichOneof("value") for a in node.attr}
        for name, field in expected_field[node.type].items():
            assert fields[name] == field, (node.name, name)
        for name, field in fields.items():
            assert ATTRIBUTES[name].field == field  # every attribute we write is documented with its type
        if node.type in (COMM_SEND_NODE, COMM_RECV_NODE):
            assert et_edit.attr(node, "comm_type").int64_val == node.type
            assert et_edit.attr(node, "comm_size").int64_val == 2**20 // 4
        else:
            assert et_edit.attr(node, "is_cpu_op").bool_val is False
            # 256 KiB reduced at 50 GB/s (2^30 bytes per GB)
            assert et_edit.attr(node, "cc_duration_ns").double_val == pytest.approx(2**18 / (50 * 2**30 / 1e9))
            assert node.duration_micros == round(et_edit.attr(node, "cc_duration_ns").double_val / 1000)
        seen.add(node.type)
    assert seen == {COMM_SEND_NODE, COMM_RECV_NODE, COMP_NODE}
    assert [n.id for n in nodes] == list(range(len(nodes)))
    meta = {a.name: a for a in metadata.attr}
    assert meta["cc_collective"].string_val == "all-reduce" and meta["cc_rank"].int64_val == 1
    assert metadata.version == "0.0.4"


def test_schema_file_lists_exactly_the_attributes_we_write():
    assert (REPO / "schemas" / "et-attributes.json").read_text() == schema_document()
    names = {a["name"] for a in json.loads(schema_document())["attributes"]}
    assert names == set(ATTRIBUTES)


def test_gzip_files_read_like_plain_ones(tmp_path):
    algo = ring(Collective.ALL_GATHER, 3, size_bytes=3 * 1024)
    paths = write_algorithm(algo, tmp_path / "ag", compress=True)
    assert all(p.name.endswith(".et.gz") for p in paths)
    assert gzip.decompress(paths[0].read_bytes())[:1] != b""
    assert read_algorithm(tmp_path / "ag").equals(algo)


def test_rewriting_a_prefix_removes_stale_rank_files(tmp_path):
    write_algorithm(ring(Collective.ALL_GATHER, 6, size_bytes=6 * 64), tmp_path / "ag")
    smaller = ring(Collective.ALL_GATHER, 3, size_bytes=3 * 64)
    write_algorithm(smaller, tmp_path / "ag")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ag.0.et", "ag.1.et", "ag.2.et"]
    assert read_algorithm(tmp_path / "ag").equals(smaller)


def test_writing_for_another_size_scales_every_message(tmp_path):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=1024)
    write_algorithm(algo, tmp_path / "ar", size_bytes=4 * 2**20)
    _, nodes = et_edit.load(tmp_path / "ar.0.et")
    sizes = {et_edit.attr(n, "comm_size").int64_val for n in nodes if n.type == COMM_SEND_NODE}
    assert sizes == {2**20}
    again = read_algorithm(tmp_path / "ar")
    assert again.size_bytes == 4 * 2**20 and np.array_equal(again.op_bytes(1024), algo.op_bytes())


def test_sizes_that_do_not_divide_are_padded_up(tmp_path):
    algo = ring(Collective.ALL_GATHER, 3, size_bytes=1000)  # 3 chunks of ceil(1000/3) = 334 bytes
    assert algo.chunk_bytes() == 334
    write_algorithm(algo, tmp_path / "ag")
    _, nodes = et_edit.load(tmp_path / "ag.0.et")
    assert {et_edit.attr(n, "comm_size").int64_val for n in nodes if n.type == COMM_SEND_NODE} == {334}


def test_foreign_node_ids_survive_a_round_trip(tmp_path):
    builder = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=2, size_bytes=64)
    builder.add(0, OpKind.SEND, peer=1, tag=0, nbytes=64, node_id=100)
    builder.add(0, OpKind.COMPUTE, duration_ns=5000.0, deps=[0], node_id=7)
    builder.add(1, OpKind.RECV, peer=0, tag=0, nbytes=64, node_id=42)
    algo = builder.build(input_chunks=[0, 0], output_chunks=[0, 0])
    write_algorithm(algo, tmp_path / "f")
    _, nodes = et_edit.load(tmp_path / "f.0.et")
    assert [n.id for n in nodes] == [100, 7] and list(nodes[1].data_deps) == [100]
    assert read_algorithm(tmp_path / "f").ops.node_id.tolist() == [100, 7, 42]


def test_metadata_is_a_real_global_metadata(tmp_path):
    write_algorithm(ring(Collective.ALL_GATHER, 2, size_bytes=128), tmp_path / "ag")
    with open(tmp_path / "ag.0.et", "rb") as handle:
        metadata = GlobalMetadata()
        assert protolib.decodeMessage(handle, metadata)
        first = Node()
        assert protolib.decodeMessage(handle, first)
    assert {a.name for a in metadata.attr} >= {"cc_format", "cc_collective", "cc_num_ranks", "cc_chunk_count", "cc_size_bytes"}
    assert first.type == COMM_SEND_NODE


def test_two_process_decoding_gives_the_same_columns(tmp_path):
    from chakra_collectives.converters.chakra_et.nodes import decode_rank_files
    from chakra_collectives.converters.chakra_et.reader import rank_files

    write_algorithm(ring(Collective.ALL_REDUCE, 6, size_bytes=6 * 2**20), tmp_path / "ar")
    paths = rank_files(tmp_path / "ar")
    alone, shared = decode_rank_files(paths, workers=1), decode_rank_files(paths, workers=2)
    for name in ("file_ptr", "ids", "types", "duration_micros", "dep_ptr", "dep_pos"):
        assert np.array_equal(getattr(alone, name), getattr(shared, name)), name
    assert [f.rank for f in shared.files] == list(range(6))
    for attribute in ("comm_size", "comm_dst", "comm_tag"):
        assert np.array_equal(alone.attributes.integer(attribute, alone), shared.attributes.integer(attribute, shared))


def test_errors_found_by_the_second_process_keep_their_location(tmp_path):
    from chakra_collectives.converters.chakra_et.nodes import decode_rank_files
    from chakra_collectives.converters.chakra_et.reader import rank_files
    from chakra_collectives.errors import InputError

    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=4 * 2**20), tmp_path / "ar")
    broken = tmp_path / "ar.3.et"  # rank 3 goes to the second process
    broken.write_bytes(broken.read_bytes()[:-5])
    with pytest.raises(InputError) as caught:
        decode_rank_files(rank_files(tmp_path / "ar"), workers=2)
    assert caught.value.path == str(broken) and caught.value.rank == 3 and "truncated" in str(caught.value)
