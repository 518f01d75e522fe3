"""The IR's invariants, byte derivation, aliasing, and what `inspect` reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chakra_collectives.converters.chakra_et import write_algorithm
from chakra_collectives.errors import InputError
from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective, OpKind, OpTable
from chakra_collectives.summary import summarize
from chakra_collectives.synth.baselines import ring
from chakra_collectives.units import bytes_per_ns, parse_size


def test_builder_groups_ops_by_rank_and_keeps_local_dependencies():
    builder = AlgorithmBuilder(Collective.CUSTOM, num_ranks=3, chunk_count=3, size_bytes=300)
    a = builder.copy(2, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=1)
    send, recv = builder.transfer(2, 0, src=(Buffer.OUTPUT, 0), dst=(Buffer.OUTPUT, 1), count=1, send_deps=[a])
    builder.transfer(0, 1, src=(Buffer.OUTPUT, 1), dst=(Buffer.OUTPUT, 2), count=1, send_deps=[recv])
    algo = builder.build(input_chunks=[1, 1, 1], output_chunks=[3, 3, 3])
    assert algo.ops.rank.tolist() == sorted(algo.ops.rank.tolist())
    bounds = algo.rank_bounds().tolist()
    assert bounds == [0, 2, 3, 5]
    rank2 = list(algo.ops_of(2))
    assert [op.kind for op in rank2] == [OpKind.COPY, OpKind.SEND] and rank2[1].deps == (0,)
    rank0 = list(algo.ops_of(0))
    assert rank0[1].deps == (0,) and rank0[1].peer == 1
    assert algo.scratch_chunks.tolist() == [0, 0, 0]


def test_fresh_tags_are_unique_per_direction():
    builder = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=1, size_bytes=8)
    tags = [builder.fresh_tag(0, 1) for _ in range(3)] + [builder.fresh_tag(1, 0)]
    assert tags == [0, 1, 2, 0]


def test_op_bytes_scale_exactly_with_chunks_and_proportionally_without():
    builder = AlgorithmBuilder(Collective.CUSTOM, num_ranks=2, chunk_count=4, size_bytes=4000)
    builder.transfer(0, 1, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, 0), count=3)
    builder.add(0, OpKind.SEND, peer=1, tag=9, nbytes=500)
    builder.add(1, OpKind.RECV, peer=0, tag=9, nbytes=500)
    algo = builder.build(input_chunks=[4, 4], output_chunks=[4, 4])
    assert algo.op_bytes().tolist() == [3000, 500, 3000, 500]
    assert algo.op_bytes(8000).tolist() == [6000, 1000, 6000, 1000]
    assert algo.op_bytes(10).tolist() == [9, 2, 9, 2]  # chunks of ceil(10/4)=3 bytes; 500*10/4000 rounded up
    assert not algo.has_chunk_identity


def test_ops_must_be_grouped_by_rank():
    with pytest.raises(ValueError):
        OpTable.from_columns(rank=[1, 0], kind=[0, 1], dep_ptr=[0, 0, 0], dep_idx=[])


@pytest.mark.parametrize(
    "collective, buffer, rank, offset, expected",
    [
        (Collective.ALL_GATHER, Buffer.INPUT, 2, 1, (Buffer.OUTPUT, 2 * 2 + 1)),
        (Collective.ALL_GATHER, Buffer.OUTPUT, 2, 1, (Buffer.OUTPUT, 1)),
        (Collective.REDUCE_SCATTER, Buffer.OUTPUT, 3, 0, (Buffer.INPUT, 6)),
        (Collective.ALL_REDUCE, Buffer.OUTPUT, 1, 5, (Buffer.INPUT, 5)),
    ],
)
def test_in_place_aliasing(collective, buffer, rank, offset, expected):
    algo = ring(Collective.ALL_REDUCE, 4, size_bytes=64, chunks_per_npu=2)
    from dataclasses import replace

    aliased = replace(algo, collective=collective, inplace=True)
    assert tuple(int(v) for v in aliased.resolve(rank, buffer, offset)) == expected
    assert tuple(int(v) for v in algo.resolve(rank, buffer, offset)) == (buffer, offset)


@pytest.mark.parametrize("text, expected", [("1MB", 2**20), ("64MiB", 64 * 2**20), ("512", 512), ("2 KiB", 2048), ("0.5K", 512)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-4KB", "0", "1.3B", "12XB", "1e3"])
def test_bad_sizes(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_bandwidth_units_follow_astra_sim():
    assert bytes_per_ns(50.0) == pytest.approx(53.687, abs=1e-3)


@pytest.mark.parametrize("ranks", [2, 5, 8])
def test_inspect_counts_match_the_ring_closed_form(ranks):
    size = ranks * 4096
    stats = summarize(ring(Collective.ALL_REDUCE, ranks, size_bytes=size))
    for row in stats["ranks"]:
        # a ring all-reduce sends and receives 2(N-1)/N of the buffer on every rank
        assert row["bytes_sent"] == row["bytes_received"] == 2 * (ranks - 1) * size // ranks
        assert row["ops"]["SEND"] == row["ops"]["RECV"] == 2 * (ranks - 1)
        assert row["ops"]["REDUCE"] == ranks - 1
        assert row["longest_chain"] == 3  # locally: receive, reduce, forward; the rest waits on messages
    # the critical path crosses every step: 2(N-1) sends, 2(N-1) receives and N-1 reductions
    assert stats["totals"]["critical_path_ops"] == 5 * (ranks - 1)


def test_cli_inspect_json_and_table(cli, tmp_path):
    write_algorithm(ring(Collective.ALL_GATHER, 3, size_bytes=3 * 2**20), tmp_path / "ag")
    document = json.loads(cli("inspect", tmp_path / "ag", "--json").stdout)
    assert document["totals"]["bytes_sent"] == 3 * 2 * 2**20
    assert [r["rank"] for r in document["ranks"]] == [0, 1, 2]
    table = cli("inspect", tmp_path / "ag.1.et")  # a rank file works as the prefix
    assert table.exit_code == 0 and "total" in table.stdout and "2 MiB" in table.stdout
    scaled = json.loads(cli("inspect", tmp_path / "ag", "--size", "3KiB", "--json").stdout)
    assert scaled["totals"]["bytes_sent"] == 3 * 2 * 1024
    assert np.all([r["bytes_sent"] == 2048 for r in scaled["ranks"]])
