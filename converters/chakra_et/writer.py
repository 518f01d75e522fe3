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

Files are streamed rank by rank: one rank's bytes are encoded, written and freed before the
next (never every rank's nodes in memory). A large algorithm (:data:`PARALLEL_OPS` operations
or more) is written by as many processes as the machine has cores, each encoding a contiguous
share of the ranks with about as many operations as the others; the files are the same.
Writing is all-or-nothing: every rank file is
written under a temporary name and renamed only when all of them are complete; rank files of
the same prefix left by an earlier write (more ranks, or the other compression) are then
removed, so the prefix names one algorithm.

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
import re
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Mapping

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

from chakra_collectives import progress
from chakra_collectives.errors import AlgorithmError, InputError
from chakra_collectives.limits import check_size
from chakra_collectives.resources import Estimate, count, require_disk
from chakra_collectives.ir import CollectiveAlgorithm, OpKind
from chakra_collectives.ir.parts import PART_OPS
from chakra_collectives.ir.pattern import pattern_lines
from chakra_collectives.converters.chakra_et.attributes import ET_VERSION, FORMAT
from chakra_collectives.converters.chakra_et.columns_file import combined_digest, file_digest
from chakra_collectives.converters.chakra_et.commit import commit_files, commit_staged
from chakra_collectives.processes import can_fork, run_forked
from chakra_collectives.converters.chakra_et.assembly import FragmentList, gather
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


PARALLEL_OPS = 500_000
"""Operations from which :func:`write_algorithm` shares the ranks among processes (about a
second of encoding in one; below, forking costs more than it saves)."""


BYTES_PER_OP = 120
"""Upper envelope of a rank file's bytes per operation (measured 96-108 for TACOS, BFB and the
baselines at 64-16,384 ranks: a node's ids, dependencies and attributes)."""
GZIP_BYTES_PER_OP = 32
"""The same, compressed (``--compress``; measured 11-26)."""
BYTES_PER_FILE = 1024
"""A rank file's own bytes: its metadata and what the operations do not amortize."""


def file_bytes(num_ops: int, num_ranks: int, *, compress: bool = False) -> float:
    """What :func:`write_algorithm` puts on disk for ``num_ops`` operations over ``num_ranks``
    files, at most (:data:`BYTES_PER_OP` or :data:`GZIP_BYTES_PER_OP` per operation).

    >>> file_bytes(30_200_000, 16384) / 2**30 < 3.5     # torus2d:128x128's All-Gather: 3.0 GiB written
    True
    """
    return (GZIP_BYTES_PER_OP if compress else BYTES_PER_OP) * float(num_ops) + BYTES_PER_FILE * num_ranks


def write_algorithm_hashed(
    algo: CollectiveAlgorithm,
    prefix: str | Path,
    *,
    size_bytes: int | None = None,
    reduce_bandwidth_gbps: float | None = None,
    compress: bool = False,
    workers: int | None = None,
) -> tuple[list[Path], str]:
    """:func:`write_algorithm`, and the files' digest
    (:func:`~chakra_collectives.converters.chakra_et.columns_file.files_digest`) computed from
    each file's bytes as they are written (by the processes writing them): the digest without
    reading the files back."""
    return _write_algorithm(algo, prefix, size_bytes, reduce_bandwidth_gbps, compress, workers, hashed=True)


def write_algorithm(
    algo: CollectiveAlgorithm,
    prefix: str | Path,
    *,
    size_bytes: int | None = None,
    reduce_bandwidth_gbps: float | None = None,
    compress: bool = False,
    workers: int | None = None,
) -> list[Path]:
    """Write ``algo`` for a collective of ``size_bytes`` (default ``algo.size_bytes``).

    ``reduce_bandwidth_gbps`` turns reductions and copies without a duration into COMP nodes
    that take ``bytes / bandwidth``; without it they take no time (ASTRA-sim then charges 1 ns).
    ``workers`` processes encode the ranks (default: the machine's cores from
    :data:`PARALLEL_OPS` operations, else 1; always 1 where this process cannot fork).
    Returns the paths written. Files that would not fit the disk (:func:`file_bytes` against its
    free space) are refused before any is written (:class:`~chakra_collectives.errors.LimitError`).
    """
    return _write_algorithm(algo, prefix, size_bytes, reduce_bandwidth_gbps, compress, workers, hashed=False)[0]


def _write_algorithm(
    algo: CollectiveAlgorithm, prefix: str | Path, size_bytes: int | None, reduce_bandwidth_gbps: float | None,
    compress: bool, workers: int | None, *, hashed: bool,
) -> tuple[list[Path], str]:
    """:func:`write_algorithm`'s work; the files' digest when ``hashed`` (else ``""``)."""
    size = algo.size_bytes if size_bytes is None else size_bytes
    if size <= 0:
        raise InputError(f"collective size must be positive, got {size}")
    check_size(size, "collective size")
    nbytes = algo.op_bytes(size)
    durations = algo.local_durations(nbytes, reduce_bandwidth_gbps)
    _check_astra_sim_constraints(algo, nbytes, prefix)
    require_disk(Path(prefix).parent, Estimate(
        f"writing {prefix}.{{rank}}.et", file_bytes(algo.num_ops, algo.num_ranks, compress=compress),
        f"{count(algo.num_ops)} operations in {algo.num_ranks} files", "write them to another disk (-o) or free space",
    ))
    encoder = _NodeEncoder()
    bounds = algo.rank_bounds()

    def rank_bytes(rank: int) -> bytes:
        data = encoder.encode_rank(algo, rank, int(bounds[rank]), int(bounds[rank + 1]), nbytes, durations, size)
        encoder.trim()
        return gzip.compress(data, mtime=0) if compress else data

    paths = [rank_path(prefix, rank, compress=compress) for rank in range(algo.num_ranks)]
    if workers is None:
        workers = (os.cpu_count() or 1) if algo.num_ops >= PARALLEL_OPS else 1
    workers = min(workers, algo.num_ranks) if can_fork() else 1
    shares = balanced_rank_shares(bounds, workers)
    unit = "files" if len(shares) == 1 else f"files (1/{len(shares)} share)"

    digests: list[tuple[int, bytes]] = []

    def stage(staging: Path) -> None:
        def writer_of(ranks: range) -> Callable[[], list[tuple[int, bytes]]]:
            def write_share() -> list[tuple[int, bytes]]:
                share_digests = []
                # the shares hold as many operations each: the share written here shows the progress of all
                with progress.task("encode rank files", total=len(ranks), unit=unit) as done:
                    for rank in ranks:
                        data = rank_bytes(rank)
                        (staging / paths[rank].name).write_bytes(data)
                        if hashed:
                            share_digests.append(file_digest(data))
                        done.advance()
                return share_digests

            return write_share

        for share_digests in run_forked([writer_of(ranks) for ranks in shares]):  # one share: written here, no fork
            digests.extend(share_digests)  # the shares are consecutive ranges of ranks, in order

    commit_staged(paths, stage, name=Path(prefix).name, after=lambda: _remove_stale_rank_files(prefix, paths))
    return paths, combined_digest(digests) if hashed else ""




def write_parts(
    lower: Callable[[range], CollectiveAlgorithm],
    ops_per_rank: np.ndarray,
    prefix: str | Path,
    *,
    size_bytes: int,
    compress: bool = False,
    workers: int | None = None,
    part_ops: int | None = None,
) -> list[Path]:
    """Write an algorithm that is never whole in memory: ``lower(ranks)`` gives it holding only
    the operations of the range ``ranks`` (as the whole algorithm has them, e.g.
    :func:`~chakra_collectives.synth.lowering.all_gather_algorithm` with ``ranks``), and
    ``ops_per_rank[r]`` is how many rank ``r`` has. The same files as :func:`write_algorithm`
    of the whole: each writing process (as many as there, sharing the ranks) lowers ranges
    of at most ``part_ops`` operations (default :data:`PART_OPS`) one after another, encodes and
    writes their rank files, and frees them; all or nothing, refused up front when the files
    would not fit the disk, and a part that breaks an ASTRA-sim rule (:func:`write_algorithm`)
    stops the write with nothing written.
    """
    if size_bytes <= 0:
        raise InputError(f"collective size must be positive, got {size_bytes}")
    check_size(size_bytes, "collective size")
    ops_per_rank = np.asarray(ops_per_rank, dtype=np.int64)
    num_ranks = len(ops_per_rank)
    bounds = np.zeros(num_ranks + 1, dtype=np.int64)
    np.cumsum(ops_per_rank, out=bounds[1:])
    num_ops = int(bounds[-1])
    require_disk(Path(prefix).parent, Estimate(
        f"writing {prefix}.{{rank}}.et", file_bytes(num_ops, num_ranks, compress=compress),
        f"{count(num_ops)} operations in {num_ranks} files", "write them to another disk (-o) or free space",
    ))
    paths = [rank_path(prefix, rank, compress=compress) for rank in range(num_ranks)]
    if workers is None:
        workers = (os.cpu_count() or 1) if num_ops >= PARALLEL_OPS else 1
    workers = min(workers, num_ranks) if can_fork() else 1
    shares = balanced_rank_shares(bounds, workers)
    unit = "files" if len(shares) == 1 else f"files (1/{len(shares)} share)"
    limit = PART_OPS if part_ops is None else part_ops

    def stage(staging: Path) -> None:
        def writer_of(share: range) -> Callable[[], None]:
            def write_share() -> None:
                encoder = _NodeEncoder()
                with progress.task("lower and encode rank files", total=len(share), unit=unit) as done:
                    for part in rank_parts(bounds, share, limit):
                        algo = lower(part)
                        nbytes = algo.op_bytes(size_bytes)
                        durations = algo.local_durations(nbytes)
                        _check_astra_sim_constraints(algo, nbytes, prefix, ranks=part)
                        local = algo.rank_bounds()
                        for rank in part:
                            data = encoder.encode_rank(algo, rank, int(local[rank]), int(local[rank + 1]), nbytes, durations, size_bytes)
                            encoder.trim()
                            (staging / paths[rank].name).write_bytes(gzip.compress(data, mtime=0) if compress else data)
                            done.advance()
                        del algo, nbytes, durations, local

            return write_share

        run_forked([writer_of(share) for share in shares])

    commit_staged(paths, stage, name=Path(prefix).name, after=lambda: _remove_stale_rank_files(prefix, paths))
    return paths


def rank_parts(bounds: np.ndarray, ranks: range, max_ops: int) -> list[range]:
    """``ranks`` cut into consecutive ranges of at most ``max_ops`` operations each (at least one
    rank), from the ranks' operation bounds (rank ``r`` holds ``bounds[r]:bounds[r + 1]``).

    >>> rank_parts(np.array([0, 4, 8, 9, 20]), range(0, 4), 8)
    [range(0, 2), range(2, 3), range(3, 4)]
    """
    parts, start = [], ranks.start
    while start < ranks.stop:
        stop = int(np.searchsorted(bounds, bounds[start] + max_ops, side="right")) - 1
        stop = min(max(stop, start + 1), ranks.stop)
        parts.append(range(start, stop))
        start = stop
    return parts


def balanced_rank_shares(bounds: np.ndarray, shares: int) -> list[range]:
    """``shares`` contiguous ranges of ranks with about equal operations each, from the ranks'
    operation bounds (rank ``r`` holds operations ``bounds[r]:bounds[r + 1]``).

    >>> balanced_rank_shares(np.array([0, 10, 20, 30, 40]), 2)
    [range(0, 2), range(2, 4)]
    >>> balanced_rank_shares(np.array([0, 90, 95, 100]), 2)
    [range(0, 1), range(1, 3)]
    """
    ranks = len(bounds) - 1
    targets = bounds[-1] * np.arange(1, shares) / shares
    cuts = np.searchsorted(bounds[1:], targets, side="left") + 1
    edges = [0, *np.clip(cuts, 1, ranks - 1).tolist(), ranks]
    return [range(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def write_rank_files(prefix: str | Path, paths: list[Path], contents: Iterable[bytes], *, extra: Mapping[Path, bytes] | None = None) -> None:
    """Write the rank files ``paths`` of ``prefix`` (and the ``extra`` files) all or nothing
    (:mod:`~chakra_collectives.converters.chakra_et.commit`), then remove the prefix's other rank
    files (an earlier, larger or differently compressed write), so the prefix names exactly what
    was just written. ``contents`` may be a generator: each file's bytes are produced when it is
    written."""
    extra = dict(extra or {})
    commit_files(
        paths + list(extra), chain(contents, extra.values()), name=Path(prefix).name, after=lambda: _remove_stale_rank_files(prefix, paths)
    )


def _remove_stale_rank_files(prefix: str | Path, written: list[Path]) -> None:
    prefix = Path(prefix)
    keep = {p.name for p in written}
    pattern = re.compile(rf"^{re.escape(prefix.name)}\.\d+\.et(\.gz)?$")
    for path in prefix.parent.iterdir():
        if pattern.match(path.name) and path.name not in keep:
            path.unlink(missing_ok=True)


def write_files_atomically(paths: list[Path], contents: Iterable[bytes]) -> None:
    """Write every file (all in one folder), all or nothing as readers see them
    (:func:`~chakra_collectives.converters.chakra_et.commit.commit_files`)."""
    commit_files(paths, contents)


def _check_astra_sim_constraints(algo: CollectiveAlgorithm, nbytes: np.ndarray, prefix: str | Path, *, ranks: range | None = None) -> None:
    """Refuse what would make ASTRA-sim abort or silently misbehave (docs/et-conventions.md);
    ``ranks``: the algorithm holds only these ranks' operations."""
    ops = algo.ops
    comm = ops.kind <= OpKind.RECV
    counts = np.bincount(ops.rank, minlength=algo.num_ranks)
    if ranks is not None:
        counts = counts[ranks.start : ranks.stop]
    for rank in np.flatnonzero(counts == 0) + (0 if ranks is None else ranks.start):
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


class _Fragments(dict):
    """``key -> bytes`` computed by ``build(key)`` on first use; later lookups are plain dict hits."""

    def __init__(self, build) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, key):
        fragment = self[key] = self.build(key)
        return fragment


def _attr_bytes(name: str, field: str, value) -> bytes:
    """One attribute, serialized by protobuf as a ``Node.attr`` field."""
    return Node(attr=[_attribute(name, field, value)]).SerializeToString()


class _Refilled:
    """``values -> bytes``: one message whose repeated field ``field`` is refilled with
    ``values`` and serialized by protobuf (2.7x faster than building a message each time), for
    fragments that are mostly distinct (dependency lists, chunk references, ranges)."""

    def __init__(self, message, field: str, values=None) -> None:
        self.message = message
        self.values = getattr(message, field) if values is None else values

    @classmethod
    def attribute(cls, name: str) -> "_Refilled":
        """A ``Node.attr`` of type ``int64_list`` named ``name``."""
        node = Node(attr=[_attribute(name, "int64_list", ())])
        return cls(node, "attr", node.attr[0].int64_list.values)

    def __call__(self, values) -> bytes:
        del self.values[:]
        self.values.extend(values)
        return self.message.SerializeToString()


class _NodeEncoder:
    """Serializes nodes from cached, protobuf-serialized field fragments (see module docstring).

    A node is ``id + name + type + data_deps + duration_micros + attributes`` in field-number
    order; each part comes from a fragment table filled by protobuf on first use.
    """

    LIMIT = 2**17
    """Entries a fragment table keeps between ranks (:meth:`trim`): dependency lists and chunk
    references are mostly distinct per node, and caching all of them would hold every node."""

    def __init__(self) -> None:
        self.ids = _Fragments(lambda node_id: Node(id=node_id).SerializeToString())
        self.deps = _Fragments(_Refilled(Node(), "data_deps"))
        self.durations = _Fragments(lambda micros: Node(duration_micros=micros).SerializeToString())
        self.prefixes = _Fragments(length_prefix)
        self.tags = _Fragments(lambda tag: _attr_bytes("comm_tag", "int32_val", tag))
        self.sources = _Fragments(_Refilled.attribute("cc_src"))
        self.destinations = _Fragments(_Refilled.attribute("cc_dst"))
        self.paths = _Fragments(lambda path: _attr_bytes("cc_route", "int64_list", path))
        self.exact = _Fragments(lambda ns: _attr_bytes("cc_duration_ns", "double_val", ns))
        self.threadblocks = _Fragments(lambda where: _attr_bytes("cc_threadblock", "int64_list", where))
        # cc_ranges differ from message to message (no table)
        self.ranges = _Refilled.attribute("cc_ranges")
        # comm_type + comm_dst/comm_src keyed by (kind, peer), then comm_size by bytes: apart, a
        # rank's few peers and the sizes all ranks share are built once each
        self.comm = _Fragments(self._comm_fragment)
        self.sizes = _Fragments(lambda nbytes: _attr_bytes("comm_size", "int64_val", nbytes))
        self.not_cpu = _attr_bytes("is_cpu_op", "bool_val", False)
        self.local_op = {
            OpKind.REDUCE: _attr_bytes("cc_op", "string_val", "reduce"),
            OpKind.COPY: _attr_bytes("cc_op", "string_val", "copy"),
        }

    def trim(self) -> None:
        """Forget the fragment tables that grew past :attr:`LIMIT` (called between ranks)."""
        for table in (self.ids, self.deps, self.durations, self.tags, self.sources, self.destinations, self.exact, self.comm, self.sizes):
            if len(table) > self.LIMIT:
                table.clear()

    @staticmethod
    def _comm_fragment(key: tuple[int, int]) -> bytes:
        kind, peer = key
        if kind == OpKind.SEND:
            parts = (("comm_type", "int64_val", COMM_SEND_NODE), ("comm_dst", "int32_val", peer))
        else:
            parts = (("comm_type", "int64_val", COMM_RECV_NODE), ("comm_src", "int32_val", peer))
        return b"".join(_attr_bytes(*p) for p in parts)

    @staticmethod
    def _heads(rank: int) -> _Fragments:
        """``(kind, peer) -> name + type`` fragments of one rank."""

        def build(key: tuple[int, int]) -> bytes:
            kind, peer = key
            if kind == OpKind.SEND:
                text = f"SEND {rank}->{peer}"
            elif kind == OpKind.RECV:
                text = f"RECV {rank}<-{peer}"
            else:
                text = OpKind(kind).name
            return Node(name=text, type=_NODE_TYPE[OpKind(kind)]).SerializeToString()

        return _Fragments(build)

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
        """Rank ``rank``'s file: its metadata record, then the records of operations
        ``start:stop`` (a table of fragment numbers, one slot a field, laid out by
        :func:`~.assembly.gather`)."""
        ops = algo.ops
        n = stop - start
        fragments = FragmentList()
        slots = np.zeros((n, len(_SLOTS)), dtype=np.int64)
        kind = ops.kind[start:stop].astype(np.int64)
        peer = ops.peer[start:stop].astype(np.int64)
        node_ids = ops.node_id[start:stop].astype(np.int64)
        send, recv = kind == OpKind.SEND, kind == OpKind.RECV
        comm, local = send | recv, ~(send | recv)
        slots[:, _SLOTS["id"]] = fragments.of(self.ids, [node_ids])
        slots[:, _SLOTS["head"]] = fragments.of(self._heads(rank), [kind, peer])
        self._dependencies(fragments, slots, ops, start, stop, node_ids)

        def put(slot: str, mask: np.ndarray, table, *columns: np.ndarray, key: Callable | None = None) -> None:
            at = np.flatnonzero(mask)
            if len(at):
                slots[at, _SLOTS[slot]] = fragments.of(table, [c[at] for c in columns], key)

        # SEND / RECV: comm_type + peer, comm_size, comm_tag, the chunks, further runs, route
        put("a", comm, self.comm, kind, peer)
        put("b", comm, self.sizes, nbytes[start:stop].astype(np.int64))
        put("c", comm, self.tags, ops.tag[start:stop].astype(np.int64))
        count = self._first_counts(fragments, slots, ops, start, stop, comm)
        has_chunks = count >= 0
        sbuf, soff = ops.src_buf[start:stop].astype(np.int64), ops.src_off[start:stop].astype(np.int64)
        dbuf, doff = ops.dst_buf[start:stop].astype(np.int64), ops.dst_off[start:stop].astype(np.int64)
        reads = (send | local & (sbuf >= 0)) & has_chunks
        writes = (recv | local & (sbuf >= 0)) & has_chunks
        put("src", reads, self.sources, sbuf, soff, count)
        put("dst", writes, self.destinations, dbuf, doff, count)
        route = ops.route[start:stop].astype(np.int64)
        put("path", comm & (route >= 0), self.paths, route, key=lambda r: algo.routes[r])
        # COMP: duration_micros, is_cpu_op, cc_op, cc_duration_ns
        duration = durations[start:stop]
        timed = local & (duration == duration)  # not NaN
        put("micros", timed, self.durations, np.rint(np.where(timed, duration, 0.0) / 1000.0).astype(np.int64))
        slots[local, _SLOTS["a"]] = fragments.add([self.not_cpu])[0]
        put("b", reads & local, self.local_op, kind)
        put("exact", timed, self.exact, duration.astype(np.float64))
        threadblock, channel = ops.threadblock[start:stop], ops.channel[start:stop]
        if not (threadblock.strides == (0,) and (n == 0 or threadblock[0] < 0)):  # a column: per operation
            put("tb", threadblock >= 0, self.threadblocks, threadblock.astype(np.int64), channel.astype(np.int64))
        lengths = fragments.lengths()[slots[:, 1:]].sum(axis=1)
        slots[:, _SLOTS["prefix"]] = fragments.of(self.prefixes, [lengths])
        return _metadata_record(algo, rank, size) + gather(fragments.pool(), slots)

    def _dependencies(self, fragments: FragmentList, slots: np.ndarray, ops, start: int, stop: int, node_ids: np.ndarray) -> None:
        """The ``data_deps`` slot: node ids of each operation's dependencies, one distinct list
        serialized once (grouped by length: each group is a table of equally long rows)."""
        first, last = int(ops.dep_ptr[start]), int(ops.dep_ptr[stop])
        ptr = ops.dep_ptr[start : stop + 1].astype(np.int64) - first
        deps = ops.dep_idx[first:last].astype(np.int64) - start
        if not np.array_equal(node_ids, np.arange(stop - start)):
            deps = node_ids[deps]  # dependencies name node ids, so foreign ids survive
        how_many = np.diff(ptr)
        for length in np.unique(how_many[how_many > 0]).tolist():
            at = np.flatnonzero(how_many == length)
            columns = [deps[ptr[at] + j] for j in range(length)]
            slots[at, _SLOTS["deps"]] = fragments.of(self.deps, columns, key=lambda *ids: ids)

    def _first_counts(self, fragments: FragmentList, slots: np.ndarray, ops, start: int, stop: int, comm: np.ndarray) -> np.ndarray:
        """The chunk counts as ``cc_src`` / ``cc_dst`` name them (a several-range message's first
        range), filling the ``cc_ranges`` slot of the SENDs and RECVs with further ranges
        (``offset, count, ...``: each serialized by refilling one node)."""
        count = ops.count[start:stop].astype(np.int64)
        if not ops.multi_range:
            return count
        lo = int(ops.more_ptr[start])
        ptr = ops.more_ptr[start : stop + 1].astype(np.int64) - lo
        per = np.diff(ptr)
        offsets = ops.more_off[lo : lo + int(ptr[-1])].astype(np.int64)
        counts = ops.more_count[lo : lo + int(ptr[-1])].astype(np.int64)
        count -= np.bincount(np.repeat(np.arange(stop - start), per), weights=counts, minlength=stop - start).astype(np.int64)
        pairs = np.stack([offsets, counts], axis=1).ravel().tolist()
        at = np.flatnonzero((per > 0) & comm & (count >= 0))
        ranges = self.ranges
        serialized = [ranges(pairs[a:b]) for a, b in zip((2 * ptr[at]).tolist(), (2 * ptr[at + 1]).tolist())]
        slots[at, _SLOTS["ranges"]] = fragments.add(serialized)
        return count


_SLOTS = {name: i for i, name in enumerate(("prefix", "id", "head", "deps", "micros", "a", "b", "c", "src", "dst", "ranges", "exact", "path", "tb"))}
"""A node record's parts in field-number order (protobuf's): its length prefix, ``id``,
``name`` + ``type``, ``data_deps``, ``duration_micros``, then attributes -- SEND / RECV:
``comm_type`` + peer (a), ``comm_size`` (b), ``comm_tag`` (c), ``cc_src`` or ``cc_dst``,
``cc_ranges``, ``cc_route``; COMP: ``is_cpu_op`` (a), ``cc_op`` (b), ``cc_src``, ``cc_dst``,
``cc_duration_ns`` -- and ``cc_threadblock``."""


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
    if algo.placement:
        attrs.append(("cc_placement", "int64_list", algo.placement))
    if algo.pattern is not None:
        attrs.append(("cc_pattern", "string_list", pattern_lines(algo.pattern)))
    if algo.provenance:
        attrs.append(("cc_provenance", "string_list", [f"{k}={v}" for k, v in algo.provenance.items()]))
    metadata = GlobalMetadata(version=ET_VERSION, attr=[_attribute(*a) for a in attrs])
    sink = io.BytesIO()
    protolib.encodeMessage(sink, metadata)
    return sink.getvalue()


__all__ = ["BYTES_PER_OP", "PART_OPS", "file_bytes", "rank_parts", "rank_path", "write_algorithm", "write_algorithm_hashed", "write_files_atomically", "write_parts"]
