"""Write a CollectiveAlgorithm as Chakra ET files, one per rank (``PREFIX.{rank}.et``).

Each file is what ASTRA-sim reads as a custom collective: a GlobalMetadata, then one node per
operation -- COMM_SEND / COMM_RECV with ``comm_*`` attributes of the exact protobuf types its
feeder expects, COMP nodes for reductions and copies -- plus our ``cc_*`` attributes
(:mod:`.attributes`) that keep chunk identity so the files can be verified and re-scaled.

Bytes are exactly what ``protolib.encodeMessage`` writes for the same ``Node`` messages. They
are produced faster than building one ``Node`` per operation: protobuf serializes a message as
its fields in field-number order, so a node's serialization is the concatenation of the
serializations of its fields, and the few distinct field values (ids, dependency lists,
attributes) are serialized by protobuf once each and reused (``tests/test_et_writer.py`` checks
the bytes against ``Node.SerializeToString`` and ``protolib.encodeMessage``).

Writing is all-or-nothing: every rank file is written under a temporary name and renamed only
when all of them are complete.

>>> import tempfile, pathlib
>>> from chakra_collectives.ir import Collective
>>> from chakra_collectives.synth.baselines import ring
>>> with tempfile.TemporaryDirectory() as tmp:
...     paths = write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=2**20), pathlib.Path(tmp) / "ag")
...     [p.name for p in paths]
['ag.0.et', 'ag.1.et', 'ag.2.et', 'ag.3.et']
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import numpy as np
from chakra.schema.protobuf.et_def_pb2 import (
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    AttributeProto,
    GlobalMetadata,
    Int64List,
    Node,
    StringList,
)
from chakra.src.third_party.utils import protolib

from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.units import bytes_per_ns
from chakra_collectives.converters.chakra_et.attributes import ET_VERSION, FORMAT
from chakra_collectives.converters.chakra_et.stream import length_prefix

_NODE_TYPE = {
    OpKind.SEND: COMM_SEND_NODE,
    OpKind.RECV: COMM_RECV_NODE,
    OpKind.REDUCE: COMP_NODE,
    OpKind.COPY: COMP_NODE,
    OpKind.COMPUTE: COMP_NODE,
}


def rank_path(prefix: str | Path, rank: int, *, compress: bool = False) -> Path:
    """``PREFIX.{rank}.et`` (``.et.gz`` when compressed), the name ASTRA-sim opens."""
    return Path(f"{prefix}.{rank}.et" + (".gz" if compress else ""))


def write_algorithm(
    algo: CollectiveAlgorithm,
    prefix: str | Path,
    *,
    size_bytes: int | None = None,
    reduce_bandwidth_gbps: float | None = None,
    compress: bool = False,
) -> list[Path]:
    """Write ``algo`` for a collective of ``size_bytes`` (default ``algo.size_bytes``).

    ``reduce_bandwidth_gbps`` turns reductions and copies without a duration into COMP nodes
    that take ``bytes / bandwidth``; without it they take no time (ASTRA-sim then charges 1 ns).
    Returns the paths written.
    """
    size = algo.size_bytes if size_bytes is None else size_bytes
    if size <= 0:
        raise InputError(f"collective size must be positive, got {size}")
    nbytes = algo.op_bytes(size)
    durations = _local_durations(algo, nbytes, reduce_bandwidth_gbps)
    _check_astra_sim_constraints(algo, nbytes, prefix)
    encoder = _NodeEncoder()
    bounds = algo.rank_bounds()
    blobs = [
        encoder.encode_rank(algo, rank, int(bounds[rank]), int(bounds[rank + 1]), nbytes, durations, size)
        for rank in range(algo.num_ranks)
    ]
    paths = [rank_path(prefix, rank, compress=compress) for rank in range(algo.num_ranks)]
    write_files_atomically(paths, [gzip.compress(b, mtime=0) if compress else b for b in blobs])
    return paths


def write_files_atomically(paths: list[Path], contents: list[bytes]) -> None:
    """Write every file under a temporary name, then rename them all; on error remove the temps."""
    if paths:
        paths[0].parent.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []
    try:
        for path, data in zip(paths, contents):
            temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temps.append(temp)
            temp.write_bytes(data)
        for temp, path in zip(temps, paths):
            os.replace(temp, path)
    except OSError as exc:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise InputError(f"cannot write: {exc.strerror}", path=exc.filename or paths[0]) from None


def _local_durations(algo: CollectiveAlgorithm, nbytes: np.ndarray, reduce_bandwidth_gbps: float | None) -> np.ndarray:
    durations = algo.ops.duration_ns.copy()
    if reduce_bandwidth_gbps is not None:
        if not reduce_bandwidth_gbps > 0:
            raise InputError(f"reduce bandwidth must be positive, got {reduce_bandwidth_gbps}")
        derive = np.isnan(durations) & ((algo.ops.kind == OpKind.REDUCE) | (algo.ops.kind == OpKind.COPY))
        durations[derive] = nbytes[derive] / bytes_per_ns(reduce_bandwidth_gbps)
    return durations


def _check_astra_sim_constraints(algo: CollectiveAlgorithm, nbytes: np.ndarray, prefix: str | Path) -> None:
    """Refuse what would make ASTRA-sim abort or silently misbehave (et-conventions.md)."""
    ops = algo.ops
    comm = ops.kind <= OpKind.RECV
    counts = np.bincount(ops.rank, minlength=algo.num_ranks)
    for rank in np.flatnonzero(counts == 0):
        raise AlgorithmError("rank has no operations (ASTRA-sim cannot load an empty rank file)", path=rank_path(prefix, int(rank)), rank=int(rank))
    checks = (
        (comm & (nbytes <= 0), "message of 0 bytes (ASTRA-sim aborts on comm_size 0); use a larger size"),
        (comm & (ops.peer == ops.rank), "sends to or receives from its own rank"),
        (comm & ((ops.peer < 0) | (ops.peer >= algo.num_ranks)), f"peer outside 0..{algo.num_ranks - 1}"),
        (comm & ((ops.tag < 0) | (ops.tag > 2**31 - 1)), "tag does not fit comm_tag (int32)"),
    )
    for mask, problem in checks:
        bad = np.flatnonzero(mask)
        if len(bad):
            first = int(bad[0])
            rank = int(ops.rank[first])
            raise AlgorithmError(problem, path=rank_path(prefix, rank), rank=rank, node=int(ops.node_id[first]))


class _NodeEncoder:
    """Serializes nodes from cached, protobuf-serialized field fragments (see module docstring)."""

    def __init__(self) -> None:
        self._ids: dict[int, bytes] = {}
        self._deps: dict[tuple[int, ...], bytes] = {}
        self._durations: dict[int, bytes] = {}
        self._names: dict[tuple[int, int, int], bytes] = {}
        self._attrs: dict[tuple, bytes] = {}
        self._types = {kind: Node(type=t).SerializeToString() for kind, t in _NODE_TYPE.items()}

    # -- fragments (each computed by protobuf once per distinct value)
    def _id(self, node_id: int) -> bytes:
        frag = self._ids.get(node_id)
        if frag is None:
            frag = self._ids[node_id] = Node(id=node_id).SerializeToString()
        return frag

    def _dep_list(self, deps: tuple[int, ...]) -> bytes:
        frag = self._deps.get(deps)
        if frag is None:
            frag = self._deps[deps] = Node(data_deps=deps).SerializeToString()
        return frag

    def _duration(self, micros: int) -> bytes:
        frag = self._durations.get(micros)
        if frag is None:
            frag = self._durations[micros] = Node(duration_micros=micros).SerializeToString()
        return frag

    def _name(self, rank: int, kind: int, peer: int) -> bytes:
        key = (rank, kind, peer)
        frag = self._names.get(key)
        if frag is None:
            if kind == OpKind.SEND:
                text = f"SEND {rank}->{peer}"
            elif kind == OpKind.RECV:
                text = f"RECV {rank}<-{peer}"
            else:
                text = OpKind(kind).name
            frag = self._names[key] = Node(name=text).SerializeToString()
        return frag

    def _attr(self, name: str, field: str, value) -> bytes:
        key = (name, value)
        frag = self._attrs.get(key)
        if frag is None:
            frag = self._attrs[key] = Node(attr=[_attribute(name, field, value)]).SerializeToString()
        return frag

    # -- files
    def encode_rank(
        self,
        algo: CollectiveAlgorithm,
        rank: int,
        start: int,
        stop: int,
        nbytes: np.ndarray,
        durations: np.ndarray,
        size: int,
    ) -> bytes:
        ops = algo.ops
        out = [_metadata_record(algo, rank, size)]
        append = out.append
        attr, dep_list, ident, name, prefix = self._attr, self._dep_list, self._id, self._name, length_prefix
        types = self._types
        dep_ptr = ops.dep_ptr[start : stop + 1].tolist()
        dep_idx = (ops.dep_idx[dep_ptr[0] : dep_ptr[-1]] - start).tolist()
        base = dep_ptr[0]
        node_ids = ops.node_id[start:stop].tolist()
        # dependencies name node ids (not positions) so foreign ids survive a round trip
        if node_ids != list(range(stop - start)):
            dep_idx = [node_ids[d] for d in dep_idx]
        columns = zip(
            node_ids,
            ops.kind[start:stop].tolist(),
            ops.peer[start:stop].tolist(),
            ops.tag[start:stop].tolist(),
            ops.src_buf[start:stop].tolist(),
            ops.src_off[start:stop].tolist(),
            ops.dst_buf[start:stop].tolist(),
            ops.dst_off[start:stop].tolist(),
            ops.count[start:stop].tolist(),
            nbytes[start:stop].tolist(),
            durations[start:stop].tolist(),
        )
        SEND, RECV, REDUCE = int(OpKind.SEND), int(OpKind.RECV), int(OpKind.REDUCE)
        for i, (node_id, kind, peer, tag, sbuf, soff, dbuf, doff, count, size_i, duration) in enumerate(columns):
            deps = tuple(dep_idx[dep_ptr[i] - base : dep_ptr[i + 1] - base])
            parts = [ident(node_id), name(rank, kind, peer), types[kind], dep_list(deps) if deps else b""]
            if kind == SEND or kind == RECV:
                if kind == SEND:
                    parts += (attr("comm_type", "int64_val", COMM_SEND_NODE), attr("comm_dst", "int32_val", peer))
                else:
                    parts += (attr("comm_type", "int64_val", COMM_RECV_NODE), attr("comm_src", "int32_val", peer))
                parts += (attr("comm_size", "int64_val", size_i), attr("comm_tag", "int32_val", tag))
                if count >= 0:
                    parts.append(
                        attr("cc_src", "int64_list", (sbuf, soff, count))
                        if kind == SEND
                        else attr("cc_dst", "int64_list", (dbuf, doff, count))
                    )
            else:
                timed = duration == duration  # not NaN
                if timed:
                    parts.append(self._duration(round(duration / 1000.0)))
                parts.append(attr("is_cpu_op", "bool_val", False))
                if count >= 0 and sbuf >= 0:
                    parts += (
                        attr("cc_op", "string_val", "reduce" if kind == REDUCE else "copy"),
                        attr("cc_src", "int64_list", (sbuf, soff, count)),
                        attr("cc_dst", "int64_list", (dbuf, doff, count)),
                    )
                if timed:
                    parts.append(attr("cc_duration_ns", "double_val", float(duration)))
            payload = b"".join(parts)
            append(prefix(len(payload)))
            append(payload)
        return b"".join(out)


def _attribute(name: str, field: str, value) -> AttributeProto:
    if field == "int64_list":
        return AttributeProto(name=name, int64_list=Int64List(values=list(value)))
    if field == "string_list":
        return AttributeProto(name=name, string_list=StringList(values=list(value)))
    return AttributeProto(name=name, **{field: value})


def _metadata_record(algo: CollectiveAlgorithm, rank: int, size: int) -> bytes:
    attrs = [
        ("cc_format", "string_val", FORMAT),
        ("cc_collective", "string_val", algo.collective.value),
        ("cc_num_ranks", "int64_val", algo.num_ranks),
        ("cc_rank", "int64_val", rank),
        ("cc_chunk_count", "int64_val", algo.chunk_count),
        ("cc_size_bytes", "int64_val", size),
        (
            "cc_buffer_chunks",
            "int64_list",
            (int(algo.input_chunks[rank]), int(algo.output_chunks[rank]), int(algo.scratch_chunks[rank])),
        ),
        ("cc_inplace", "bool_val", algo.inplace),
    ]
    if algo.root is not None:
        attrs.append(("cc_root", "int64_val", algo.root))
    if algo.name:
        attrs.append(("cc_name", "string_val", algo.name))
    if algo.provenance:
        attrs.append(("cc_provenance", "string_list", [f"{k}={v}" for k, v in algo.provenance.items()]))
    metadata = GlobalMetadata(version=ET_VERSION, attr=[_attribute(*a) for a in attrs])
    sink = io.BytesIO()
    protolib.encodeMessage(sink, metadata)
    return sink.getvalue()


__all__ = ["rank_path", "write_algorithm", "write_files_atomically"]
