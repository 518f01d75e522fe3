"""CollectiveAlgorithm: the one in-memory representation every producer and consumer shares.

>>> from chakra_collectives.ir import AlgorithmBuilder, Buffer, Collective
>>> b = AlgorithmBuilder(Collective.ALL_GATHER, num_ranks=2, chunk_count=2, size_bytes=1024)
>>> for r in range(2):
...     _ = b.copy(r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r), count=1)
...     _ = b.transfer(r, 1 - r, src=(Buffer.INPUT, 0), dst=(Buffer.OUTPUT, r), count=1)
>>> algo = b.build()
>>> algo.num_ops, algo.chunk_bytes(), algo.op_bytes().tolist()
(6, 512, [512, 512, 512, 512, 512, 512])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from chakra_collectives.errors import InputError
from chakra_collectives.ir.collective import Collective
from chakra_collectives.ir.pattern import ChunkPattern
from chakra_collectives.ir.ops import NONE, Buffer, Op, OpKind, OpTable
from chakra_collectives.units import bytes_per_ns


@dataclass(frozen=True, eq=False)
class CollectiveAlgorithm:
    """A collective algorithm: what it claims to compute and every rank's program.

    Attributes
    ----------
    collective:
        The collective it claims (the verifier proves it when chunk identity is present).
    num_ranks:
        Ranks taking part; rank ids are positions in the communicator.
    chunk_count:
        ``C``: the collective's size ``S`` (bytes of the larger per-rank buffer) is cut into
        ``C`` chunks of ``ceil(S / C)`` bytes (sizes not divisible by ``C`` are padded up, as
        NCCL pads; :meth:`chunk_bytes` gives the padded value).
    ops:
        Every rank's operations (:class:`~chakra_collectives.ir.ops.OpTable`).
    input_chunks, output_chunks, scratch_chunks:
        Per-rank buffer sizes in chunks.
    size_bytes:
        The collective size the algorithm is written/replayed for unless told otherwise.
    inplace:
        In-place call: all-reduce output *is* the input; all-gather input is the output at
        offset ``rank*K``; reduce-scatter output is the input at offset ``rank*K``.
    root:
        Root rank of broadcast/reduce.
    name:
        Free-form label (MSCCL ``name``, synthesizer description...).
    provenance:
        Free-form ``key: value`` strings describing where the algorithm came from.
    routes:
        Paths through the network that SENDs name in their ``route`` column: each a tuple of
        node ids from the sender's NPU to the receiver's (switches in between), for algorithms
        whose rank ``r`` runs on NPU ``r`` (a synthesizer that chose its switch paths, such as
        ForestColl). SENDs without a route take the network model's.
    placement:
        The fabric NPU each rank runs on, in rank order, for an algorithm synthesized for a
        process group embedded in a larger fabric (rank ``r`` on NPU ``placement[r]``; routes
        then name fabric node ids). Empty: rank ``r`` runs on NPU ``r``.
    pattern:
        The pre- and postcondition of a :attr:`Collective.PATTERN` algorithm (``None`` for the
        others).
    """

    collective: Collective
    num_ranks: int
    chunk_count: int
    ops: OpTable
    input_chunks: np.ndarray
    output_chunks: np.ndarray
    scratch_chunks: np.ndarray
    size_bytes: int
    inplace: bool = False
    root: int | None = None
    name: str = ""
    provenance: dict[str, str] = field(default_factory=dict)
    routes: tuple[tuple[int, ...], ...] = ()
    placement: tuple[int, ...] = ()
    pattern: ChunkPattern | None = None

    # ------------------------------------------------------------------ sizes
    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def share(self) -> int:
        """``K``: chunks per rank (``chunk_count // num_ranks``)."""
        return max(1, self.chunk_count // self.num_ranks)

    def chunk_bytes(self, size_bytes: int | None = None) -> int:
        """Bytes of one chunk for a collective of ``size_bytes`` (default :attr:`size_bytes`)."""
        size = self.size_bytes if size_bytes is None else size_bytes
        return -(-size // self.chunk_count)

    @property
    def has_chunk_identity(self) -> bool:
        """True when every data-moving operation says which chunks it moves."""
        moving = self.ops.kind != OpKind.COMPUTE
        return bool(np.all(self.ops.count[moving] >= 0))

    def op_bytes(self, size_bytes: int | None = None) -> np.ndarray:
        """Bytes each operation moves (or reduces/copies) for a collective of ``size_bytes``.

        Chunk-identified operations scale exactly; byte-only operations (foreign files) are
        scaled in proportion to ``size_bytes / self.size_bytes``.
        """
        size = self.size_bytes if size_bytes is None else size_bytes
        derived = self.ops.count.astype(np.int64) * self.chunk_bytes(size)
        explicit = self.ops.nbytes
        if size != self.size_bytes:
            explicit = np.where(explicit >= 0, np.ceil(explicit * (size / self.size_bytes)).astype(np.int64), explicit)
        result = np.where(explicit >= 0, explicit, derived)
        return np.where(self.ops.kind == OpKind.COMPUTE, np.maximum(explicit, 0), result)

    def local_durations(self, nbytes: np.ndarray, reduce_bandwidth_gbps: float | None = None) -> np.ndarray:
        """Duration (ns) of every local operation (REDUCE, COPY, COMPUTE): its own
        ``duration_ns``, else -- when ``reduce_bandwidth_gbps`` is given and it processes bytes
        (``nbytes``, from :meth:`op_bytes`) -- ``bytes / bandwidth``; NaN where unknown and for
        SEND / RECV. The one rule for what local work costs: the ET writer stores it, the
        network model times it (:meth:`~chakra_collectives.network.NetworkModel.local_ns`).

        >>> from chakra_collectives.synth.baselines import ring
        >>> algo = ring(Collective.ALL_GATHER, 2, size_bytes=2**20)     # SEND, RECV, COPY per rank
        >>> algo.local_durations(algo.op_bytes()).tolist()[:3]
        [nan, nan, nan]
        >>> algo.local_durations(algo.op_bytes(), reduce_bandwidth_gbps=1e9 / 2**30).tolist()[:3]   # 1 byte/ns
        [nan, nan, 524288.0]
        """
        local = self.ops.kind > OpKind.RECV
        durations = np.where(local, self.ops.duration_ns, np.nan)
        if reduce_bandwidth_gbps is not None:
            if not reduce_bandwidth_gbps > 0:
                raise InputError(f"reduce bandwidth must be positive, got {reduce_bandwidth_gbps} GB/s")
            derive = local & np.isnan(durations) & (nbytes > 0)
            durations[derive] = nbytes[derive] / bytes_per_ns(reduce_bandwidth_gbps)
        return durations

    def buffer_chunks(self, rank: int, buffer: Buffer) -> int:
        return int((self.input_chunks, self.output_chunks, self.scratch_chunks)[buffer][rank])

    # ------------------------------------------------------------------ access
    def rank_bounds(self) -> np.ndarray:
        return self.ops.rank_bounds(self.num_ranks)

    def ops_of(self, rank: int) -> Iterator[Op]:
        """Readable views of ``rank``'s operations, in program order."""
        bounds = self.rank_bounds()
        for index in range(bounds[rank], bounds[rank + 1]):
            yield self.ops.op(index)

    def resolve(self, rank, buffer, offset):
        """Map slots to the storage they alias under the in-place rules (works on arrays too).

        >>> from chakra_collectives.ir import Collective
        >>> algo = _empty(Collective.ALL_GATHER, inplace=True)
        >>> [int(v) for v in algo.resolve(rank=1, buffer=Buffer.INPUT, offset=0)]
        [1, 2]
        """
        if not self.inplace:
            return buffer, offset
        collective = self.collective
        if collective is Collective.ALL_GATHER:
            moved, target, shift = np.equal(buffer, Buffer.INPUT), Buffer.OUTPUT, np.multiply(rank, self.share)
        elif collective is Collective.REDUCE_SCATTER:
            moved, target, shift = np.equal(buffer, Buffer.OUTPUT), Buffer.INPUT, np.multiply(rank, self.share)
        elif collective in (Collective.CUSTOM, Collective.GATHER, Collective.SCATTER, Collective.PATTERN):
            return buffer, offset
        else:  # all-reduce, all-to-all, broadcast, reduce: the output is the input
            moved, target, shift = np.equal(buffer, Buffer.OUTPUT), Buffer.INPUT, 0
        return np.where(moved, int(target), buffer), np.where(moved, np.add(offset, shift), offset)

    def with_ops(self, ops: OpTable) -> "CollectiveAlgorithm":
        return replace(self, ops=ops)

    def equals(self, other: "CollectiveAlgorithm") -> bool:
        """Exact equality of everything the algorithm says (used by round-trip tests)."""
        return (
            self.collective == other.collective
            and self.num_ranks == other.num_ranks
            and self.chunk_count == other.chunk_count
            and self.size_bytes == other.size_bytes
            and self.inplace == other.inplace
            and self.root == other.root
            and self.name == other.name
            and self.provenance == other.provenance
            and self.routes == other.routes
            and self.placement == other.placement
            and self.pattern == other.pattern
            and np.array_equal(self.input_chunks, other.input_chunks)
            and np.array_equal(self.output_chunks, other.output_chunks)
            and np.array_equal(self.scratch_chunks, other.scratch_chunks)
            and self.ops.equals(other.ops)
        )

    def describe(self) -> str:
        """One line: collective, ranks, chunks, ops."""
        return (
            f"{self.collective.value} over {self.num_ranks} ranks, {self.chunk_count} chunks, "
            f"{self.num_ops} ops" + (f" ({self.name})" if self.name else "")
        )


def _empty(collective: Collective, *, num_ranks: int = 2, inplace: bool = False) -> CollectiveAlgorithm:
    """A tiny algorithm with no operations (for examples)."""
    table = OpTable.from_columns(rank=[], dep_ptr=[0], dep_idx=[])
    sizes = [collective.buffer_chunks(rank=r, num_ranks=num_ranks, chunk_count=num_ranks * 2) for r in range(num_ranks)]
    return CollectiveAlgorithm(
        collective=collective,
        num_ranks=num_ranks,
        chunk_count=num_ranks * 2,
        ops=table,
        input_chunks=np.array([s[0] for s in sizes]),
        output_chunks=np.array([s[1] for s in sizes]),
        scratch_chunks=np.zeros(num_ranks, dtype=np.int64),
        size_bytes=1024,
        inplace=inplace,
    )


__all__ = ["CollectiveAlgorithm", "NONE"]
