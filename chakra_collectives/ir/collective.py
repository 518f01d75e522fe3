"""Which collective an algorithm claims, and what that means in chunks.

A collective of ``S`` bytes over ``N`` ranks is cut into ``C`` chunks (``chunk_count``): ``S`` is
the size of the larger per-rank buffer (ASTRA-sim's ``comm_size``; MSCCL's ``nchunksperloop`` is
``C``) and each chunk is ``S / C`` bytes. ``K = C / N`` chunks are each rank's share.

Symbolic contents
-----------------
The verifier fills buffers with symbolic values ``(index, ranks)``: ``index`` names a chunk of
the collective, ``ranks`` (a bitmask) says whose contributions have been summed into it. A
plain copy of rank ``r``'s data has exactly one bit set; a finished all-reduce chunk has all
``N`` bits. The tables below give each collective's precondition (what each input slot holds
at the start) and postcondition (what each output slot must hold at the end).

============== ===================== ===================== ===================================
collective     input slots           output slots          postcondition of output[r][s]
============== ===================== ===================== ===================================
all-gather     K, holds (r*K+s, r)   C                     (s, rank s // K)
reduce-scatter C, holds (s, r)       K                     (r*K+s, all ranks)
all-reduce     C, holds (s, r)       C                     (s, all ranks)
all-to-all     C, holds (s, r)       C                     (r*K + s%K, rank s // K)
broadcast      C on root, else 0     C                     (s, root)
reduce         C, holds (s, r)       C on root, else 0     (s, all ranks) on root
gather         K, holds (r*K+s, r)   C on root, else 0     (s, rank s // K) on root
scatter        C on root, (s, root)  K                     (r*K+s, root)
pattern        C, as the pattern     C                     as the pattern
custom         as declared           as declared           none: structure and deadlock only
============== ===================== ===================== ===================================

A *pattern* (:class:`~chakra_collectives.ir.pattern.ChunkPattern`, carried by the algorithm)
names, per chunk ``s``, the ranks that hold it before (their input slot ``s`` holds ``(s, h)``,
``h`` the first of them) and the ranks that must hold it after (their output slot ``s``); the
other slots are unconstrained.

>>> Collective.parse("allreduce") is Collective.ALL_REDUCE
True
>>> Collective.parse("reduce_scatter").value
'reduce-scatter'
>>> Collective.ALL_GATHER.buffer_chunks(rank=1, num_ranks=4, chunk_count=8)
(2, 8)
"""

from __future__ import annotations

from enum import Enum

from chakra_collectives.errors import InputError


class Collective(str, Enum):
    """The collectives chakra-collectives knows the meaning of."""

    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"
    ALL_TO_ALL = "all-to-all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    PATTERN = "pattern"
    CUSTOM = "custom"

    @classmethod
    def parse(cls, text: str) -> "Collective":
        """Accept the spellings of Chakra, MSCCL, NCCL and ASTRA-sim (``allreduce``, ``ALL_REDUCE``, ``ar``...)."""
        key = text.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
        found = _ALIASES.get(key)
        if found is None:
            valid = ", ".join(c.value for c in cls)
            raise InputError(f"unknown collective {text!r} (valid: {valid})")
        return found

    @property
    def has_root(self) -> bool:
        return self in (Collective.BROADCAST, Collective.REDUCE, Collective.GATHER, Collective.SCATTER)

    @property
    def reduces(self) -> bool:
        """True when the collective sums contributions of several ranks."""
        return self in (Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.REDUCE)

    @property
    def chakra_comm_type(self) -> int | None:
        """Chakra's ``CollectiveCommType`` value (``None`` for custom)."""
        return _CHAKRA_COMM_TYPE.get(self)

    @classmethod
    def from_chakra_comm_type(cls, value: int) -> "Collective":
        for collective, code in _CHAKRA_COMM_TYPE.items():
            if code == value:
                return collective
        raise InputError(f"Chakra collective type {value} has no chakra-collectives meaning")

    def size_of_call(self, comm_size: int, group_size: int) -> int:
        """The size (the larger per-rank buffer, as everywhere here) of a workload call whose
        Chakra ``comm_size`` is ``comm_size``, over ``group_size`` ranks. ``comm_size`` is each
        rank's input (ASTRA-sim's convention), so an All-Gather's is its shard.

        >>> Collective.ALL_GATHER.size_of_call(65536, 16), Collective.ALL_REDUCE.size_of_call(65536, 16)
        (1048576, 65536)
        """
        return comm_size * group_size if self is Collective.ALL_GATHER else comm_size

    def buffer_chunks(self, *, rank: int, num_ranks: int, chunk_count: int, root: int | None = None) -> tuple[int, int]:
        """Default ``(input, output)`` buffer sizes in chunks of ``rank`` (not for custom)."""
        share = chunk_count // num_ranks
        if self in (Collective.ALL_GATHER, Collective.GATHER):
            return share, (chunk_count if self is Collective.ALL_GATHER or rank == root else 0)
        if self in (Collective.REDUCE_SCATTER, Collective.SCATTER):
            return (chunk_count if self is Collective.REDUCE_SCATTER or rank == root else 0), share
        if self is Collective.BROADCAST:
            return (chunk_count if rank == root else 0), chunk_count
        if self is Collective.REDUCE:
            return chunk_count, (chunk_count if rank == root else 0)
        if self is Collective.CUSTOM:
            raise ValueError("a custom collective declares its own buffer sizes")
        return chunk_count, chunk_count

    def initial_value(self, *, rank: int, slot: int, share: int) -> tuple[int, int]:
        """Symbolic value ``(index, ranks bitmask)`` of ``input[rank][slot]`` at the start
        (a pattern's come from its :class:`~chakra_collectives.ir.pattern.ChunkPattern`)."""
        if self is Collective.PATTERN:
            raise ValueError("a pattern collective's values come from its pattern")
        if self in (Collective.ALL_GATHER, Collective.GATHER):
            return rank * share + slot, 1 << rank
        return slot, 1 << rank

    def initial_values(self, *, rank: int, num_slots: int, share: int) -> list[tuple[int, int]]:
        """:meth:`initial_value` of ``input[rank][0:num_slots]``: consecutive chunks from the
        first slot's, every slot holding the same ranks-bitmask object (one per rank, not one
        1,024-bit integer per slot at 1,024 ranks).

        >>> Collective.ALL_GATHER.initial_values(rank=2, num_slots=2, share=2)
        [(4, 4), (5, 4)]
        """
        first, ranks = self.initial_value(rank=rank, slot=0, share=share)
        return [(first + slot, ranks) for slot in range(num_slots)]

    def expected_value(self, *, rank: int, slot: int, share: int, num_ranks: int, root: int | None) -> tuple[int, int] | None:
        """Symbolic value ``output[rank][slot]`` must hold at the end (``None``: unconstrained)."""
        everyone = (1 << num_ranks) - 1
        if self is Collective.ALL_GATHER:
            return slot, 1 << (slot // share)
        if self is Collective.REDUCE_SCATTER:
            return rank * share + slot, everyone
        if self is Collective.ALL_REDUCE:
            return slot, everyone
        if self is Collective.ALL_TO_ALL:
            return rank * share + slot % share, 1 << (slot // share)
        if self is Collective.BROADCAST:
            return slot, 1 << root  # type: ignore[operator]
        if self is Collective.REDUCE:
            return (slot, everyone) if rank == root else None
        if self is Collective.GATHER:
            return (slot, 1 << (slot // share)) if rank == root else None
        if self is Collective.SCATTER:
            return rank * share + slot, 1 << root  # type: ignore[operator]
        if self is Collective.PATTERN:
            raise ValueError("a pattern collective's values come from its pattern")
        return None


_ALIASES = {
    "allgather": Collective.ALL_GATHER,
    "ag": Collective.ALL_GATHER,
    "reducescatter": Collective.REDUCE_SCATTER,
    "reducescatterblock": Collective.REDUCE_SCATTER,
    "rs": Collective.REDUCE_SCATTER,
    "allreduce": Collective.ALL_REDUCE,
    "ar": Collective.ALL_REDUCE,
    "alltoall": Collective.ALL_TO_ALL,
    "a2a": Collective.ALL_TO_ALL,
    "broadcast": Collective.BROADCAST,
    "bcast": Collective.BROADCAST,
    "reduce": Collective.REDUCE,
    "gather": Collective.GATHER,
    "scatter": Collective.SCATTER,
    "pattern": Collective.PATTERN,
    "custom": Collective.CUSTOM,
}

_CHAKRA_COMM_TYPE = {
    Collective.ALL_REDUCE: 0,
    Collective.REDUCE: 1,
    Collective.ALL_GATHER: 2,
    Collective.GATHER: 3,
    Collective.SCATTER: 4,
    Collective.BROADCAST: 5,
    Collective.ALL_TO_ALL: 6,
    Collective.REDUCE_SCATTER: 7,
}
