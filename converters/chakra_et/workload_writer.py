"""Write workload ETs (``PREFIX.{rank}.et``): the workload generators', samples', tests' and benchmarks'.

Files are what ASTRA-sim's workload feeder reads: a ``GlobalMetadata`` then ``Node`` messages
framed by Chakra's ``protolib.encodeMessage``, with the attribute names and types of
``docs/et-conventions.md``.

>>> import tempfile, pathlib
>>> b = WorkloadBuilder(2)
>>> for r in range(2):
...     c = b.comp(r, duration_ns=5000, name="fwd")
...     _ = b.collective(r, "all-reduce", 2**20, deps=[c])
>>> with tempfile.TemporaryDirectory() as tmp:
...     [p.name for p in b.write(pathlib.Path(tmp) / "step")]
['step.0.et', 'step.1.et']
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from chakra.schema.protobuf.et_def_pb2 import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    METADATA_NODE,
    AttributeProto,
    BoolList,
    GlobalMetadata,
    Node,
)
from chakra.src.third_party.utils import protolib

from chakra_collectives.converters.chakra_et.attributes import ET_VERSION
from chakra_collectives.converters.chakra_et.writer import rank_path, write_rank_files
from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective

INT32_MIN, INT32_MAX, INT64_MAX, UINT64_MAX = -(2**31), 2**31 - 1, 2**63 - 1, 2**64 - 1


def _in_range(value: float, low: int, high: int, field: str, rank: int, builder: "WorkloadBuilder") -> int:
    """``value`` as the integer the ET field holds, or an :class:`InputError` naming the rank and node.

    >>> _in_range(-1, 0, INT64_MAX, "comm_size", 3, WorkloadBuilder(4))
    Traceback (most recent call last):
    ...
    chakra_collectives.errors.InputError: rank 3: node 0: comm_size -1 is outside the range the ET field holds (0 to 9223372036854775807)
    """
    number = round(value) if value == value and abs(value) != float("inf") else None
    if number is None or not low <= number <= high:
        raise InputError(f"{field} {value:g} is outside the range the ET field holds ({low} to {high})", rank=rank, node=len(builder.nodes[rank]))
    return number


class WorkloadBuilder:
    """Per-rank lists of workload nodes; every method returns the new node's id on that rank."""

    def __init__(self, num_ranks: int) -> None:
        self.num_ranks = num_ranks
        self.nodes: list[list[Node]] = [[] for _ in range(num_ranks)]

    def _add(self, rank: int, node: Node, deps: Iterable[int], ctrl_deps: Iterable[int] = ()) -> int:
        node.id = len(self.nodes[rank])
        node.data_deps.extend(deps)
        node.ctrl_deps.extend(ctrl_deps)
        self.nodes[rank].append(node)
        return node.id

    def comp(
        self, rank: int, *, duration_ns: float, name: str = "COMP", deps: Iterable[int] = (), ctrl_deps: Iterable[int] = (),
        num_ops: int | None = None, tensor_size: int | None = None, cpu: bool = False,
    ) -> int:
        """A GPU COMP node of ``duration_ns`` (stored as whole microseconds, as Chakra does);
        ``cpu=True`` makes it host work (``is_cpu_op = true``).

        ``num_ops`` and ``tensor_size`` (bytes) are what ASTRA-sim's roofline mode reads
        instead of the duration (uint64 attributes, written only when given).
        """
        node = Node(name=name, type=COMP_NODE, duration_micros=_in_range(duration_ns / 1000, 0, UINT64_MAX, "duration_micros", rank, self))
        node.attr.append(AttributeProto(name="is_cpu_op", bool_val=cpu))
        if num_ops is not None:
            node.attr.append(AttributeProto(name="num_ops", uint64_val=int(num_ops)))
        if tensor_size is not None:
            node.attr.append(AttributeProto(name="tensor_size", uint64_val=int(tensor_size)))
        return self._add(rank, node, deps, ctrl_deps)

    def collective(
        self, rank: int, collective: str | Collective, size_bytes: int, *, name: str = "", pg_name: str | None = None,
        deps: Iterable[int] = (), ctrl_deps: Iterable[int] = (), comm_type: int | None = None,
        involved_dim: Sequence[bool] | None = None,
    ) -> int:
        """A COMM_COLL node; ``pg_name`` names its process group, ``involved_dim`` the network
        dimensions ASTRA-sim runs it over (both optional)."""
        kind = Collective.parse(collective) if isinstance(collective, str) else collective
        code = kind.chakra_comm_type if comm_type is None else comm_type
        node = Node(name=name or kind.value, type=COMM_COLL_NODE)
        node.attr.extend([
            AttributeProto(name="is_cpu_op", bool_val=False),
            AttributeProto(name="comm_type", int64_val=code),
            AttributeProto(name="comm_size", int64_val=_in_range(size_bytes, 0, INT64_MAX, "comm_size", rank, self)),
        ])
        if pg_name is not None:
            node.attr.append(AttributeProto(name="pg_name", string_val=pg_name))
        if involved_dim is not None:
            node.attr.append(AttributeProto(name="involved_dim", bool_list=BoolList(values=list(involved_dim))))
        return self._add(rank, node, deps, ctrl_deps)

    def send(self, rank: int, dst: int, size_bytes: int, *, tag: int = 0, deps: Iterable[int] = ()) -> int:
        node = Node(name=f"SEND {rank}->{dst}", type=COMM_SEND_NODE)
        node.attr.extend([
            AttributeProto(name="is_cpu_op", bool_val=False),
            AttributeProto(name="comm_dst", int32_val=_in_range(dst, 0, INT32_MAX, "comm_dst", rank, self)),
            AttributeProto(name="comm_size", int64_val=_in_range(size_bytes, 0, INT64_MAX, "comm_size", rank, self)),
            AttributeProto(name="comm_tag", int32_val=_in_range(tag, INT32_MIN, INT32_MAX, "comm_tag", rank, self)),
        ])
        return self._add(rank, node, deps)

    def recv(self, rank: int, src: int, size_bytes: int, *, tag: int = 0, deps: Iterable[int] = ()) -> int:
        node = Node(name=f"RECV {rank}<-{src}", type=COMM_RECV_NODE)
        node.attr.extend([
            AttributeProto(name="is_cpu_op", bool_val=False),
            AttributeProto(name="comm_src", int32_val=_in_range(src, 0, INT32_MAX, "comm_src", rank, self)),
            AttributeProto(name="comm_size", int64_val=_in_range(size_bytes, 0, INT64_MAX, "comm_size", rank, self)),
            AttributeProto(name="comm_tag", int32_val=_in_range(tag, INT32_MIN, INT32_MAX, "comm_tag", rank, self)),
        ])
        return self._add(rank, node, deps)

    def replicate(self, rank: int = 0) -> None:
        """Give every rank the nodes of ``rank`` (SPMD workloads: the rank files are identical).

        Built once, encoded once: call it after building ``rank`` only, and add nothing after.
        """
        self.nodes = [self.nodes[rank]] * self.num_ranks

    def metadata(self, rank: int, *, name: str = "METADATA", deps: Iterable[int] = ()) -> int:
        return self._add(rank, Node(name=name, type=METADATA_NODE), deps)

    def write(
        self, prefix: str | Path, *, extra: Mapping[Path, bytes] | None = None,
        check: Callable[[list[bytes], list[Path]], None] | None = None,
    ) -> list[Path]:
        """Write ``PREFIX.{rank}.et`` for every rank, and the ``extra`` files, all or nothing.

        Rank files of the same prefix left by an earlier, larger workload are removed, so the
        prefix names exactly this workload. ``check`` sees the encoded files and their paths
        before anything is written (raising refuses them). Returns the rank files' paths.
        """
        paths = [rank_path(prefix, r) for r in range(self.num_ranks)]
        encoded: dict[int, bytes] = {}  # ranks sharing one node list (replicate) are encoded once
        blobs = []
        for nodes in self.nodes:
            blob = encoded.get(id(nodes))
            if blob is None:
                sink = io.BytesIO()
                protolib.encodeMessage(sink, GlobalMetadata(version=ET_VERSION))
                for node in nodes:
                    protolib.encodeMessage(sink, node)
                blob = encoded[id(nodes)] = sink.getvalue()
            blobs.append(blob)
        if check is not None:
            check(blobs, paths)
        write_rank_files(prefix, paths, blobs, extra=extra)
        return paths


def single_collective_workload(prefix: str | Path, collective: str | Collective, num_ranks: int, size_bytes: int) -> list[Path]:
    """One COMM_COLL node per rank: ASTRA-sim's microbenchmark workloads have this shape."""
    builder = WorkloadBuilder(num_ranks)
    for rank in range(num_ranks):
        builder.collective(rank, collective, size_bytes)
    return builder.write(prefix)



__all__ = ["WorkloadBuilder", "single_collective_workload"]
