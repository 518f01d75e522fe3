"""Decoding rank files: identical files decoded once, merged dependency columns, absent ids kept on request."""

from __future__ import annotations

import numpy as np
import pytest
from chakra.schema.protobuf.et_def_pb2 import COMP_NODE, GlobalMetadata, Node

from chakra_collectives.converters.chakra_et.nodes import HEAD_BYTES, MISSING_DEPENDENCY, decode_files, decode_rank_files
from chakra_collectives.converters.chakra_et.stream import frame
from chakra_collectives.errors import AlgorithmError


def stream(nodes: list[Node], version: str = "0.0.4") -> bytes:
    return frame(GlobalMetadata(version=version).SerializeToString()) + b"".join(frame(n.SerializeToString()) for n in nodes)


def chain_nodes(count: int, *, ctrl: bool = False) -> list[Node]:
    nodes = []
    for i in range(count):
        node = Node(id=10 + i, type=COMP_NODE, duration_micros=i)
        if i:
            node.data_deps.append(10 + i - 1)
        if ctrl and i > 1:
            node.ctrl_deps.extend([10 + i - 2, 10])
        nodes.append(node)
    return nodes


def test_identical_rank_files_decode_once_with_their_own_labels(tmp_path):
    data = stream(chain_nodes(5, ctrl=True))
    paths = []
    for rank in range(4):
        path = tmp_path / f"w.{rank}.et"
        path.write_bytes(data if rank != 2 else stream(chain_nodes(5, ctrl=True), version="other"))
        paths.append(path)
    columns = decode_rank_files(paths, workers=1)
    separately = decode_files([(p.read_bytes(), p, r) for r, p in enumerate(paths)])
    for name in ("file_ptr", "ids", "types", "duration_micros", "dep_ptr", "dep_pos", "dep_ctrl"):
        assert np.array_equal(getattr(columns, name), getattr(separately, name)), name
    assert [(f.path, f.rank) for f in columns.files] == [(p, r) for r, p in enumerate(paths)]
    assert [f.metadata["version"] for f in columns.files] == ["0.0.4", "0.0.4", "other", "0.0.4"]


def test_files_alike_in_size_and_head_are_compared_whole(tmp_path):
    # ranks 0, 1 and 3 share size and first HEAD_BYTES bytes; only 0 and 3 are identical (1 differs in its last node)
    nodes = chain_nodes(1000)
    assert len(stream(nodes)) > 2 * HEAD_BYTES
    changed = chain_nodes(1000)
    changed[-1].duration_micros = 998  # 999 before: one byte of the last record, same size
    datas = [stream(nodes), stream(changed), stream(chain_nodes(5)), stream(nodes)]
    assert len(datas[0]) == len(datas[1]) and datas[0][:HEAD_BYTES] == datas[1][:HEAD_BYTES] and datas[0] != datas[1]
    paths = []
    for rank, data in enumerate(datas):
        path = tmp_path / f"w.{rank}.et"
        path.write_bytes(data)
        paths.append(path)
    columns = decode_rank_files(paths, workers=1)
    assert [f.same_as for f in columns.files] == [None, None, None, 0]
    durations = columns.duration_micros
    last = columns.file_ptr[1:] - 1
    assert durations[last].tolist() == [999, 998, 4, 999]


def test_data_deps_come_before_ctrl_deps_and_are_marked(tmp_path):
    columns = decode_files([(stream(chain_nodes(4, ctrl=True)), "x.et", 0)])
    assert columns.deps_of(3).tolist() == [2, 1, 0]  # data dep on node 12, then ctrl deps on 11 and 10
    assert columns.dep_ctrl[columns.dep_ptr[3] : columns.dep_ptr[4]].tolist() == [False, True, True]


def test_dependencies_on_absent_nodes_are_refused_or_kept(tmp_path):
    nodes = chain_nodes(3)
    nodes[1].ctrl_deps.append(99)
    path = tmp_path / "w.0.et"
    path.write_bytes(stream(nodes))
    with pytest.raises(AlgorithmError, match="node 11: depends on node 99, which is not in the file"):
        decode_rank_files([path])
    kept = decode_rank_files([path], missing="keep")
    assert kept.deps_of(1).tolist() == [0, MISSING_DEPENDENCY]


@pytest.mark.parametrize("workers", [1, 2])
def test_files_packed_in_batches_give_the_columns_of_files_decoded_one_by_one(tmp_path, monkeypatch, workers):
    from chakra_collectives.converters.chakra_et import nodes, write_algorithm
    from chakra_collectives.converters.chakra_et.reader import rank_files
    from chakra_collectives.ir import Collective
    from chakra_collectives.synth.baselines import ring

    write_algorithm(ring(Collective.ALL_REDUCE, 5, size_bytes=5 * 2**20), tmp_path / "ar")
    paths = rank_files(tmp_path / "ar")
    monkeypatch.setattr(nodes, "BATCH_FILES", 2)  # 3 batches of 2, 2 and 1 files
    packed = decode_rank_files(paths, workers=workers)
    alone = decode_files([(p.read_bytes(), p, r) for r, p in enumerate(paths)])
    for name in ("file_ptr", "ids", "types", "duration_micros", "dep_ptr", "dep_pos", "dep_ctrl"):
        assert np.array_equal(getattr(packed, name), getattr(alone, name)), name
    assert [(f.path, f.rank) for f in packed.files] == [(f.path, f.rank) for f in alone.files]
    for attribute in ("comm_size", "comm_src", "comm_dst", "comm_tag"):
        assert packed.attributes.integer(attribute, packed).tolist() == alone.attributes.integer(attribute, alone).tolist()
