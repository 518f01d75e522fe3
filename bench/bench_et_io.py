"""Chakra ET write and read throughput (issue: write >= 400k nodes/s, read >= 500k nodes/s).

Baselines measured in the same run: building one ``Node`` per operation and writing it with
``protolib.encodeMessage`` (the straightforward writer), and ``protolib.decodeMessage`` of the
same files into ``Node`` messages without building anything (the raw parse).
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from chakra.schema.protobuf.et_def_pb2 import AttributeProto, GlobalMetadata, Int64List, Node
from chakra.src.third_party.utils import protolib

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.converters.chakra_et.writer import rank_path
from chakra_collectives.ir import Collective, OpKind
from chakra_collectives.synth.baselines import ring

from timing import median_seconds


def _protolib_writer(algo, prefix: Path) -> None:
    """The straightforward writer: one Node message per operation, protolib framing."""
    nbytes = algo.op_bytes()
    bounds = algo.rank_bounds()
    ops = algo.ops
    for rank in range(algo.num_ranks):
        sink = io.BytesIO()
        protolib.encodeMessage(sink, GlobalMetadata(version="0.0.4"))
        first = int(bounds[rank])
        for i in range(first, int(bounds[rank + 1])):
            kind = int(ops.kind[i])
            node = Node(id=i - first, name="op", type=5 if kind == OpKind.SEND else 6 if kind == OpKind.RECV else 4)
            node.data_deps.extend(int(d) - first for d in ops.deps_of(i))
            if kind in (OpKind.SEND, OpKind.RECV):
                node.attr.append(AttributeProto(name="comm_type", int64_val=node.type))
                node.attr.append(AttributeProto(name="comm_dst" if kind == OpKind.SEND else "comm_src", int32_val=int(ops.peer[i])))
                node.attr.append(AttributeProto(name="comm_size", int64_val=int(nbytes[i])))
                node.attr.append(AttributeProto(name="comm_tag", int32_val=int(ops.tag[i])))
                node.attr.append(AttributeProto(name="cc_src", int64_list=Int64List(values=[0, int(ops.src_off[i]), 1])))
            protolib.encodeMessage(sink, node)
        rank_path(prefix, rank).write_bytes(sink.getvalue())


def _protolib_parse(prefix: Path, num_ranks: int) -> int:
    count = 0
    for rank in range(num_ranks):
        with open(rank_path(prefix, rank), "rb") as handle:
            metadata = GlobalMetadata()
            protolib.decodeMessage(handle, metadata)
            node = Node()
            while protolib.decodeMessage(handle, node):
                count += 1
                node = Node()
    return count


def _measure(algo, repeat: int) -> list[tuple[str, float, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        ours = Path(tmp) / "ours"
        plain = Path(tmp) / "plain"
        write_s, _ = median_seconds(lambda: write_algorithm(algo, ours), repeat=repeat)
        plain_s, _ = median_seconds(lambda: _protolib_writer(algo, plain), repeat=min(repeat, 3))
        read_s, _ = median_seconds(lambda: read_algorithm(ours), repeat=repeat)
        parse_s, _ = median_seconds(lambda: _protolib_parse(ours, algo.num_ranks), repeat=min(repeat, 3))
        assert read_algorithm(ours).equals(algo), "round trip changed the algorithm"
    return [
        ("write_algorithm", write_s, ">= 400k"),
        ("baseline: Node per op + protolib.encodeMessage", plain_s, ""),
        ("read_algorithm (into the IR)", read_s, ">= 500k"),
        ("baseline: protolib.decodeMessage only (no IR)", parse_s, ""),
    ]


def main(argv: list[str]) -> None:
    cases = [(Collective.ALL_REDUCE, int(argv[0]) if argv else 256, 5)]
    if not argv:
        cases.append((Collective.ALL_GATHER, 1024, 3))  # 2.1M nodes in 1,024 files
    for collective, ranks, repeat in cases:
        algo = ring(collective, ranks, size_bytes=ranks * 2**20)
        nodes = algo.num_ops
        print(f"\nring {collective.value}, {ranks} ranks: {nodes:,} nodes; medians of {repeat} runs")
        rows = _measure(algo, repeat)
        print(f"{'what':<50} {'seconds':>8} {'nodes/s':>12} {'target':>8}")
        for name, seconds, target in rows:
            print(f"{name:<50} {seconds:>8.3f} {nodes / seconds:>12,.0f} {target:>8}")
        times = {name: seconds for name, seconds, _ in rows}
        print(f"write speedup over the plain protolib writer: {times[rows[1][0]] / times[rows[0][0]]:.2f}x; "
              f"read_algorithm takes {times[rows[2][0]] / times[rows[3][0]]:.2f}x a bare protolib parse")


if __name__ == "__main__":
    main(sys.argv[1:])
